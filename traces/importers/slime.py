"""slime: the files `--save-debug-rollout-data PATH_TEMPLATE` writes, one per rollout.

Followed: THUDM/slime @ 624b824a (v0.3.1-38, Aug 2026), `slime/observability/rollout_data_utils.py`,
`save_debug_rollout_data`, and `slime/utils/types.py`, `Sample.to_dict`. Each file is a
`torch.save` of ``{"rollout_id": N, "samples": [Sample.to_dict(), ...]}`` named by the
template (`{rollout_id}` filled in; evaluation files get `eval_` before the id, as in
`eval_3.pt` or `rollout_eval_3.pt`, and are skipped when a directory is given). A sample
dict holds, among others,

- `group_index`, `index`: the prompt group and the sample's running index (both stamped by
  the data source, `slime/rollout/data_source.py`);
- `rollout_id` (v0.3.1 on; `group_id` in v0.3.0): the rollout a fanned-out sample came from,
  None otherwise;
- `prompt` (text or chat messages), `tokens` (prompt + response ids), `response_length`;
- `reward` (a number, or a dict when a reward key picks the value);
- `status`: "completed", "truncated", "aborted", "failed" or "pending".

The step is the file's `rollout_id`; the response is the last `response_length` ids of
`tokens`; `status == "truncated"` marks a response cut at its budget (`--max-tokens`,
`--rollout-max-response-len`, is not dumped). A prompt's id is the hash of its prompt ids,
so it is the same in every rollout (group indices run on). Epochs: `--steps-per-epoch`.

Dict rewards: a reward function may return a dict (`--rm-type dapo`:
`{"score", "acc", "pred"}`, `slime/rollout/rm_hub/math_dapo_utils.py`), of which slime
trains on `reward[args.reward_key]` (`Sample.get_reward_value`). `--reward-key KEY` takes the
same value (a number; NaN as `common.as_reward`); without it such rewards are left out and
counted in the notes (`reward_dicts`).

Fan-out (v0.3.0 on): a custom generate function may split one rollout into several training
samples (sub-agents, context compaction: `slime/agent/trajectory.py`,
`_SampleBuilder.to_sample`; `examples/multi_agent/agent_system.py`;
`slime/rollout/_fanout_test_helpers.py`, `compact_generate`). The siblings are copies of the
rollout's input sample with their own `tokens`, so they share `group_index` and `index`, and
carry the same `rollout_id` (the input's `index`; `validate_rollout_id_annotated` in
`slime/observability/rollout_data_utils.py` enforces it). v0.3.0 (bf14dc21) named the field
`group_id` (renamed in a3c5462a, renamed back in 44d29ee5). Each sibling is a response of its
prompt's group (`group_index`), which then holds every sibling of its rollouts; the notes
count them (`fanout_rollouts`, `fanout_samples`). Where the fan-out leaves groups of
different sizes, which a trace cannot hold, the import is refused naming the field and
`--group-size 1` (every sample a group of its own); `--group-size G` cuts each group, in
rollout order, into groups of G as for any format.

Multi-turn samples (a generate function that calls tools between turns:
`examples/search-r1/generate_with_search.py`, `examples/retool/generate_with_retool.py`,
`examples/geo3k_vlm_multi_turn/rollout.py`; agent sessions: `slime/agent/trajectory.py`,
`TrajectoryManager` from v0.3.1, `merge_turns` in v0.3.0) hold every turn in the response:
`response_length` counts the generated tokens and the tool's or environment's between them,
and `loss_mask` (one entry per response token, `Sample.append_response_tokens`) is 1 on the
generated ones only. The response replayed is the runs of 1s, its turns, and its token ids
are theirs; the tokens before the first run belong to the prompt of its request (context
an agent sample re-emits with 0: a later leaf's shared turns, `_SampleBuilder.append_turn`;
a partial rollout's earlier tokens under `--mask-offpolicy-in-partial-rollout`,
`slime/rollout/sglang_rollout.py`, `generate_and_rm`), those between turns are counted in
neither. As for NeMo-RL, the budget is the number of turns times `--max-tokens` (each call's
`max_new_tokens`), each turn must fit it, and the notes count samples by turns (`turns`);
the prompt id stays that of the dataset's prompt (the tokens before the response). A sample
was cut at its budget where its status is "truncated"; agent samples are always "completed"
and record it in `metadata["truncated"]` (the chain's last turn ended by length,
`TrajectoryManager._chain_to_samples`; v0.3.0, bf14dc21: `metadata["finish_reason"]`,
`make_turn_segment`). A sample whose mask ends in the environment's tokens was truncated by
the context after a turn that stopped (retool's observation overflow, geo3k's spent budget),
so it is 'stop'. A sample whose mask marks no token (a partial rollout with no budget left,
an agent's aborted placeholder, `examples/coding_agent_rl/generate.py`, `_abort_result`) is
left out and counted (`samples_without_response`).

Not in the dump, so not corrected: a turn whose call had less than `--max-tokens` (retool
and the agent adapters cap it by the context left, `slime/agent/adapters/common.py`,
`call_sglang_generate`; geo3k spends one budget over all turns) reads as 'stop' unless it
is the last of a truncated sample; an agent turn re-tokenized differently in the next
prompt (`DriftKind.REALIGN`) is overwritten by the prompt's tokens with 0, so it is not
counted; `metadata["truncated"]` is the chain's, copied onto each sample a fork split it
into; a sample cut at the session's `max_context_tokens` (`_SampleBuilder.to_sample`) lost
the end of its last turn; under `--mask-offpolicy-in-partial-rollout` the continuation's
budget was `--max-tokens` less the earlier tokens.

Only ``torch.load(path, weights_only=True)`` is used: unpickling runs code, and a dump is
someone else's file. A file that needs more than tensors and plain containers is refused.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from simctl.traces.importers.common import (
    DumpError,
    FormatFacts,
    ImportOptions,
    RowSet,
    as_int,
    as_reward,
    as_token_ids,
    find_files,
    get,
    runs_of_ones,
    show_value,
    turn_budget,
)

UPSTREAM = "THUDM/slime@624b824a slime/observability/rollout_data_utils.py (save_debug_rollout_data)"
# A dump file; not an evaluation one, whose name has `eval_` and digits where the template's
# `{rollout_id}` is: at its start (`{rollout_id}.pt`, --dump-details) or after a separator
# (`rollout_{rollout_id}.pt`, `data_{rollout_id}.pt`: slime's docs and examples).
_NAME = re.compile(r"^(?!(?:.*[^A-Za-z0-9])?eval_\d).*\.pt$")
# `Sample.Status`'s values (slime/utils/types.py), which `to_dict` writes
_STATUSES = ("pending", "completed", "truncated", "aborted", "failed")


class _Inert:
    """Stands in for an object of a class the importer never reads (a VLM run's PIL images
    in `multimodal_inputs`): unpickled into this, keeping nothing, running no code of it."""

    def __setstate__(self, state: object) -> None:
        pass


def _allowed() -> list[Any]:
    """What torch's restricted unpickler may also build, beside tensors: numpy arrays and
    scalars (routing replay's `rollout_routed_experts`, v0.2.0-v0.3.0; files written with
    numpy 1.x name `numpy.core`, 2.x `numpy._core`), and PIL images as `_Inert`. This is
    torch's own allowlist mechanism (`torch.serialization.safe_globals`): nothing else is
    imported or called."""
    import numpy as np

    core: Any = importlib.import_module("numpy._core.multiarray")  # (numpy >= 2: simctl's)
    dtypes = ("b", "B", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "?")
    out: list[Any] = [core._reconstruct, np.ndarray, np.dtype, core.scalar]
    out += [type(np.dtype(t)) for t in dtypes]
    out += [
        (core._reconstruct, "numpy.core.multiarray._reconstruct"),
        (core.scalar, "numpy.core.multiarray.scalar"),
    ]
    out += [
        (_Inert, f"PIL.{name}")
        for name in ("Image.Image", "PngImagePlugin.PngImageFile", "JpegImagePlugin.JpegImageFile")
    ]
    return out


def load(path: Path) -> Any:
    """The file's object through torch's restricted unpickler (with `_allowed`), or a
    one-line refusal that names what it would have had to build."""
    try:
        import torch
    except ImportError:
        raise DumpError("slime dumps are torch files: pip install 'simctl[torch]'") from None
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols it then refuses
            warnings.simplefilter("ignore", UserWarning)
            with torch.serialization.safe_globals(_allowed()):
                return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        try:  # (reads the pickle's opcodes, executing nothing)
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:
            unsafe = []
        allowed = {
            item[1] if isinstance(item, tuple) else f"{item.__module__}.{item.__qualname__}"
            for item in _allowed()
        }
        unsafe = [u for u in unsafe if u not in allowed]
        if not unsafe:  # (no object it refuses to build: the file itself is damaged or empty)
            shown = first if len(first) <= 80 else first[:77] + "..."
            raise DumpError(
                f"{path}: not a readable torch.save file ({type(exc).__name__}: {shown})"
            ) from None
        raise DumpError(
            f"{path}: refused: only torch.load(weights_only=True) loading is allowed, and it would build "
            f"{', '.join(unsafe[:3])}"
        ) from None


def _plain(value: Any) -> Any:
    """Tensors (weights_only allows them) as lists and numbers."""
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, list) else value


def _reward(rows: RowSet, value: Any, key: str | None, at: str) -> float | None:
    """A sample's reward: a number; a dict's value at `key` (`--reward-key`), or None (counted
    in the notes) without one; None where the sample has none (not rewarded)."""
    if isinstance(value, dict):
        if key is None:
            rows.count("reward_dicts")
            return None
        if key not in value:
            keys = ", ".join(sorted(str(k) for k in value))
            raise DumpError(f"{at}: field 'reward' has no key '{key}' (--reward-key; its keys: {keys[:80]})")
        rows.notes["reward_key"] = key
        return as_reward(_plain(value[key]), f"reward[{key}]", at, rows)
    if value is None:
        return None
    if not isinstance(value, int | float):
        raise DumpError(
            f"{at}: field 'reward' is {show_value(value)}, expected a number or a dict of numbers"
        )
    return as_reward(value, "reward", at, rows)


def _loss_mask(sample: dict[str, Any], length: int, at: str) -> list[int] | None:
    """The sample's `loss_mask` over its response tokens (1: generated, 0: a tool's or the
    environment's), None where it has none."""
    mask = _plain(sample.get("loss_mask"))
    if mask is None:
        return None
    if not isinstance(mask, list) or any(m not in (0, 1) for m in mask):
        raise DumpError(f"{at}: field 'loss_mask' is not a list of 0 and 1")
    if len(mask) != length:
        raise DumpError(f"{at}: field 'loss_mask' has {len(mask)} entries, 'response_length' is {length}")
    return mask


def _truncated(sample: dict[str, Any], status: str | None, mask: list[int] | None) -> bool | None:
    """Whether the response was cut at its budget: status "truncated", or, for agent samples
    (always "completed"), `metadata["truncated"]` (v0.3.1 on) or `metadata["finish_reason"]`
    "length" (v0.3.0). A multi-turn sample whose mask ends in the environment's tokens was
    cut by the context after its last turn, which stopped."""
    md = sample.get("metadata")
    md = md if isinstance(md, dict) else {}
    if status is None and "truncated" not in md and "finish_reason" not in md:
        return None
    cut = status == "truncated" or md.get("truncated") is True or md.get("finish_reason") == "length"
    return cut and (mask is None or mask[-1] == 1)


def _sample(
    rows: RowSet, sample: Any, step: int, i: int, where: str, opts: ImportOptions
) -> tuple[list[int], list[int], int] | None:
    """Adds one sample to `rows`; returns its (prompt ids, generated ids, turns), None for
    an aborted or failed sample with no response, or one whose loss mask marks no token
    (counted in the notes)."""
    if not isinstance(sample, dict):
        raise DumpError(f"{where}: samples[{i}] is {type(sample).__name__}, expected a dict")
    at = f"{where} sample {i}"
    tokens = as_token_ids(_plain(get(sample, "tokens", at)), "tokens", at)
    length = as_int(_plain(get(sample, "response_length", at)), "response_length", at)
    if length == 0 and sample.get("status") in ("aborted", "failed"):
        # (a request aborted before its first token: nothing was generated to replay)
        rows.count("samples_without_response")
        return None
    if not 1 <= length < len(tokens):
        raise DumpError(
            f"{at}: field 'response_length' {length} must be in 1..{len(tokens) - 1} "
            f"('tokens' has {len(tokens)} ids, the prompt's first)"
        )
    start = len(tokens) - length
    mask = _loss_mask(sample, length, at)
    # (the generated turns: runs of 1 in the loss mask; the tokens before the first are the
    # prompt of its request, those between later turns are counted in neither)
    runs = [(0, length)] if mask is None else runs_of_ones(mask)
    if not runs:
        rows.count("samples_without_response")
        return None
    prompt = tokens[: start + runs[0][0]]
    generated = [t for a, b in runs for t in tokens[start + a : start + b]]
    turns = [b - a for a, b in runs]
    key = tuple(tokens[:start])  # (the dataset's prompt: its id is the same at every step)
    group = sample.get("group_index")
    status = sample.get("status")
    if status is not None and not isinstance(status, str):
        raise DumpError(f"{at}: field 'status' is {type(status).__name__}, expected text")
    if status is not None and status not in _STATUSES:
        raise DumpError(
            f"{at}: field 'status' is {show_value(status)}, expected one of {', '.join(_STATUSES)}"
        )
    order = sample.get("index")
    rows.add(
        at,
        step=step,
        group=key if group is None else as_int(_plain(group), "group_index", at),
        prompt=key,
        order=i if order is None else as_int(_plain(order), "index", at),
        prompt_len=len(prompt),
        response_len=len(generated),
        truncated=_truncated(sample, status, mask),
        budget=turn_budget(turns, opts.max_tokens, at),
        reward=_reward(rows, _plain(sample.get("reward")), opts.reward_key, at),
    )
    return prompt, generated, len(turns)


def _rollout(sample: dict[str, Any], at: str) -> tuple[str, int] | None:
    """The rollout a fanned-out sample came from, as (field, id); None where it has none."""
    for name in ("rollout_id", "group_id"):  # (v0.3.1 on; v0.3.0)
        value = _plain(sample.get(name))
        if value is not None:
            return name, as_int(value, name, at)
    return None


def _fanout(rows: RowSet, rollouts: list[tuple[str, int] | None], opts: ImportOptions) -> None:
    """Counts the fanned-out rollouts (several samples of one rollout id) in the notes, and
    refuses a fan-out that leaves groups of different sizes, unless --group-size says how
    to cut them: a trace's groups are all one size."""
    tagged = [(i, (rows.step[i], rows.group[i], r[1]), r) for i, r in enumerate(rollouts) if r is not None]
    siblings = Counter(key for _, key, _ in tagged)
    fanned = {key: n for key, n in siblings.items() if n > 1}
    if not fanned:
        return
    rows.notes["fanout_rollouts"] = len(fanned)
    rows.notes["fanout_samples"] = sum(fanned.values())
    sizes = set(Counter(zip(rows.step, rows.group, strict=True)).values())
    if opts.group_size is not None or len(sizes) == 1:
        return
    i, key, (name, rid) = next(t for t in tagged if t[1] in fanned)
    shown = ", ".join(str(n) for n in sorted(sizes)[:5])
    raise DumpError(
        f"{rows.where[i]}: field '{name}' {rid} is shared by {fanned[key]} samples (a fan-out: one "
        f"rollout split into several training samples), so the prompt groups (group_index) hold {shown} "
        "samples, and a trace's groups are all one size; pass --group-size 1 to import each sample as a "
        "group of its own"
    )


def read(paths: tuple[Path, ...], opts: ImportOptions) -> tuple[RowSet, FormatFacts]:
    # (`--dump-details DIR` writes the rollouts to DIR/rollout_data and per-rank training
    # batches, which are not rollouts, to DIR/train_data)
    files = find_files(
        paths, lambda p: bool(_NAME.match(p.name)) and "train_data" not in p.parts, "slime dump files (*.pt)"
    )
    rows = RowSet(files=files)
    prompts: list[list[int]] = []
    responses: list[list[int]] = []
    rollouts: list[tuple[str, int] | None] = []  # (a fanned-out sample's rollout, per row)
    turns: Counter[int] = Counter()  # (samples by their number of generated turns)
    for path in files:
        pack = load(path)
        where = str(path)
        if not isinstance(pack, dict):
            kind = type(pack).__name__
            raise DumpError(f"{path}: holds {kind}, expected a dict with 'rollout_id' and 'samples'")
        step = as_int(_plain(get(pack, "rollout_id", where)), "rollout_id", where)
        samples = get(pack, "samples", where)
        if not isinstance(samples, list) or not samples:
            raise DumpError(f"{path}: field 'samples' is not a non-empty list")
        for i, sample in enumerate(samples):
            got = _sample(rows, sample, step, i, where, opts)
            if got is not None:
                prompts.append(got[0])
                responses.append(got[1])
                turns[got[2]] += 1
                rollouts.append(_rollout(sample, f"{where} sample {i}"))
    rows.prompt_tokens, rows.response_tokens = prompts, responses
    if max(turns, default=1) > 1:
        rows.note_counts("turns", turns)
    _fanout(rows, rollouts, opts)
    if any(r is None for r in rows.reward):
        rows.reward = [None] * len(rows)
    return rows, FormatFacts()

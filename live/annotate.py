"""`simctl trace annotate`: the acceptance a real draft model would have had over a trace's
recorded tokens, written as `accept_<method>` (+ position buckets) into a new trace
(issue #16, "Acceptance from tokens").

The rule is the executor's. The torch engine verifies by exact match: a drafted token is
accepted when it equals the token the target produces at that position. A greedy drafter
proposes the argmax of its next-token distribution, and over a recorded sequence the
target's token is the recorded one, so the draft for response position i is accepted
exactly when ``argmax p_draft(. | prompt + response[:i]) == response[i]``. Within a verify
block position i is reached only when every earlier draft was accepted, i.e. when the
drafter's context *is* the recorded prefix, so each position's outcome is teacher-forced
and one forward pass over ``prompt + response[:-1]`` gives all of them.

`accept_<method>` is the mean of those outcomes over the response (the per-token
acceptance the simulator draws verification from); `accept_<method>_buckets[b]` is the mean
over positions ``[b*B, (b+1)*B)``, B the trace's `accept_bucket_tokens` (or
``--bucket-tokens`` when the trace has none).

Prompts: the trace's `prompt_tokens` when it has them; otherwise synthetic ids seeded by
(prompt_id, prompt_len), exactly as live/workload.py builds a trace's prompts for a live
run, so the drafter sees the context a live replay would give it. Token ids outside the
drafter's vocabulary are fed modulo its size (as live/workload.py does) and never count as
accepted; the numbers only mean something for a drafter that shares the target's tokenizer.

Requests are grouped by length into padded batches of at most `batch_tokens` tokens; the
LM head runs on slices of positions so a 49K-token vocabulary never materialises logits
for a whole batch. Imports torch: the command says which extra to install without it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from simctl.policies.draft_methods import DraftMethod
from simctl.traces.io import Trace, TraceError, write_trace
from simctl.traces.presets import ACCEPT_BUCKET_TOKENS
from simctl.traces.schema import BUCKET_SUFFIX, METHOD_RE, accept_column, bucket_column
from simctl.traces.validate import check_rows, load_valid_trace

#: The method a draft model stands for unless --method says otherwise (SpecActor's small
#: draft model; policies/draft_methods.py).
DEFAULT_METHOD = DraftMethod.DRAFT_SMALL.value
DEFAULT_BATCH_TOKENS = 4096  # padded tokens per forward pass
_HEAD_ROWS = 512  # positions whose logits exist at once
TORCH_EXTRA = "simctl trace annotate needs torch and transformers: pip install 'simctl[torch]'"


class AnnotateError(ValueError):
    """An annotate request that cannot be carried out; the message is one line."""


@dataclass(frozen=True)
class Annotation:
    """What one annotate run measured (for the command's summary line and tests)."""

    method: str
    drafter: str
    bucket_tokens: int
    requests: int
    positions: int
    accepted: int

    @property
    def acceptance(self) -> float:
        return self.accepted / self.positions if self.positions else 0.0


def missing_torch() -> str | None:
    """One line naming the extra to install when torch or transformers is absent."""
    ok = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
    return None if ok else TORCH_EXTRA


def check_method(method: str) -> str:
    """A method name annotate may write: well-formed and not a model-free one (those are
    replayed from the tokens themselves, sim/token_methods.py)."""
    if not METHOD_RE.match(method) or method.endswith(BUCKET_SUFFIX):
        raise AnnotateError(f"--method {method!r}: not a method name (lowercase letters, digits, _)")
    if method in {m.value for m in DraftMethod if m.model_free}:
        raise AnnotateError(
            f"--method {method!r}: a model-free method, replayed exactly from the trace's tokens; "
            "annotate measures a draft model (e.g. draft_small, draft_medium, eagle)"
        )
    return method


def greedy_matches(
    model: Any, contexts: list[np.ndarray], prompt_lens: list[int], vocab: int, batch_tokens: int
) -> list[np.ndarray]:
    """Per request: bool per response position, the drafter's greedy token given the prompt
    and the recorded prefix equals the recorded token. `contexts[j]` is prompt + response."""
    out: list[np.ndarray] = [np.zeros(0, bool)] * len(contexts)
    for batch in _batches([len(c) for c in contexts], batch_tokens):
        seqs = [contexts[j][:-1] for j in batch]
        preds = _argmax_next(model, seqs, vocab)
        for j, pred in zip(batch, preds, strict=True):
            p = prompt_lens[j]
            out[j] = pred[p - 1 :] == contexts[j][p:]
    return out


def _batches(lengths: list[int], batch_tokens: int) -> Iterator[list[int]]:
    """Request indices by length, cut so each padded batch holds <= batch_tokens tokens
    (a longer request goes alone)."""
    order = sorted(range(len(lengths)), key=lambda j: (lengths[j], j))
    batch: list[int] = []
    for j in order:
        if batch and lengths[j] * (len(batch) + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(j)
    if batch:
        yield batch


def _argmax_next(model: Any, seqs: list[np.ndarray], vocab: int) -> list[np.ndarray]:
    """The argmax next token at every position of each sequence, one padded forward pass
    (right padding: a causal model's real positions never attend to the pads)."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for j, s in enumerate(seqs):
        ids[j, : len(s)] = torch.from_numpy(np.asarray(s, np.int64) % vocab)
        mask[j, : len(s)] = 1
    head = model.get_output_embeddings()
    with torch.inference_mode():
        hidden = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        out = []
        for j, s in enumerate(seqs):
            h = hidden[j, : len(s)]
            parts = [head(h[a : a + _HEAD_ROWS]).argmax(-1) for a in range(0, len(s), _HEAD_ROWS)]
            out.append(torch.cat(parts).numpy().astype(np.int64))
    return out


def bucket_means(matches: np.ndarray, width: int) -> list[float]:
    """Mean of `matches` over consecutive slices of `width` positions (the last may be short).

    >>> bucket_means(np.array([1, 0, 1, 1, 1], bool), 2)
    [0.5, 1.0, 1.0]
    """
    return [float(matches[a : a + width].mean()) for a in range(0, len(matches), width)]


def _contexts(trace: Trace, vocab: int) -> tuple[list[np.ndarray], list[int]]:
    from simctl.live.workload import trace_prompt_ids  # the live run's prompts, same rule

    vals, off = trace.token_arrays("response_tokens")
    plens = trace.df["prompt_len"].to_numpy(np.int64)
    contexts = []
    for i in range(len(trace.df)):
        prompt = np.asarray(trace_prompt_ids(trace, i, int(plens[i]), vocab), np.int64)
        contexts.append(np.concatenate([prompt, vals[off[i] : off[i + 1]].astype(np.int64)]))
    return contexts, [int(p) for p in plens]


def _bucket_width(trace: Trace, method: str, requested: int | None) -> int:
    """The trace's bucket width, or the requested one where no other method's buckets
    already use a different width."""
    own = trace.meta.accept_bucket_tokens
    others = [n for n in trace.lists if n.endswith(BUCKET_SUFFIX) and n != bucket_column(method)]
    if requested is None:
        return int(own or ACCEPT_BUCKET_TOKENS)
    if own is not None and own != requested and others:
        raise AnnotateError(
            f"--bucket-tokens {requested}: the trace's buckets ({others[0]}, ...) are "
            f"{own} tokens wide; use {own} or leave the option out"
        )
    return requested


def annotate_trace(
    trace: Trace,
    model: Any,
    *,
    drafter: str,
    method: str = DEFAULT_METHOD,
    bucket_tokens: int | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
) -> tuple[Trace, Annotation]:
    """`trace` with `accept_<method>` and its buckets measured for `model` (a causal LM
    module with get_decoder / get_output_embeddings), and the run's totals."""
    check_method(method)
    if not trace.has_tokens():
        raise AnnotateError(
            "trace has no response_tokens: annotate measures acceptance over recorded token ids"
        )
    width = _bucket_width(trace, method, bucket_tokens)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    limit = getattr(model.config, "max_position_embeddings", None)
    contexts, plens = _contexts(trace, vocab)
    longest = int(np.argmax([len(c) for c in contexts]))
    if limit is not None and len(contexts[longest]) - 1 > int(limit):
        raise AnnotateError(
            f"row {longest}: prompt + response = {len(contexts[longest])} tokens, beyond the drafter's "
            f"context of {limit}; shorten the trace's requests"
        )
    matches = greedy_matches(model, contexts, plens, vocab, batch_tokens)
    df = trace.df.copy()
    df[accept_column(method)] = np.array([m.mean() for m in matches], np.float32)
    lists = dict(trace.lists)
    lists[bucket_column(method)] = pa.array(
        [bucket_means(m, width) for m in matches], type=pa.list_(pa.float32())
    )
    notes = dict(trace.meta.notes)
    notes[f"annotate_{method}"] = {
        "drafter": drafter,
        "rule": "greedy draft == recorded token (exact-match verification), teacher-forced",
        "prompts": "prompt_tokens" if "prompt_tokens" in trace.lists else "synthetic (live/workload.py)",
    }
    meta = replace(trace.meta, accept_bucket_tokens=width, notes=notes)
    positions, accepted = sum(len(m) for m in matches), sum(int(m.sum()) for m in matches)
    total = Annotation(method, drafter, width, len(matches), positions, accepted)
    return Trace(df=df, meta=meta, lists=lists), total


def annotate_file(
    path: Path,
    output: Path,
    drafter: str,
    *,
    method: str = DEFAULT_METHOD,
    bucket_tokens: int | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    load: Callable[[str], Any] | None = None,
) -> Annotation:
    """Read and validate `path`, annotate it with `drafter` (a `live/models.py` name or HF
    directory), check the result validates and write it atomically to `output`."""
    check_method(method)
    trace = load_valid_trace(path)
    if not trace.has_tokens():
        raise AnnotateError(f"{path}: no response_tokens column; annotate needs recorded token ids")
    if load is None:
        from simctl.live.models import load_model

        def load(name: str) -> Any:
            return load_model(name).model

    model = load(drafter)
    out, summary = annotate_trace(
        trace, model, drafter=drafter, method=method, bucket_tokens=bucket_tokens, batch_tokens=batch_tokens
    )
    problems = list(check_rows(out))
    if problems:
        raise TraceError(f"{output}: annotated trace would not validate: {problems[0]}")
    write_trace(output, out.df, out.meta, lists=out.lists)
    return summary

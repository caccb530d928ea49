"""Exact replay of model-free drafters over a trace's token ids, and the acceptance models
used for the same drafters when a trace has no token ids.

With exact-match verification of a sampled sequence a deterministic draft token is
accepted exactly when it equals the recorded next token, so replaying the drafter over
`response_tokens` gives the acceptance the drafter would have had. The drafters are the
ones in `policies/suffix_tree.py`, configured by the policy's `DraftRule` per method:

- "history" (RhymeRL HistoSpec): the prompt's responses in the previous epoch, weighted by
  reward. The reference is fixed for the step, so the drafter's verdict at every position
  of a response (does the anchored top-1 child equal the recorded token?) is computed once
  per request with array operations; each verify iteration then only reads those arrays.
  The draft window is fixed (SpecConfig.gamma) or AIMD (RhymeRL §5.4), whose state is kept
  per request across the simulator's fast-forward blocks.
- "lookup" (the `ngram` method: prompt lookup, live.torch_engine.NgramDrafter): for each
  match length, the most recent earlier position with the same preceding n-gram is
  precomputed per request with one sort of its n-gram hashes, so each iteration costs a few
  lookups and the comparison of the draft with the recorded tokens.
- "group" / "own" (Seer's grouped drafter and its no-group-context ablation): the tree
  grows as responses are generated, so each request is stepped iteration by iteration in
  Python over a per-group table (dicts keyed by 64-bit n-gram hashes; a false match needs a
  64-bit collision). A sibling's tokens reach the table in batches of `append_tokens`
  whenever a worker re-plans (Seer's batched appends and periodic fetch: at most one block,
  i.e. `tick_iterations`, plus one batch late); the request's own tokens are matched at
  once. Multi-path (Seer §5): `SpecConfig.topk` = k paths of depth `gamma`, the first
  token of each among the k best children at the anchor (the executor charges
  `verify_tokens` = k * gamma).

Without token ids:
- group/own: per-token acceptance from Seer Table 2 by the number of sibling references
  the request can see (finished siblings count 1, running ones by the share of the
  request's own position they have covered), scaled by the request's `accept_suffix`
  relative to the Table 2 value at G - 1 references that the trace generator calibrated;
- history: the engine's default sampling from `accept_history` at the SpecConfig's gamma.
  AIMD exploits the run structure of real matches (long agreeing runs, then misses); with
  i.i.d. per-token acceptance it has nothing to adapt to, so it is not applied.

The AIMD window varies per iteration and a tree without a match proposes nothing, so the
replay hands the executor each planned iteration's real draft length (`last_slots`), which
it charges for verification; drafted/accepted counts are kept here exactly
(`RequestStats`) and reconciled with the progress the engine actually applied.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from simctl.policies.seer_acceptance import TABLE2_DRAFT, per_token_acceptance, table2_tau
from simctl.policies.suffix_tree import NGRAM_MAX_MATCH, NGRAM_MIN_MATCH, REWARD_COUNT_EPS, DraftRule
from simctl.sim.acceptance import sample_tokens
from simctl.sim.state import FINISHED, StepState
from simctl.traces.io import Trace

if TYPE_CHECKING:
    from simctl.sim.engine import StepSimulation
    from simctl.sim.worker import Worker

# Default rules for the model-free methods when a policy declares none (traces/SCHEMA.md).
DEFAULT_RULES: Mapping[str, DraftRule] = {
    "suffix": DraftRule(source="group"),
    "history": DraftRule(source="history", weight="reward"),
    "ngram": DraftRule(source="lookup", min_match=NGRAM_MIN_MATCH, max_match=NGRAM_MAX_MATCH),
}

# (rule, rows, paths, chain acceptance, per-token acceptance used) of a Table 2 draw
ModelProbe = tuple[DraftRule, np.ndarray, np.ndarray, np.ndarray, np.ndarray]

_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
_MASK = (1 << 32) - 1
_ABSENT = 1 << 30
_KEY_CHUNK = 256  # positions whose context hashes are converted to Python ints at a time
_MAX_ACCEPT = 0.99


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def ngram_keys(seq: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """keys[i, p] = 64-bit hash of the context seq[p - n : p] for n = hi - i (longest order
    first), defined for p >= n (0 elsewhere); shape (hi - lo + 1, len(seq) + 1).

    Equal n-grams hash equally wherever they occur, so sequences share one table."""
    t = np.asarray(seq, dtype=np.int64).astype(np.uint64) * _GOLD
    m = len(t) + 1
    h = np.zeros(m, np.uint64)
    out = np.zeros((hi - lo + 1, m), np.uint64)
    with np.errstate(over="ignore"):
        for n in range(1, hi + 1):
            ext = np.zeros(m, np.uint64)
            if n < m:
                ext[n:] = t[: m - n]  # token n places before each position
            h = _mix(h ^ ext ^ np.uint64(n))
            if n >= lo:
                out[hi - n] = np.where(np.arange(m) >= n, h, np.uint64(0))
    return out


@dataclass
class RequestStats:
    """Exact draft counters of one request (the AIMD window is invisible to the engine)."""

    iterations: int = 0
    drafted: int = 0
    accepted: int = 0
    window: int = 0  # AIMD window at the request's current position (0: not started)


@dataclass
class _Plan:
    """One spec_tokens answer for one request, until the engine's progress is known."""

    pos0: int
    pos_after: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    window_after: np.ndarray


class TraceTokens:
    """Token ids of a whole trace, sliced per row (the history drafter reads other steps)."""

    def __init__(self, trace: Trace) -> None:
        self.resp_vals, self.resp_off = trace.token_arrays("response_tokens")
        if "prompt_tokens" in trace.lists:
            self.prompt_vals, self.prompt_off = trace.token_arrays("prompt_tokens")
        else:
            self.prompt_vals, self.prompt_off = np.zeros(0, np.int32), np.zeros(len(trace.df) + 1, np.int64)
        df = trace.df
        self.reward = df["reward"].to_numpy(np.float64) if "reward" in df.columns else np.zeros(len(df))
        epoch = df["epoch"].to_numpy(np.int64) if "epoch" in df.columns else np.zeros(len(df), np.int64)
        self.epoch = epoch
        self.prompt_id = df["prompt_id"].to_numpy(np.int64)
        self._by_prompt_epoch: dict[tuple[int, int], np.ndarray] | None = None

    def response(self, row: int) -> np.ndarray:
        return self.resp_vals[self.resp_off[row] : self.resp_off[row + 1]]

    def prompt(self, row: int) -> np.ndarray:
        return self.prompt_vals[self.prompt_off[row] : self.prompt_off[row + 1]]

    def rows_of(self, prompt_id: int, epoch: int) -> np.ndarray:
        """Trace rows of a prompt's group in one epoch (the history drafter's references)."""
        if self._by_prompt_epoch is None:
            order = np.lexsort((self.epoch, self.prompt_id))
            keys = np.stack([self.prompt_id[order], self.epoch[order]], axis=1)
            cut = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
            self._by_prompt_epoch = {
                (int(keys[a, 0]), int(keys[a, 1])): order[a:b]
                for a, b in zip(np.r_[0, cut], np.r_[cut, len(order)], strict=True)
            }
        return self._by_prompt_epoch.get((prompt_id, epoch), np.zeros(0, np.int64))


# ----------------------------------------------------------------- dict tables (group drafter)


def _add_many(table: dict, toks: list[int], key_rows: list[list[int]]) -> None:
    """Occurrences of each token after each of its contexts (keys, 0 = no context); a lone
    child is packed as (tok << 32 | count) to save memory (the tables hold millions)."""
    get = table.get
    for tok, ks in zip(toks, key_rows, strict=True):
        packed = tok << 32
        for k in ks:
            if not k:
                continue
            v = get(k)
            if v is None:
                table[k] = packed | 1
            elif v.__class__ is int:
                if v >> 32 == tok:
                    table[k] = v + 1
                else:
                    table[k] = {v >> 32: v & _MASK, tok: 1}
            else:
                v[tok] = v.get(tok, 0) + 1


def _children(v: int | dict) -> dict:
    return {v >> 32: v & _MASK} if v.__class__ is int else v  # type: ignore[operator, union-attr]


def _merged(base: int | dict | None, over: int | dict | None) -> int | dict:
    if over is None:
        return base  # type: ignore[return-value]
    if base is None:
        return over
    out = dict(_children(base))
    for t, c in _children(over).items():
        out[t] = out.get(t, 0) + c
    return out


def _best(v: int | dict) -> int:
    if v.__class__ is int:
        return v >> 32  # type: ignore[operator]
    return min(v, key=lambda t: (-v[t], t))  # type: ignore[union-attr, index]


def _rank(v: int | dict, tok: int) -> int:
    if v.__class__ is int:
        return 0 if v >> 32 == tok else _ABSENT  # type: ignore[operator]
    w = v.get(tok)  # type: ignore[union-attr]
    if w is None:
        return _ABSENT
    return sum(1 for t, c in v.items() if c > w or (c == w and t < tok))  # type: ignore[union-attr]


def _lookup(base: dict, over: dict, keys: list[int]) -> int | dict | None:
    """Children of the longest matching context (keys longest order first)."""
    for k in keys:
        b = base.get(k)
        o = over.get(k)
        if o is None:
            if b is not None:
                return b
        elif b is None:
            return o
        else:
            return _merged(b, o)
    return None


@dataclass
class _Sequence:
    """A request's tokens as the drafter sees them: prompt tail + response, and hashes."""

    seq: np.ndarray
    offset: int  # index in `seq` of response position 0
    keys: np.ndarray  # ngram_keys(seq)


@dataclass
class _GroupTable:
    table: dict = field(default_factory=dict)
    visible: dict[int, int] = field(default_factory=dict)  # request -> response tokens indexed


# --------------------------------------------------------------------------------- replay


class StepReplay:
    """The engine's `spec_tokens` for one step (see the module docstring)."""

    def __init__(
        self,
        state: StepState,
        trace_rows: np.ndarray,
        tokens: TraceTokens | None,
        rules: Mapping[str, DraftRule] | None = None,
    ) -> None:
        self.state = state
        self.rows = np.asarray(trace_rows, dtype=np.int64)
        self.tokens = tokens
        # Defaults only replay exactly; without tokens only the group model applies (where
        # a policy asks for it): the history drafter then samples at its fixed gamma.
        self.rules = {**(DEFAULT_RULES if tokens is not None else {}), **(rules or {})}
        if tokens is None:
            self.rules = {m: r for m, r in self.rules.items() if r.source not in ("history", "lookup")}
        self.stats: dict[int, RequestStats] = {}
        self._plans: dict[int, _Plan] = {}
        self._seqs: dict[int, _Sequence] = {}
        self._groups: dict[int, _GroupTable] = {}
        self._hist: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # prompt -> (keys, best token)
        self._static: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # request -> (run, anchor)
        self._lookups: dict[int, tuple[list[int], int, list[np.ndarray]]] = {}  # request -> lookup table
        n = state.n_requests
        pid = state.prompt_id[:n]
        order = np.argsort(pid, kind="stable")
        cut = np.flatnonzero(np.diff(pid[order])) + 1
        self._members = {int(pid[g[0]]): g for g in np.split(order, cut) if len(g)}
        self._group_size = max((len(g) for g in self._members.values()), default=1)
        self._ref_accept: float | None = None
        self._grids: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.last_slots: np.ndarray | None = None
        self.last_probe: ModelProbe | None = None  # the Table 2 rows of the last call
        self._matrix: np.ndarray | None = None
        self._group_index = np.zeros(0, np.int64)

    @property
    def fetches_on_replan(self) -> bool:
        """Exact grouped drafting reads the siblings' tokens when a worker plans, so its
        blocks must end at each fetch tick."""
        return self.tokens is not None and any(r.source == "group" for r in self.rules.values())

    def model_drift(self, probe: ModelProbe) -> float:
        """Largest change since `probe` was taken of the Table 2 acceptance of the rows it
        covers (their siblings have moved on): a block continues past a fetch tick while
        this stays below the engine's tolerance."""
        rule, rids, paths, chain, p0 = probe
        return float(np.abs(self._group_model(rule, rids, chain, paths) - p0).max())

    # ------------------------------------------------------------------------ entry point
    def spec_tokens(
        self,
        sim: StepSimulation,
        worker: Worker,
        rids: np.ndarray,
        methods: np.ndarray,
        alpha: np.ndarray,
        gamma: np.ndarray,
        iterations: int,
    ) -> np.ndarray:
        st = self.state
        self.last_slots = None
        self.last_probe = None
        m0 = int(methods[0]) if len(methods) else 0
        present = [m0] if (methods == m0).all() else [int(m) for m in np.unique(methods)]
        if not any(st.methods[m] in self.rules for m in present):
            return sample_tokens(worker.rng, alpha, gamma, iterations)
        out = np.ones((len(rids), iterations), np.int16)
        for m in present:
            sel = np.arange(len(rids)) if len(present) == 1 else np.flatnonzero(methods == m)
            rule = self.rules.get(st.methods[m])
            if rule is None:
                out[sel] = sample_tokens(worker.rng, alpha[sel], gamma[sel], iterations)
                continue
            if self._plans:
                for rid in rids[sel].tolist():
                    if rid in self._plans:
                        self._reconcile(rid)
            r, depth = rids[sel], np.maximum(gamma[sel].astype(np.int64), 1)
            # the trace's chain acceptance (the engine boosts `alpha` for trees)
            chain = st.accept_mat[r, m]
            if rule.source == "history":
                out[sel] = self._history(rule, r, depth, iterations)
            elif rule.source == "lookup":
                for j, rid, d in zip(sel, r.tolist(), depth.tolist(), strict=True):
                    out[j] = self._lookup_exact(rule, rid, d, iterations)
            else:
                own = st.req_gamma[r] > 0
                paths = np.where(own, st.req_topk[r], max(1, worker.spec.topk)).astype(np.int64)
                if self.tokens is None:
                    p = self._group_model(rule, r, chain, paths)
                    out[sel] = sample_tokens(worker.rng, p, depth, iterations)
                    self.last_probe = (rule, r, paths, chain, p)
                    continue
                for j, rid, d, k in zip(sel, r.tolist(), depth.tolist(), paths.tolist(), strict=True):
                    out[j] = self._group_exact(rule, rid, d, k, iterations)
            self._note_slots(sel, r, len(rids), iterations)
        return out

    def _note_slots(self, sel: np.ndarray, rids: np.ndarray, rows: int, iterations: int) -> None:
        """Record what the exact drafter really proposed in each planned iteration (AIMD
        windows vary, a suffix tree without a match proposes nothing), for the executor to
        charge verification by: `last_slots`, NaN where the row was not replayed exactly."""
        if self.last_slots is None:
            self.last_slots = np.full((rows, iterations), np.nan, np.float32)
        for j, rid in zip(sel.tolist(), rids.tolist(), strict=True):
            plan = self._plans.get(rid)
            if plan is not None:
                self.last_slots[j, : len(plan.drafted)] = plan.drafted

    def finish(self, counters: Counter[str] | None = None) -> None:
        """Credit the last planned blocks with the progress the engine applied, and add
        the exact totals to `counters` (replay_iterations, replay_drafted, replay_accepted)."""
        for rid in list(self._plans):
            self._reconcile(rid)
        if counters is not None and self.stats:
            counters["replay_iterations"] += sum(s.iterations for s in self.stats.values())
            counters["replay_drafted"] += sum(s.drafted for s in self.stats.values())
            counters["replay_accepted"] += sum(s.accepted for s in self.stats.values())

    # ------------------------------------------------------------------------ bookkeeping
    def _origin(self, rid: int) -> int:
        return int(self.state.origin[rid])

    def _stats(self, rid: int) -> RequestStats:
        s = self.stats.get(rid)
        if s is None:
            s = self.stats[rid] = RequestStats()
        return s

    def _remember(self, rid: int, pos0: int, pos_after, drafted, accepted, window_after) -> None:
        self._plans[rid] = _Plan(
            pos0,
            np.asarray(pos_after, np.int64),
            np.asarray(drafted, np.int64),
            np.asarray(accepted, np.int64),
            np.asarray(window_after, np.int64),
        )

    def _reconcile(self, rid: int) -> None:
        """Credit the iterations of the request's last plan that the engine applied: the
        planned positions increase strictly, so the current position says how many."""
        plan = self._plans.pop(rid, None)
        if plan is None:
            return
        gen = int(self.state.generated[rid])
        if gen <= plan.pos0:
            return
        done = int(np.searchsorted(plan.pos_after, gen, side="right"))
        before = int(plan.pos_after[done - 1]) if done else plan.pos0
        partial = gen > before and done < len(plan.pos_after)
        s = self._stats(rid)
        s.iterations += done + int(partial)
        s.drafted += int(plan.drafted[:done].sum())
        s.accepted += int(plan.accepted[:done].sum())
        if partial:
            s.drafted += int(plan.drafted[done])
            s.accepted += max(0, min(int(plan.accepted[done]), gen - before - 1))
        last = done + int(partial) - 1
        if last >= 0:
            s.window = int(plan.window_after[last])

    def _end(self, rid: int) -> int:
        """Position where this dispatch ends (chunk limit or the response's end)."""
        return int(min(self.state.dispatch_end[rid], self.state.target_len[rid]))

    # ------------------------------------------------------------------------- sequences
    def _sequence(self, rid: int, rule: DraftRule) -> _Sequence:
        origin = self._origin(rid)
        seq = self._seqs.get(origin)
        if seq is None:
            assert self.tokens is not None
            row = int(self.rows[origin])
            prompt = self.tokens.prompt(row)[-rule.max_match :]
            arr = np.concatenate([prompt, self.tokens.response(row)]).astype(np.int64)
            keys = ngram_keys(arr, rule.min_match, rule.max_match)
            seq = self._seqs[origin] = _Sequence(arr, len(prompt), keys)
        return seq

    # ------------------------------------------------------------ group drafter (exact)
    def _group(self, rule: DraftRule, rid: int) -> tuple[_GroupTable, list[int]]:
        """The request's group table, brought up to the siblings' visible progress."""
        origin = self._origin(rid)
        pid = int(self.state.prompt_id[origin])
        members = [origin] if rule.source == "own" else self._members[pid].tolist()
        key = pid if rule.source == "group" else -1 - origin
        grp = self._groups.get(key)
        if grp is None:
            grp = self._groups[key] = _GroupTable()
            self._index_prompt(grp, rule, origin)
        gen = self.state.generated
        for m in members:
            vis = int(gen[m]) // rule.append_tokens * rule.append_tokens
            old = grp.visible.get(m, 0)
            if vis > old:
                self._index(grp.table, self._sequence(m, rule), old, vis)
                grp.visible[m] = vis
        return grp, members

    def _index_prompt(self, grp: _GroupTable, rule: DraftRule, origin: int) -> None:
        assert self.tokens is not None
        prompt = self.tokens.prompt(int(self.rows[origin])).astype(np.int64)
        if len(prompt) > rule.min_match:
            keys = ngram_keys(prompt, rule.min_match, rule.max_match)
            lo = rule.min_match
            _add_many(grp.table, prompt[lo:].tolist(), keys[:, lo : len(prompt)].T.tolist())

    @staticmethod
    def _index(table: dict, seq: _Sequence, lo: int, hi: int) -> None:
        """Occurrences whose next token is response position lo..hi-1."""
        a, b = seq.offset + lo, seq.offset + hi
        _add_many(table, seq.seq[a:b].tolist(), seq.keys[:, a:b].T.tolist())

    def _group_exact(self, rule: DraftRule, rid: int, depth: int, paths: int, iterations: int) -> np.ndarray:
        """Step one request iteration by iteration: draft from the group table plus its own
        tokens since they were last indexed (`over`), verify against the recorded tokens."""
        grp, _ = self._group(rule, rid)
        seq = self._sequence(rid, rule)
        pos0 = int(self.state.generated[rid])
        end = self._end(rid)
        vis = min(grp.visible.get(self._origin(rid), 0), pos0)
        a = seq.offset + vis  # list index 0 = response position vis
        stop = seq.offset + min(end, pos0 + iterations * (depth + 1))
        toks = seq.seq[a:stop].tolist()
        n_tok = len(toks)
        keys: list[list[int]] = seq.keys[:, a : a + (pos0 - vis) + _KEY_CHUNK].T.tolist()
        over: dict = {}
        _add_many(over, toks[: pos0 - vis], keys[: pos0 - vis])
        table = grp.table
        out = np.ones(iterations, np.int16)
        pos_after, drafted, accepted = [], [], []
        i = pos0 - vis
        for _ in range(iterations):
            if i >= n_tok:
                break
            if i + depth >= len(keys):
                keys.extend(seq.keys[:, a + len(keys) : a + len(keys) + _KEY_CHUNK + depth].T.tolist())
            kids = _lookup(table, over, keys[i])
            acc, drafts = 0, 0
            if kids is not None:
                drafts = depth * paths
                if _rank(kids, toks[i]) < paths:
                    acc = 1
                    while acc < depth and i + acc < n_tok:
                        nxt = _lookup(table, over, keys[i + acc])
                        if nxt is None or _best(nxt) != toks[i + acc]:
                            break
                        acc += 1
            emitted = min(acc + 1, n_tok - i)
            out[len(pos_after)] = emitted
            _add_many(over, toks[i : i + emitted], keys[i : i + emitted])
            i += emitted
            pos_after.append(vis + i)
            drafted.append(drafts)
            accepted.append(acc)
        self._remember(rid, pos0, pos_after, drafted, accepted, np.zeros(len(pos_after)))
        return out

    # --------------------------------------------------------- prompt lookup (exact)
    def _lookup_table(self, rule: DraftRule, rid: int) -> tuple[list[int], int, list[np.ndarray]]:
        """(prompt + response tokens, prompt length, prev[n]) for the request: prev[i][p] is
        the most recent p' < p whose preceding n tokens (n = max_match - i) equal those
        before p, or -1; so the drafter at context length L proposes seq[prev[L]:...]."""
        origin = self._origin(rid)
        hit = self._lookups.get(origin)
        if hit is None:
            assert self.tokens is not None
            row = int(self.rows[origin])
            prompt = self.tokens.prompt(row)
            arr = np.concatenate([prompt, self.tokens.response(row)]).astype(np.int64)
            keys = ngram_keys(arr, rule.min_match, rule.max_match)
            prev = []
            for k in keys:
                order = np.argsort(k, kind="stable")  # equal keys stay in position order
                same = np.r_[False, k[order][1:] == k[order][:-1]]
                p = np.full(len(k), -1, np.int64)
                p[order[same]] = order[np.flatnonzero(same) - 1]
                p[k == 0] = -1  # contexts shorter than n
                prev.append(p)
            hit = self._lookups[origin] = (arr.tolist(), len(prompt), prev)
        return hit

    def _lookup_exact(self, rule: DraftRule, rid: int, depth: int, iterations: int) -> np.ndarray:
        """Step one request iteration by iteration as the engine's prompt-lookup drafter
        would (live.torch_engine.NgramDrafter): no draft past the dispatch's last token."""
        seq, plen, prev = self._lookup_table(rule, rid)
        pos0 = int(self.state.generated[rid])
        end = self._end(rid)
        out = np.ones(iterations, np.int16)
        pos_after, drafted, accepted = [], [], []
        pos = pos0
        for it in range(iterations):
            if pos >= end:
                break
            ctx = plen + pos  # tokens the drafter sees
            k = min(depth, end - pos - 1)
            acc = got = 0
            if k > 0:
                for p in prev:
                    src = int(p[ctx])
                    if src >= 0:
                        got = min(k, ctx - src)
                        while acc < got and seq[src + acc] == seq[ctx + acc]:
                            acc += 1
                        break
            out[it] = acc + 1
            pos += acc + 1
            pos_after.append(pos)
            drafted.append(got)
            accepted.append(acc)
        self._remember(rid, pos0, pos_after, drafted, accepted, np.zeros(len(pos_after)))
        return out

    # ------------------------------------------------------------ group drafter (model)
    def _group_model(
        self, rule: DraftRule, rids: np.ndarray, alpha: np.ndarray, paths: np.ndarray
    ) -> np.ndarray:
        """Per-token acceptance from Seer Table 2 at the request's visible sibling count."""
        st = self.state
        if rule.source == "group":
            origin = st.origin[rids]
            sib = self._member_matrix()[self._group_index[origin]]  # (rows, G), -1 = none
            s = np.maximum(sib, 0)
            gen = st.generated[s]
            vis = gen - gen % rule.append_tokens  # what the last batched append made visible
            share = np.minimum(1.0, vis / np.maximum(st.generated[rids], 1)[:, None])
            share[st.state[s] == FINISHED] = 1.0
            share[(sib < 0) | (sib == origin[:, None])] = 0.0
            refs = share.sum(axis=1)
        else:
            refs = np.zeros(len(rids))
        k0 = int(paths[0]) if len(paths) else 1
        if (paths == k0).all():
            out = np.interp(refs, *self._table2_grid(k0))
        else:
            out = np.empty(len(rids))
            for k in np.unique(paths).tolist():
                sel = paths == k
                grid_refs, grid_p = self._table2_grid(int(k))
                out[sel] = np.interp(refs[sel], grid_refs, grid_p)
        if self._ref_accept is None:
            self._ref_accept = per_token_acceptance(table2_tau(self._group_size - 1, 1), TABLE2_DRAFT)
        return np.minimum(np.maximum(out * alpha / max(self._ref_accept, 1e-9), 0.0), _MAX_ACCEPT)

    def _table2_grid(self, paths: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-token acceptance on a grid of reference counts (piecewise linear in between:
        within 1e-3 of the exact inversion)."""
        grid = self._grids.get(paths)
        if grid is None:
            refs = np.linspace(0.0, float(max(self._group_size, 16)), 321)
            p = np.array([per_token_acceptance(table2_tau(r, paths), TABLE2_DRAFT) for r in refs])
            grid = self._grids[paths] = (refs, p)
        return grid

    def _member_matrix(self) -> np.ndarray:
        if self._matrix is None:
            n = self.state.n_requests
            self._group_index = np.zeros(n, np.int64)
            self._matrix = np.full((len(self._members), self._group_size), -1, np.int64)
            for g, rows in enumerate(self._members.values()):
                self._matrix[g, : len(rows)] = rows
                self._group_index[rows] = g
        return self._matrix

    # -------------------------------------------------------------------- history drafter
    def _history(self, rule: DraftRule, rids: np.ndarray, gamma: np.ndarray, iterations: int) -> np.ndarray:
        """Exact history drafting, one verify iteration at a time over all rows: the
        verdicts are static, so each iteration only gathers from them."""
        n = len(rids)
        pos = self.state.generated[rids].astype(np.int64)
        end = np.array([self._end(int(r)) for r in rids.tolist()], np.int64)
        aimd = rule.aimd
        if aimd is not None:
            w = np.array([self._stats(int(r)).window or aimd.start for r in rids.tolist()], np.int64)
        else:
            w = gamma.copy()
        runs, anchors, offs = [], [], [0]
        for r in rids.tolist():
            run, anchor = self._static_verdicts(rule, r)
            runs.append(run)
            anchors.append(anchor)
            offs.append(offs[-1] + len(run))
        run_flat, anchor_flat = np.concatenate(runs), np.concatenate(anchors)
        base = np.asarray(offs[:-1], np.int64)
        last = np.asarray(offs[1:], np.int64) - 1
        out = np.ones((n, iterations), np.int16)
        pos_after = np.zeros((n, iterations), np.int64)
        drafted = np.zeros((n, iterations), np.int64)
        accepted = np.zeros((n, iterations), np.int64)
        win_after = np.zeros((n, iterations), np.int64)
        used = 0
        for it in range(iterations):
            live = pos < end
            if not live.any():
                break
            used = it + 1
            at = np.minimum(base + pos, last)
            has = anchor_flat[at] & live
            acc = np.where(has, np.minimum(run_flat[at], w), 0)
            # a draft that stops agreeing goes on to the full window unless the tree has no
            # continuation where the agreement stopped (checked on the recorded tokens)
            d = np.where(has, np.where((acc == w) | anchor_flat[np.minimum(at + acc, last)], w, acc), 0)
            out[:, it] = acc + 1
            drafted[:, it] = d
            accepted[:, it] = acc
            if aimd is not None:
                w = np.where(
                    has & (acc == d),
                    np.minimum(w + aimd.step, aimd.maximum),
                    np.where(acc < d, aimd.start, w),
                )
            pos += np.where(live, acc + 1, 0)
            pos_after[:, it] = pos
            win_after[:, it] = w
        for j, r in enumerate(rids.tolist()):
            k = min(int(np.searchsorted(pos_after[j, :used], end[j], side="left")) + 1, used)
            self._remember(
                r,
                int(self.state.generated[r]),
                pos_after[j, :k],
                drafted[j, :k],
                accepted[j, :k],
                win_after[j, :k],
            )
        return out

    def _static_verdicts(self, rule: DraftRule, rid: int) -> tuple[np.ndarray, np.ndarray]:
        """For every response position p (and p = L): the run of consecutive positions from
        p whose anchored top-1 history token equals the recorded one, and whether any
        history context matches at p (capped run: 255)."""
        origin = self._origin(rid)
        hit = self._static.get(origin)
        if hit is not None:
            return hit
        seq = self._sequence(rid, rule)
        ukeys, best = self._history_table(rule, origin)
        cols = seq.keys[:, seq.offset :]  # positions 0..L (context ends before position p)
        length = cols.shape[1] - 1
        anchor = np.zeros(length + 1, bool)
        top = np.full(length + 1, -1, np.int64)
        if len(ukeys):
            for order in range(cols.shape[0]):  # longest context first
                k = cols[order]
                idx = np.minimum(np.searchsorted(ukeys, k), len(ukeys) - 1)
                found = (ukeys[idx] == k) & (k != 0) & ~anchor
                top[found] = best[idx[found]]
                anchor |= found
        actual = np.full(length + 1, -2, np.int64)
        actual[:length] = seq.seq[seq.offset :]
        ok = anchor & (top == actual)
        # run[p] = distance to the first position >= p that is not a hit
        idx = np.arange(length + 1)
        nxt = np.where(ok, length + 1, idx)
        nxt = np.minimum.accumulate(nxt[::-1])[::-1]
        run = np.minimum(nxt - idx, 255).astype(np.int64)
        self._static[origin] = (run, anchor)
        return run, anchor

    def _history_table(self, rule: DraftRule, origin: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted context keys of the prompt's previous-epoch responses and each context's
        highest-weight next token (weight desc, token id asc)."""
        st = self.state
        pid = int(st.prompt_id[origin])
        cached = self._hist.get(pid)
        if cached is not None:
            return cached
        assert self.tokens is not None
        refs = self.tokens.rows_of(pid, st.epoch - 1) if st.epoch > 0 else np.zeros(0, np.int64)
        keys, toks, wts = [], [], []
        for row in refs.tolist():
            prompt = self.tokens.prompt(row)[-rule.max_match :]
            arr = np.concatenate([prompt, self.tokens.response(row)]).astype(np.int64)
            kk = ngram_keys(arr, rule.min_match, rule.max_match)[:, len(prompt) : len(arr)]
            nxt = arr[len(prompt) :]
            w = (float(self.tokens.reward[row]) + REWARD_COUNT_EPS) if rule.weight == "reward" else 1.0
            for order in range(kk.shape[0]):
                valid = kk[order] != 0
                keys.append(kk[order][valid])
                toks.append(nxt[valid])
                wts.append(np.full(int(valid.sum()), w))
        if not keys:
            self._hist[pid] = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
            return self._hist[pid]
        k, t, w = np.concatenate(keys), np.concatenate(toks), np.concatenate(wts)
        order = np.lexsort((t, k))
        k, t, w = k[order], t[order], w[order]
        new = np.r_[True, (k[1:] != k[:-1]) | (t[1:] != t[:-1])]
        starts = np.flatnonzero(new)
        k, t, w = k[starts], t[starts], np.add.reduceat(w, starts)
        order = np.lexsort((t, -np.round(w, 9), k))
        k, t = k[order], t[order]
        first = np.r_[True, k[1:] != k[:-1]]
        self._hist[pid] = (k[first], t[first])
        return self._hist[pid]

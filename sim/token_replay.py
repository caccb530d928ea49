"""Exact replay of model-free drafters over a trace's token ids, and the acceptance models
used for the same drafters when a trace has no token ids.

With exact-match verification of a sampled sequence a deterministic draft token is
accepted exactly when it equals the recorded next token, so replaying the drafter over
`response_tokens` gives the acceptance the drafter would have had. The drafters are the
ones in `policies/suffix_tree.py`, configured by the policy's `DraftRule` per method:

- "history" (RhymeRL HistoSpec): the prompt's responses in the previous epoch, weighted by
  reward (sim.history_replay);
- "lookup" (the `ngram` method: prompt lookup, live.torch_engine.NgramDrafter;
  sim.lookup_replay);
- "group" / "own" (Seer's grouped drafter and its no-group-context ablation): the tree
  grows as responses are generated, so each request is stepped iteration by iteration over
  a per-group table (sim.group_index: every pair the step can index, numbered in bulk;
  sim.group_step: a block's lookups in bulk; sim.group_table: the reference form they
  equal). A sibling's tokens reach the table in batches of `append_tokens` whenever a
  worker re-plans (Seer's batched appends and periodic fetch: at most one block, i.e.
  `tick_iterations`, plus one batch late); the request's own tokens are matched at once.
  Multi-path (Seer §5): `SpecConfig.topk` = k paths of depth `gamma`, the first token of
  each among the k best children at the anchor (the executor charges `verify_tokens` =
  k * gamma).

Without token ids:
- group/own: per-token acceptance from Seer Table 2 by the number of sibling references
  the request can see (finished siblings count 1, running ones by the share of the
  request's own position they have covered), scaled by the request's `accept_suffix`
  relative to the Table 2 value at G - 1 references that the trace generator calibrated;
- history: the engine's default sampling from `accept_history` at the SpecConfig's gamma.
  AIMD exploits the run structure of real matches (long agreeing runs, then misses); with
  i.i.d. per-token acceptance it has nothing to adapt to, so it is not applied.

The AIMD window varies per iteration and a tree without a match proposes nothing, so the
replay hands the executor each planned iteration's real draft length (`Draw.slots`), which
it charges for verification; drafted/accepted counts are kept exactly (sim.draft_ledger)
and reconciled with the progress the engine actually applied.

StepReplay is the engine's acceptance source (sim.acceptance_source.AcceptanceSource)
whenever a policy replays a trace (sim.replay).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from simctl.policies.seer_acceptance import TABLE2_DRAFT, per_token_acceptance, table2_tau
from simctl.policies.suffix_tree import NGRAM_MAX_MATCH, NGRAM_MIN_MATCH, DraftRule
from simctl.sim.acceptance import sample_tokens
from simctl.sim.acceptance_source import Draw, ModelProbe, plain_first_column, sampled_tokens
from simctl.sim.draft_ledger import DraftLedger, RequestStats
from simctl.sim.group_index import GroupIndex
from simctl.sim.group_step import step_block
from simctl.sim.history_replay import HistoryReplay
from simctl.sim.lookup_replay import LookupReplay
from simctl.sim.position_acceptance import PositionAcceptance
from simctl.sim.state import FINISHED, StepState
from simctl.sim.trace_tokens import StepTokens, TraceTokens, ngram_keys

__all__ = ["DEFAULT_RULES", "ModelProbe", "RequestStats", "StepReplay", "TraceTokens", "ngram_keys"]

# Default rules for the model-free methods when a policy declares none (traces/SCHEMA.md).
DEFAULT_RULES: Mapping[str, DraftRule] = {
    "suffix": DraftRule(source="group"),
    "history": DraftRule(source="history", weight="reward"),
    "ngram": DraftRule(source="lookup", min_match=NGRAM_MIN_MATCH, max_match=NGRAM_MAX_MATCH),
}

_MAX_ACCEPT = 0.99


class StepReplay:
    """The engine's acceptance source for one step (see the module docstring)."""

    def __init__(
        self,
        state: StepState,
        trace_rows: np.ndarray,
        tokens: TraceTokens | None,
        rules: Mapping[str, DraftRule] | None = None,
        positions: PositionAcceptance | None = None,
    ) -> None:
        """`positions`: the trace's acceptance by response position, for the rows this
        samples (None: each row's mean)."""
        self.state = state
        self.positions = positions
        # Defaults only replay exactly; without tokens only the group model applies (where
        # a policy asks for it): the history drafter then samples at its fixed gamma.
        self.rules = {**(DEFAULT_RULES if tokens is not None else {}), **(rules or {})}
        if tokens is None:
            self.rules = {m: r for m, r in self.rules.items() if r.source not in ("history", "lookup")}
        self.tokens = StepTokens(state, trace_rows, tokens)
        self.ledger = DraftLedger(state)
        self.history = HistoryReplay(self.tokens, self.ledger)
        self.lookup = LookupReplay(self.tokens, self.ledger)
        self._groups: dict[int, GroupIndex] = {}
        n = state.n_requests
        pid = state.prompt_id[:n]
        order = np.argsort(pid, kind="stable")
        cut = np.flatnonzero(np.diff(pid[order])) + 1
        self._members = {int(pid[g[0]]): g for g in np.split(order, cut) if len(g)}
        self._group_size = max((len(g) for g in self._members.values()), default=1)
        self._ref_accept: float | None = None
        self._grids: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._matrix: np.ndarray | None = None
        self._group_index = np.zeros(0, np.int64)
        self._sibling_cols: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def fetches_on_replan(self) -> bool:
        """Exact grouped drafting reads the siblings' tokens when a worker plans, so its
        blocks must end at each fetch tick."""
        return self.tokens.trace is not None and any(r.source == "group" for r in self.rules.values())

    def model_drift(self, probe: ModelProbe) -> float:
        """Largest change since `probe` was taken of the Table 2 acceptance of the rows it
        covers (their siblings have moved on): a block continues past a fetch tick while
        this stays below the engine's tolerance."""
        diff = self._group_model(probe.rule, probe.rows, probe.chain, probe.paths, probe.siblings)
        diff -= probe.p
        return float(np.abs(diff, out=diff).max())

    def finish(self, counters: Counter[str] | None = None) -> None:
        """Credit the last planned blocks with the progress the engine applied, and add
        the exact totals to `counters` (replay_iterations, replay_drafted, replay_accepted)."""
        self.ledger.finish(counters)

    # ------------------------------------------------------------------------ entry point
    def draw(
        self,
        rng: np.random.Generator,
        rids: np.ndarray,
        methods: np.ndarray,
        alpha: np.ndarray,
        gamma: np.ndarray,
        worker_topk: int,
        iterations: int,
        first_plain: np.ndarray | None = None,
        tree_width: np.ndarray | None = None,
    ) -> Draw:
        st = self.state
        m0 = int(methods[0]) if len(methods) else 0
        present = [m0] if (methods == m0).all() else [int(m) for m in np.unique(methods)]
        if first_plain is not None and not first_plain.any():
            first_plain = None
        if not any(st.methods[m] in self.rules for m in present):
            return Draw(
                sampled_tokens(
                    self.positions, rng, rids, methods, alpha, gamma, tree_width, iterations, first_plain
                )
            )
        if len(present) == 1 and self.tokens.trace is None:
            # one method, drawn from the grouped-drafter model (no token ids): the loop
            # below without its row selections and copies (most of Seer's plans)
            rule = self.rules.get(st.methods[m0])
            if rule is not None and rule.source not in ("history", "lookup"):
                self._reconcile(rids)
                tokens, model_probe = self._model_draw(rng, rule, m0, rids, gamma, worker_topk, iterations)
                return Draw(plain_first_column(tokens, first_plain), None, model_probe)
        out = np.ones((len(rids), iterations), np.int16)
        slots: np.ndarray | None = None
        probe: ModelProbe | None = None
        for m in present:
            sel = np.arange(len(rids)) if len(present) == 1 else np.flatnonzero(methods == m)
            fresh = first_plain[sel] if first_plain is not None else np.zeros(len(sel), np.bool_)
            rule = self.rules.get(st.methods[m])
            if rule is None:
                width = tree_width[sel] if tree_width is not None else None
                out[sel] = sampled_tokens(
                    self.positions,
                    rng,
                    rids[sel],
                    methods[sel],
                    alpha[sel],
                    gamma[sel],
                    width,
                    iterations,
                    fresh,
                )
                continue
            self._reconcile(rids[sel])
            r, depth = rids[sel], np.maximum(gamma[sel].astype(np.int64), 1)
            if rule.source == "history":
                out[sel] = self.history.draft(rule, r, depth, iterations, fresh)
            elif rule.source == "lookup":
                for j, rid, d, f in zip(sel, r.tolist(), depth.tolist(), fresh.tolist(), strict=True):
                    out[j] = self.lookup.draft(rule, rid, d, iterations, f)
            else:
                if self.tokens.trace is None:
                    tokens, probe = self._model_draw(rng, rule, m, r, gamma[sel], worker_topk, iterations)
                    out[sel] = plain_first_column(tokens, fresh)
                    continue
                own = st.req_gamma[r] > 0
                paths = np.where(own, st.req_topk[r], worker_topk).astype(np.int64)
                rows = zip(sel, r.tolist(), depth.tolist(), paths.tolist(), fresh.tolist(), strict=True)
                caught: set[int] = set()  # groups brought up to date in this draw
                for j, rid, d, k, f in rows:
                    out[j] = self._group_exact(rule, rid, d, k, iterations, f, caught)
            slots = self._note_slots(slots, sel, r, len(rids), iterations)
        return Draw(out, slots, probe)

    def _reconcile(self, rids: np.ndarray) -> None:
        """Credit the rows' previous exact plans with the progress the engine applied."""
        plans = self.ledger.plans
        if plans:
            for rid in rids.tolist():
                if rid in plans:
                    self.ledger.reconcile(rid)

    def _model_draw(
        self,
        rng: np.random.Generator,
        rule: DraftRule,
        method: int,
        rids: np.ndarray,
        gamma: np.ndarray,
        worker_topk: int,
        iterations: int,
    ) -> tuple[np.ndarray, ModelProbe]:
        """Outcomes of rows drafting `method` from the grouped-drafter model, and the probe
        to check their drift by (with the rows' sibling columns, which the checks reuse)."""
        st = self.state
        # the trace's chain acceptance (the engine boosts `alpha` for trees)
        chain = st.accept_mat[rids, method]
        own = st.req_gamma.take(rids) > 0
        uniform: int | None = None  # the one path count of every row, where known
        if own.any():
            paths = np.where(own, st.req_topk[rids], worker_topk).astype(np.int64)
        else:
            paths, uniform = np.full(len(rids), worker_topk, np.int64), worker_topk
        siblings = self._siblings(rids) if rule.source == "group" else None
        p = self._group_model(rule, rids, chain, paths, siblings, uniform)
        depth = np.maximum(gamma.astype(np.int64, copy=False), 1)
        return sample_tokens(rng, p, depth, iterations), ModelProbe(rule, rids, paths, chain, p, siblings)

    def _note_slots(
        self, slots: np.ndarray | None, sel: np.ndarray, rids: np.ndarray, rows: int, iterations: int
    ) -> np.ndarray:
        """Record what the exact drafter really proposed in each planned iteration (AIMD
        windows vary, a suffix tree without a match proposes nothing), for the executor to
        charge verification by: NaN where the row was not replayed exactly."""
        if slots is None:
            slots = np.full((rows, iterations), np.nan, np.float32)
        for j, rid in zip(sel.tolist(), rids.tolist(), strict=True):
            plan = self.ledger.plans.get(rid)
            if plan is not None:
                slots[j, : len(plan.drafted)] = plan.drafted
        return slots

    # ------------------------------------------------------------ group drafter (exact)
    def _group(self, rule: DraftRule, rid: int, caught: set[int] | None = None) -> GroupIndex:
        """The request's group table, brought up to the siblings' visible progress.
        `caught`: groups already brought up to date since the progress last changed (one
        plan's rows: nobody generates while a block is drawn), which are left as they are."""
        origin = self.tokens.origin(rid)
        pid = int(self.state.prompt_id[origin])
        key = pid if rule.source == "group" else -1 - origin
        grp = self._groups.get(key)
        if grp is None:
            members = [origin] if rule.source == "own" else self._members[pid].tolist()
            grp = self._groups[key] = self._new_group(rule, origin, members)
        if caught is None or key not in caught:
            grp.catch_up(self.state.generated, rule.append_tokens)
            if caught is not None:
                caught.add(key)
        return grp

    def _new_group(self, rule: DraftRule, origin: int, members: list[int]) -> GroupIndex:
        """A group's table over every token its members will generate this step (their
        prompt indexed at once), numbered in bulk: sim.group_index."""
        trace = self.tokens.trace
        assert trace is not None
        prompt = trace.prompt(int(self.tokens.rows[origin])).astype(np.int64)
        lo = rule.min_match
        keys = np.zeros((rule.max_match - lo + 1, 0), np.uint64)
        if len(prompt) > lo:  # positions where a context fits
            keys = ngram_keys(prompt, lo, rule.max_match)[:, lo : len(prompt)]
        seqs = {m: self.tokens.sequence(m, rule) for m in members}
        return GroupIndex(prompt[lo:] if len(prompt) > lo else prompt[:0], keys, seqs)

    def _group_exact(
        self,
        rule: DraftRule,
        rid: int,
        depth: int,
        paths: int,
        iterations: int,
        first_plain: bool = False,
        caught: set[int] | None = None,
    ) -> np.ndarray:
        """Step one request iteration by iteration: draft from the group table plus its own
        tokens since they were last indexed, verify against the recorded tokens
        (sim.group_step; sim.group_table holds the reference form). `first_plain`: the
        first iteration is the request's prefill pass (one token, no draft); `caught`: as
        `_group` takes it."""
        grp = self._group(rule, rid, caught)
        origin = self.tokens.origin(rid)
        seq = self.tokens.sequence(rid, rule)
        start = int(self.state.generated[rid])
        end = self.tokens.end(rid)
        skip = 1 if first_plain and start < end and iterations else 0
        pos0 = start + skip
        vis = min(grp.visible_of(origin), pos0)
        stop = seq.offset + min(end, pos0 + (iterations - skip) * (depth + 1))
        toks = seq.seq[seq.offset + vis : stop]  # int64: the compiled stepper takes it as it is
        emitted, pos_after, drafted, accepted = step_block(
            grp, grp.seqs[origin], toks, vis, pos0 - vis, depth, paths, iterations - skip
        )
        out = np.ones(iterations, np.int16)
        out[skip : skip + len(emitted)] = emitted
        if skip:
            pos_after = np.concatenate(([pos0], pos_after)).astype(np.int64)
            drafted = np.concatenate(([0], drafted)).astype(np.int64)
            accepted = np.concatenate(([0], accepted)).astype(np.int64)
        self.ledger.remember(rid, start, pos_after, drafted, accepted, np.zeros(len(pos_after)))
        return out

    # ------------------------------------------------------------ group drafter (model)
    def _group_model(
        self,
        rule: DraftRule,
        rids: np.ndarray,
        alpha: np.ndarray,
        paths: np.ndarray,
        siblings: tuple[np.ndarray, np.ndarray] | None = None,
        uniform: int | None = None,
    ) -> np.ndarray:
        """Per-token acceptance from Seer Table 2 at the request's visible sibling count.
        `siblings`: the rows' `_siblings`, when the caller has them already; `uniform`: the
        path count of every row, when the caller knows they are all alike."""
        if rule.source == "group":
            refs = self._visible_refs(rids, rule.append_tokens, siblings or self._siblings(rids))
        else:
            refs = np.zeros(len(rids))
        k0 = uniform if uniform is not None else int(paths[0]) if len(paths) else 1
        if uniform is not None or (paths == k0).all():
            out = np.interp(refs, *self._table2_grid(k0))
        else:
            out = np.empty(len(rids))
            for k in np.unique(paths).tolist():
                sel = paths == k
                grid_refs, grid_p = self._table2_grid(int(k))
                out[sel] = np.interp(refs[sel], grid_refs, grid_p)
        if self._ref_accept is None:
            self._ref_accept = per_token_acceptance(table2_tau(self._group_size - 1, 1), TABLE2_DRAFT)
        # min(max(out * alpha / ref, 0), _MAX_ACCEPT), in place
        out *= alpha
        out /= max(self._ref_accept, 1e-9)
        np.maximum(out, 0.0, out=out)
        return np.minimum(out, _MAX_ACCEPT, out=out)

    def _visible_refs(
        self, rids: np.ndarray, append_tokens: int, siblings: tuple[np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """Sibling references each row's drafter sees: a finished sibling counts 1, a running
        one the share of the row's own position its last batched append made visible."""
        st = self.state
        sib, none = siblings
        gen = st.generated.take(sib)  # take: a fancy index's copy, with less overhead
        # what the last batched append made visible: gen - gen % append_tokens, which for a
        # power of two (the default 16) is gen with its low bits cleared (floor semantics)
        if append_tokens & (append_tokens - 1):
            vis = gen - gen % append_tokens
        else:
            vis = np.bitwise_and(gen, -append_tokens, out=gen)
        share = vis / np.maximum(st.generated.take(rids), 1)[:, None]
        np.minimum(share, 1.0, out=share)
        np.copyto(share, 1.0, where=st.state.take(sib) == FINISHED)
        np.copyto(share, 0.0, where=none)
        return share.sum(axis=1)

    def _siblings(self, rids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row, its group's members (G columns, the layout `_visible_refs` sums over)
        as request ids (0 where there is none) and where the column is no sibling (padding
        or the row's own request)."""
        if self._sibling_cols is None:
            matrix = self._member_matrix()
            n = self.state.n_requests
            cols = matrix[self._group_index]
            none = (cols < 0) | (cols == np.arange(n)[:, None])
            self._sibling_cols = (np.maximum(cols, 0), none)
        sib, none = self._sibling_cols
        origin = self.state.origin.take(rids)
        return sib.take(origin, axis=0), none.take(origin, axis=0)

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

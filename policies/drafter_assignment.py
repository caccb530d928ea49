"""A worker's mixed speculation assignment, as the best-drafter part weighs it: each
request's best option per draft method (`Option`), and the choices and worker token rates
for the sets of methods its greedy drop loop tries, each computed once (`Assignment`).

A draft model's step is paid by the whole batch however few requests use it, so a choice
is judged by the worker's real mixed-batch time: verify tokens summed over requests and
one draft pass per method used.
"""

from __future__ import annotations

from simctl.policies.contract import ClusterView
from simctl.policies.drafter_arms import Arm


class Option:
    """A request's best arm with one method, during one `configure` call."""

    __slots__ = ("arm", "method", "p", "rate", "tokens")

    def __init__(self, method: str, arm: Arm, rate: float, p: float) -> None:
        self.method = method
        self.arm = arm
        self.rate = rate  # at p rounded to the memo's level
        self.p = p  # the request's own acceptance with the method
        self.tokens: float | None = None  # arm.tokens(p), once a worker rate needs it


class Assignment:
    """Choices and worker rates for the sets of methods `BestDrafter.configure`'s greedy
    drop loop tries, each computed once: the loop asks again for the set it moved to, and
    a trial's cost-model calls often repeat another's (a drafter the drop did not touch)."""

    def __init__(
        self, view: ClusterView, batch: int, ctx: float, options: list[list[Option]], threshold: float
    ) -> None:
        self.view, self.batch, self.ctx = view, batch, ctx
        self.options = options  # per request, its best option per method
        self.threshold = threshold  # a rate must beat plain decoding's by this much
        # allowed methods -> per request: its choice, and the methods its scan ever took
        self._choice: dict[frozenset[str], list[Option | None]] = {}
        self._taken: dict[frozenset[str], list[tuple[str, ...]]] = {}
        self._rate: dict[frozenset[str], float] = {}
        self._verify_cost: dict[float, float] = {}
        self._draft_cost: dict[tuple[str, int, int, int], float] = {}

    def choice(self, allowed: frozenset[str], parent: frozenset[str] | None = None) -> list[Option | None]:
        """Each request's best option among `allowed` methods (None: plain decoding is
        faster). Ties as in `BestDrafter.best_arm`: scanning the options in order, one
        replaces the best so far only if its rate is higher by a factor above 1 + 1e-9.

        With `parent`, a superset whose choice is known, only the requests whose scan
        under `parent` ever took one of the removed methods are scanned again: an option a
        scan never took left the scan's state as it was, so without it the scan ends the
        same (the trials of the greedy drop loop remove one method each)."""
        got = self._choice.get(allowed)
        if got is not None:
            return got
        if parent is not None and parent in self._choice:
            removed = parent - allowed
            out = list(self._choice[parent])
            taken = list(self._taken[parent])
            for i, t in enumerate(taken):
                if not removed.isdisjoint(t):
                    out[i], taken[i] = self._scan(self.options[i], allowed)
        else:  # `_scan` of every request, inlined (the first choice of every configuration)
            out, taken = [], []
            threshold = self.threshold
            took: tuple[str, ...]
            for opts in self.options:
                best: Option | None = None
                best_rate, took = -1.0, ()
                for o in opts:
                    if o.method in allowed and o.rate > best_rate * (1 + 1e-9):
                        best, best_rate, took = o, o.rate, (*took, o.method)
                out.append(best if best is not None and best_rate > threshold else None)
                taken.append(took)
        self._choice[allowed], self._taken[allowed] = out, taken
        return out

    def _scan(self, opts: list[Option], allowed: frozenset[str]) -> tuple[Option | None, tuple[str, ...]]:
        """One request's choice among `allowed` and the methods its scan took on the way."""
        best: Option | None = None
        best_rate = -1.0
        taken: tuple[str, ...] = ()
        for o in opts:
            if o.method in allowed and o.rate > best_rate * (1 + 1e-9):
                best, best_rate, taken = o, o.rate, (*taken, o.method)
        return (best if best is not None and best_rate > self.threshold else None), taken

    def rate(self, allowed: frozenset[str], parent: frozenset[str] | None = None) -> float:
        """Tokens per second of the worker under `choice(allowed, parent)`, a mixed
        assignment: requests this part does not place (e.g. replicas) decode plainly in the
        estimate."""
        got = self._rate.get(allowed)
        if got is not None:
            return got
        choice = self.choice(allowed, parent)
        batch, ctx = self.batch, self.ctx
        # tokens summed request by request (float addition, in the original order); the rest
        # per distinct arm: integer token counts, and the drafters in order of first use
        tokens = float(batch - len(choice))
        uses: dict[int, int] = {}  # id(arm) -> requests
        arms: dict[int, Arm] = {}  # id(arm) -> arm, in order of first use
        for o in choice:
            if o is None:
                tokens += 1.0
                continue
            tok = o.tokens
            if tok is None:
                tok = o.tokens = o.arm.tokens(o.p)
            tokens += tok
            arm = o.arm
            i = id(arm)
            n = uses.get(i)
            if n is None:
                uses[i] = 1
                arms[i] = arm
            else:
                uses[i] = n + 1
        verify = float(batch)
        drafters: dict[str, tuple[int, int, int]] = {}  # method -> (requests, depth, paths)
        for i, arm in arms.items():
            spec = arm.spec
            verify += spec.tokens_verified * uses[i]
            n, d, k = drafters.get(arm.method, (0, 0, 1))
            drafters[arm.method] = (n + uses[i], max(d, spec.gamma), max(k, spec.topk))
        t = self._verify_cost.get(verify)
        if t is None:
            t = self._verify_cost[verify] = self.view.cost(batch, verify, ctx)
        for m, (n, d, k) in drafters.items():
            draft = self._draft_cost.get((m, n, d, k))
            if draft is None:
                draft = self.view.draft_cost(m, n * k, ctx * n / batch * k, d)
                self._draft_cost[(m, n, d, k)] = draft
            t += draft
        self._rate[allowed] = tokens / t
        return self._rate[allowed]

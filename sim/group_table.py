"""The exact grouped drafter (Seer's) in its reference form: per-group n-gram tables as
plain dicts keyed by 64-bit context hashes (sim.trace_tokens.ngram_keys), a context with
one child packed into one int (token << 32 | count), several into a dict, and a block
stepped token by token (`reference_block`).

The simulator runs the bulk form of the same drafter (sim.group_index, sim.group_step),
which must give identical results; its tests compare the two on random sequences, so
this module stays the plain statement of what the drafter does."""

from __future__ import annotations

_MASK = (1 << 32) - 1
ABSENT = 1 << 30


def add_many(table: dict, toks: list[int], key_rows: list[list[int]]) -> None:
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


def children(v: int | dict) -> dict:
    if isinstance(v, int):
        return {v >> 32: v & _MASK}
    return v


def merged(base: int | dict, over: int | dict) -> dict:
    out = dict(children(base))
    for t, c in children(over).items():
        out[t] = out.get(t, 0) + c
    return out


def best(v: int | dict) -> int:
    if isinstance(v, int):
        return v >> 32
    kids = v
    return min(kids, key=lambda t: (-kids[t], t))


def rank(v: int | dict, tok: int) -> int:
    if isinstance(v, int):
        return 0 if v >> 32 == tok else ABSENT
    w = v.get(tok)
    if w is None:
        return ABSENT
    ahead = 0
    for t, c in v.items():
        if c > w or (c == w and t < tok):
            ahead += 1
    return ahead


def lookup(base: dict, over: dict, keys: list[int]) -> int | dict | None:
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
            return merged(b, o)
    return None


def reference_block(
    table: dict, toks: list[int], keys: list[list[int]], i0: int, depth: int, paths: int, iterations: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """One request's block, iteration by iteration: draft from `table` (its group) plus its
    own tokens since they were last indexed (`over`), verify against the recorded tokens.

    toks/keys: the window, index 0 = the first own token not in `table` (keys[q]: the
    context hashes before toks[q], longest first); i0: the window index drafting starts
    at. Per iteration: tokens emitted, window index after it, tokens drafted, accepted."""
    over: dict = {}
    add_many(over, toks[:i0], keys[:i0])
    n_tok = len(toks)
    emitted: list[int] = []
    after: list[int] = []
    drafted: list[int] = []
    accepted: list[int] = []
    i = i0
    for _ in range(iterations):
        if i >= n_tok:
            break
        kids = lookup(table, over, keys[i])
        acc, drafts = 0, 0
        if kids is not None:
            drafts = depth * paths
            if rank(kids, toks[i]) < paths:
                acc = 1
                while acc < depth and i + acc < n_tok:
                    nxt = lookup(table, over, keys[i + acc])
                    if nxt is None or best(nxt) != toks[i + acc]:
                        break
                    acc += 1
        e = min(acc + 1, n_tok - i)
        add_many(over, toks[i : i + e], keys[i : i + e])
        i += e
        emitted.append(e)
        after.append(i)
        drafted.append(drafts)
        accepted.append(acc)
    return emitted, after, drafted, accepted

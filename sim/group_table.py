"""Per-group n-gram tables of the exact grouped drafter (Seer's), as plain dicts keyed by
64-bit context hashes (sim.trace_tokens.ngram_keys): millions of entries, so a context
with one child is packed into one int (token << 32 | count), several into a dict."""

from __future__ import annotations

from dataclasses import dataclass, field

_MASK = (1 << 32) - 1
_ABSENT = 1 << 30


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
        return 0 if v >> 32 == tok else _ABSENT
    w = v.get(tok)
    if w is None:
        return _ABSENT
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


@dataclass
class GroupTable:
    table: dict = field(default_factory=dict)
    visible: dict[int, int] = field(default_factory=dict)  # request -> response tokens indexed

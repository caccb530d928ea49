"""Choosing trace steps on the command line (`--steps N` or `A:B`), shared by replay and live."""

from __future__ import annotations

import click


def parse_steps(text: str | None, available: list[int]) -> list[int]:
    """`A:B` (inclusive A, exclusive B, either side optional) or `N` over the trace's steps."""
    if not text:
        return available
    try:
        if ":" in text:
            a, b = text.split(":", 1)
            lo = int(a) if a else min(available)
            hi = int(b) if b else max(available) + 1
            chosen = [s for s in available if lo <= s < hi]
        else:
            chosen = [s for s in available if s == int(text)]
    except ValueError:
        raise click.BadParameter(f"'{text}' is not N or A:B", param_hint="--steps") from None
    if not chosen:
        raise click.BadParameter(
            f"'{text}' selects no step; trace has steps {available[0]}..{available[-1]}", param_hint="--steps"
        )
    return chosen

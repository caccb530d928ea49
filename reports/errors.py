"""Report errors and the record of what a report had to leave out.

A report over several runs should degrade, not die: one unusable run or one missing
table must not cost the user the rest of the page. So only input problems that leave
nothing to show are fatal (`ReportError`); everything else becomes a `Notes` entry
that the page lists under "left out" and that is echoed on stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from simctl.traces.terminal import terminal_text

__all__ = ["Notes", "ReportError", "terminal_text"]


class ReportError(ValueError):
    """A fatal input problem; the message is one line, fit for a CLI error."""


@dataclass
class Notes:
    """Warnings (shown, but the content is there) and left-out items (content missing)."""

    warnings: list[str] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def leave_out(self, what: str, why: str) -> None:
        if (what, why) not in self.left_out:
            self.left_out.append((what, why))

    def echo(self, stream=None) -> None:
        """One stderr line per item so scripts and humans both see the gaps."""
        stream = stream or sys.stderr
        for w in self.warnings:
            print(f"warning: {terminal_text(w)}", file=stream)
        for what, why in self.left_out:
            print(f"warning: left out {terminal_text(what)}: {terminal_text(why)}", file=stream)

"""Text from the user's files and plug-ins on the user's terminal: as text, never as a
control sequence (an ANSI escape in a trace's metadata would act on the terminal) nor as
rich markup (rich reads "[...]" as a style: "[/]" in a name was an internal error)."""

from __future__ import annotations

from rich.markup import escape


def terminal_text(text: str) -> str:
    """`text` with every non-printable character written as its Python escape (\\t,
    \\x1b, ...): a policy name is a plug-in's string, and a tab, newline or ANSI escape
    in it must neither break a one-line message nor act on the user's terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def rich_text(text: object) -> str:
    """`text` for a rich console or table: printable (terminal_text) and markup escaped."""
    return escape(terminal_text(str(text)))

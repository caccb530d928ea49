"""Token counts for dumps that record decoded text only (verl, ROLL).

Those frameworks decode the generated ids with ``skip_special_tokens=True`` before writing,
so the ids themselves are gone; encoding the text again with the rollout model's tokenizer
gives the same ids wherever the tokenizer round-trips (the usual case for BPE tokenizers),
and the end-of-sequence token the decode dropped is added back to a response that stopped
before its budget. Only a local Hugging Face tokenizer directory is read (no hub access):
simulation runs offline.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simctl.traces.importers.common import DumpError, RowSet


@dataclass
class TextTokenizer:
    """A loaded tokenizer: batch encoding without added special tokens, and its EOS id."""

    hf: Any
    eos_id: int | None
    path: Path
    # what the rollout gave `apply_chat_template` besides the chat (verl's
    # `data.apply_chat_template_kwargs`, e.g. Qwen3's enable_thinking)
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def has_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def render(self, messages: list[dict[str, Any]]) -> str:
        """The chat as the rollout rendered it: through the chat template, with the
        generation prompt and the run's template arguments (raises what jinja raises)."""
        return str(
            self.hf.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **self.template_kwargs
            )
        )

    @property
    def cleans_up_spaces(self) -> bool:
        """Whether decoding drops spaces before punctuation (`clean_up_tokenization_spaces`,
        which Llama-3's tokenizer sets and transformers 4 applies): such a dump's text does
        not encode back to the generated ids."""
        return bool(getattr(self.hf, "clean_up_tokenization_spaces", False))

    def encode(self, texts: list[str], special: bool = False) -> list[list[int]]:
        """Ids of each text, as the model would have generated them (no BOS added), or with
        `special` as a tokenizer call with its defaults encodes a prompt (the BOS and other
        tokens its post-processor adds, where it adds any)."""
        if not texts:
            return []
        try:
            return [list(ids) for ids in self.hf(texts, add_special_tokens=special)["input_ids"]]
        except (TypeError, ValueError) as exc:  # (a lone surrogate a JSON escape produced)
            bad = next((t for t in texts if not _encodable(t)), None)
            shown = repr(bad[:40]) if bad is not None else "a text"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:80]
            raise DumpError(f"--tokenizer {self.path}: cannot encode {shown} of the dump ({first})") from None


def note_decoding(tok: TextTokenizer, rows: RowSet) -> None:
    """Say in the notes when the tokenizer's decode cleans up spaces: the framework's
    transformers may have applied it to the dumped text (4.x does; 5.x not for BPE), which
    then encodes back a token short here and there."""
    if tok.cleans_up_spaces:
        rows.notes["decode_cleans_up_spaces"] = (
            "the tokenizer sets clean_up_tokenization_spaces: where the run's transformers applied it "
            "(4.x), the dumped text lost spaces before punctuation, and lengths are approximate"
        )


def load_tokenizer(
    path: Path | None,
    fmt: str,
    chat_template: Path | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> TextTokenizer:
    """`--tokenizer DIR`, required by formats whose dumps hold text only; with the chat
    template the run used instead of the tokenizer's (`--chat-template`: verl's
    `custom_chat_template`, a ROLL `template` other than the tokenizer's own) and the
    arguments it rendered with (`--chat-template-kwarg`)."""
    if path is None:
        raise DumpError(
            f"{fmt} dumps record decoded text, not token counts; pass --tokenizer DIR "
            "(a local Hugging Face tokenizer directory of the rollout model)"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise DumpError("--tokenizer needs transformers: pip install 'simctl[torch]'") from None
    if not path.is_dir():
        raise DumpError(f"{path}: --tokenizer must be a local Hugging Face tokenizer directory")
    try:
        hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DumpError(f"{path}: cannot load a tokenizer from this directory ({first})") from None
    except RecursionError:
        raise DumpError(
            f"{path}: cannot load a tokenizer from this directory (JSON nested too deeply)"
        ) from None
    eos = getattr(hf, "eos_token_id", None)
    tok = TextTokenizer(
        hf=hf,
        eos_id=eos if isinstance(eos, int) else None,
        path=path,
        template_kwargs=dict(template_kwargs or {}),
    )
    if chat_template is not None:
        hf.chat_template = read_template(chat_template)
    if chat_template is not None or tok.template_kwargs:
        _check_template(tok, chat_template)
    return tok


def read_template(path: Path) -> str:
    """A chat template file's jinja text (one line naming the file when it cannot be)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DumpError(f"--chat-template {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise DumpError(f"--chat-template {path}: cannot read it ({exc.strerror or exc})") from None
    if not text.strip():
        raise DumpError(f"--chat-template {path}: the file is empty")
    return text


def _check_template(tok: TextTokenizer, chat_template: Path | None) -> None:
    """Render a one-message chat, so that a template that does not compile, or arguments
    it cannot take, is one line before any of the dump is read."""
    where = (
        f"--chat-template {chat_template}" if chat_template is not None else "the tokenizer's chat template"
    )
    if not tok.has_template:
        raise DumpError(f"--chat-template-kwarg: {tok.path} has no chat template to give it to")
    try:
        tok.render([{"role": "user", "content": "x"}])
    except Exception as exc:  # (jinja's errors: syntax, undefined names, raise_exception)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise DumpError(
            f"{where}: cannot render a one-message chat ({type(exc).__name__}: {first})"
        ) from None


def note_template(tok: TextTokenizer, chat_template: Path | None, rows: RowSet) -> None:
    """Record in the trace's notes which template and arguments the prompts were rendered
    with, where the user gave them (the file by name and content hash)."""
    if chat_template is not None:
        digest = hashlib.sha256(str(tok.hf.chat_template).encode()).hexdigest()[:16]
        rows.notes["chat_template"] = f"{chat_template.name} (sha256 {digest})"
    if tok.template_kwargs:
        rows.notes["chat_template_kwargs"] = dict(tok.template_kwargs)


def response_ids(
    tok: TextTokenizer, ids: list[int], budget: int | None, text: str = "", rows: RowSet | None = None
) -> tuple[list[int], bool | None]:
    """(generated ids, truncated) of one decoded response `text` (encoded again: `ids`):
    ids that fill the budget were cut there, and so was a text that ends in U+FFFD, the
    replacement character a decode writes for a multi-byte character cut short: the budget
    ended inside it, so the response is `budget` tokens long, though the character's byte
    tokens (one to three) encode again as one replacement character. Its length is made the
    budget by repeating the replacement character's id (those last ids are not the
    generated ones: counted in `rows`' notes, `responses_cut_inside_a_character`). A
    shorter response stopped at the EOS token the decoding dropped, which is added back
    (where the tokenizer has one). Without a budget the ending stays unknown."""
    if budget is not None:
        padded = cut_inside_character(ids, budget, text, rows)
        if padded is not None:
            return padded, True
    if budget is not None and (len(ids) >= budget or text.endswith("\ufffd")):
        return ids[:budget], True
    if tok.eos_id is not None:
        return [*ids, tok.eos_id], False if budget is not None else None
    return ids, None


def cut_inside_character(ids: list[int], length: int, text: str, rows: RowSet | None) -> list[int] | None:
    """The ids of a response `text` that ends in U+FFFD (a multi-byte character cut short
    at the budget) made `length` long, its known length, by repeating the replacement
    character's id for the byte tokens it stands for (counted in `rows`' notes,
    `responses_cut_inside_a_character`); None for any other response."""
    if not (text.endswith("\ufffd") and 0 < len(ids) < length):
        return None
    if rows is not None:
        rows.count("responses_cut_inside_a_character")
    return ids + [ids[-1]] * (length - len(ids))


def _encodable(text: str) -> bool:
    """Whether `text` is valid Unicode text (no lone surrogate, which JSON's \\ud800 escape
    makes and no tokenizer takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Stand-ins for the message contents when the chat template is rendered once to learn the
# text around them (letters only: no tokenizer splits them into special tokens).
_MARK = "QqSimctlMark{}Qq"

# The chats tried, as their roles: a user message after up to MAX_EXCHANGES earlier
# exchanges (a few-shot prompt), each with and without a system message; tried longest
# first, since a longer chat's text also reads as a shorter chat whose content holds the
# role headers (a chat of more exchanges is read as one of these, short by the headers'
# special tokens).
MAX_EXCHANGES = 8
_CHAT_FORMS = tuple(
    sorted(
        (
            (*(("system",) if system else ()), *(("user", "assistant") * turns), "user")
            for turns in range(MAX_EXCHANGES + 1)
            for system in (False, True)
        ),
        key=len,
        reverse=True,
    )
)


def _letters(i: int) -> str:
    """A stand-in's distinct letters (no digit: a tokenizer may split digits apart).

    >>> [_letters(i) for i in (0, 1, 25, 26)]
    ['A', 'B', 'Z', 'BA']
    """
    out = ""
    while True:
        out = chr(ord("A") + i % 26) + out
        i //= 26
        if not i:
            return out


class TemplatedPrompts:
    """The prompt ids a rollout fed the model, recovered from a prompt text that was decoded
    with ``skip_special_tokens=True`` (verl's dump): that decode dropped the chat template's
    special tokens (``<|im_start|>``, ``<|im_end|>``: five of them on a ChatML chat of a
    system and a user message), so encoding the text again falls short by as many.

    The chat template is rendered once per chat form (`_CHAT_FORMS`) with stand-ins for the
    contents, which gives the decoded text around them. A prompt text of that shape has its
    contents read off, the chat is rendered again around them and encoded as the rollout
    encoded it (``add_special_tokens=False``: the template writes its own BOS), and the
    result is kept only where decoding it the same way gives the dumped text back exactly.
    Any other prompt (no template, a chat of another form, a template that renders
    differently) is encoded as text, as before, and counted.

    The decoded text cannot tell a user message that quotes a role header from the turns
    it would start; the longer chat is taken (few-shot prompts are the likelier), so such a
    prompt comes out a few tokens long, and a chat of more than MAX_EXCHANGES exchanges a
    few short."""

    def __init__(self, tok: TextTokenizer) -> None:
        self.tok = tok
        # per form: the roles, and the decoded text before, between and after the contents
        self.forms: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        if tok.has_template:
            for roles in _CHAT_FORMS:
                pieces = self._pieces(roles)
                if pieces is not None:
                    self.forms.append((roles, pieces))

    def _render(self, roles: tuple[str, ...], contents: tuple[str, ...]) -> str | None:
        messages = [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)]
        try:
            return self.tok.render(messages)
        except Exception:  # (jinja's errors: a template that takes no such chat)
            return None

    def _decoded(self, text: str) -> str:
        ids = self.tok.hf(text, add_special_tokens=False)["input_ids"]
        return str(self.tok.hf.decode(ids, skip_special_tokens=True))

    def _pieces(self, roles: tuple[str, ...]) -> tuple[str, ...] | None:
        """The decoded text around the contents of a chat of `roles`, or None where the
        template does not write each stand-in once, in order."""
        marks = tuple(_MARK.format(_letters(i)) for i in range(len(roles)))
        text = self._render(roles, marks)
        if text is None:
            return None
        pieces, rest = [], text
        for mark in marks:
            head, found, rest = rest.partition(mark)
            if not found or mark in rest:
                return None
            pieces.append(head)
        pieces.append(rest)
        return tuple(self._decoded(p) for p in pieces)

    def _contents(self, text: str, pieces: tuple[str, ...]) -> tuple[str, ...] | None:
        """`text`'s message contents under a form's decoded `pieces` (None: not that shape);
        a content containing the next piece splits at its first occurrence."""
        head, tail = pieces[0], pieces[-1]
        if len(text) < len(head) + len(tail) or not text.startswith(head) or not text.endswith(tail):
            return None
        body = text[len(head) : len(text) - len(tail)]
        contents = []
        for between in pieces[1:-1]:
            part, found, body = body.partition(between)
            if not found:
                return None
            contents.append(part)
        contents.append(body)
        return tuple(contents)

    def encode(self, texts: list[str]) -> tuple[list[list[int]], int]:
        """(ids of each prompt text, how many were recovered through the chat template)."""
        out = self.tok.encode(texts)
        recovered = 0
        if not self.forms:
            return out, recovered
        memo: dict[str, list[int] | None] = {}
        for i, text in enumerate(texts):
            if text not in memo:
                memo[text] = self._recover(text)
            ids = memo[text]
            if ids is not None:
                out[i] = ids
                recovered += 1
        return out, recovered

    def _recover(self, text: str) -> list[int] | None:
        for roles, pieces in self.forms:
            contents = self._contents(text, pieces)
            if contents is None:
                continue
            rendered = self._render(roles, contents)
            if rendered is None:
                continue
            ids = list(self.tok.hf(rendered, add_special_tokens=False)["input_ids"])
            if self.tok.hf.decode(ids, skip_special_tokens=True) == text:
                return ids
        return None

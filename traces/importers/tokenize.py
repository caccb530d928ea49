"""Token counts for dumps that record decoded text only (verl, ROLL).

Those frameworks decode the generated ids with ``skip_special_tokens=True`` before writing,
so the ids themselves are gone; encoding the text again with the rollout model's tokenizer
gives the same ids wherever the tokenizer round-trips (the usual case for BPE tokenizers),
and the end-of-sequence token the decode dropped is added back to a response that stopped
before its budget. Only a local Hugging Face tokenizer directory is read (no hub access):
simulation runs offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simctl.traces.importers.common import DumpError


@dataclass
class TextTokenizer:
    """A loaded tokenizer: batch encoding without added special tokens, and its EOS id."""

    hf: Any
    eos_id: int | None
    path: Path

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text, as the model would have generated them (no BOS added)."""
        if not texts:
            return []
        try:
            return [list(ids) for ids in self.hf(texts, add_special_tokens=False)["input_ids"]]
        except (TypeError, ValueError) as exc:  # (a lone surrogate a JSON escape produced)
            bad = next((t for t in texts if not _encodable(t)), None)
            shown = repr(bad[:40]) if bad is not None else "a text"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:80]
            raise DumpError(f"--tokenizer {self.path}: cannot encode {shown} of the dump ({first})") from None


def load_tokenizer(path: Path | None, fmt: str) -> TextTokenizer:
    """`--tokenizer DIR`, required by formats whose dumps hold text only."""
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
    return TextTokenizer(hf=hf, eos_id=eos if isinstance(eos, int) else None, path=path)


def response_ids(
    tok: TextTokenizer, ids: list[int], budget: int | None, text: str = ""
) -> tuple[list[int], bool | None]:
    """(generated ids, truncated) of one decoded response `text` (encoded again: `ids`):
    ids that fill the budget were cut there, and so was a text that ends in U+FFFD, the
    replacement character a decode writes for a multi-byte character cut short (the budget
    ended inside it; its bytes' token is lost, so the ids fall one short); a shorter response
    stopped at the EOS token the decoding dropped, which is added back (where the tokenizer
    has one). Without a budget the ending stays unknown."""
    if budget is not None and (len(ids) >= budget or text.endswith("\ufffd")):
        return ids[:budget], True
    if tok.eos_id is not None:
        return [*ids, tok.eos_id], False if budget is not None else None
    return ids, None


def _encodable(text: str) -> bool:
    """Whether `text` is valid Unicode text (no lone surrogate, which JSON's \\ud800 escape
    makes and no tokenizer takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

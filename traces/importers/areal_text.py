"""AReaL before v0.5.2: the coloured text files a workflow's `dump_dir` holds.

Followed: inclusionAI/AReaL @ v0.5.1, `areal/workflow/rlvr.py`, `RLVRWorkflow.arun_episode`
(`areal/workflow/multi_turn.py` writes the same), used from v0.3.0-lite on; v0.5.2 replaced
it with the JSONL trajectories `areal.py` reads. Files are `<dump_dir>/<version>/<qid>.txt`
(`version`: the engine's weight version when the episode started; `qid`: the data's
`query_id`, `id` or `qid`, else a random hex), appended one episode at a time, each of its
`n_samples` responses as

    idx: {i + 1} / {n_samples}, seqlen: {prompt + response tokens}, reward is {reward}.
    prompt is \\n<YELLOW DIM>{prompt}<RESET>
    sequence is: \\n<YELLOW DIM>{completion}<RESET>

with colorama's codes. The prompt is `tokenizer.decode(input_ids)` (special tokens kept), so
`--tokenizer DIR` encodes it back to its length, and the response length is `seqlen` minus
that. A group is one episode: a file's records from an `idx: 1` to the next.
"""

from __future__ import annotations

import re
from pathlib import Path

from simctl.traces.importers.common import DumpError, RowSet, as_reward
from simctl.traces.importers.tokenize import load_tokenizer

_COLOUR = "\x1b[33m\x1b[2m"  # colorama Fore.YELLOW + Style.DIM
_RESET = "\x1b[0m"  # colorama Style.RESET_ALL
_RECORD = re.compile(
    r"idx: (\d+) / (\d+), seqlen: (\d+), reward is (.*?)\.\n"
    rf"prompt is \n{re.escape(_COLOUR)}(.*?){re.escape(_RESET)}\n"
    rf"sequence is: \n{re.escape(_COLOUR)}(.*?){re.escape(_RESET)}\n",
    re.DOTALL,
)


def is_text_dump(path: Path) -> bool:
    return path.suffix == ".txt" and path.parent.name.isdigit()


def read_text(files: list[Path], rows: RowSet, tokenizer: Path | None) -> None:
    """Add every record of `files` to `rows`, with token columns where they agree."""
    tok = load_tokenizer(tokenizer, "areal (.txt, before v0.5.2)")
    prompts: list[str] = []
    completions: list[str] = []
    seqlens: list[int] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DumpError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        episode, pos, number = -1, 0, 1
        for match in _RECORD.finditer(text):
            if match.start() != pos:
                raise DumpError(f"{path} line {number}: not an 'idx: i / n, seqlen: S, reward is R.' record")
            where = f"{path} line {number}"
            number += match.group(0).count("\n")
            pos = match.end()
            idx, seqlen = int(match.group(1)), int(match.group(3))
            if idx == 1:
                episode += 1
            try:
                value = float(match.group(4))
            except ValueError:
                raise DumpError(f"{where}: reward {match.group(4)!r} is not a number") from None
            rows.add(
                where,
                step=int(path.parent.name),
                group=f"{path}#{episode}",
                prompt=match.group(5),
                order=idx,
                prompt_len=1,  # (set below, once the prompts are encoded)
                response_len=1,
                reward=as_reward(value, "reward", where, rows),
            )
            prompts.append(match.group(5))
            completions.append(match.group(6))
            seqlens.append(seqlen)
        if pos != len(text):
            raise DumpError(f"{path} line {number}: not an 'idx: i / n, seqlen: S, reward is R.' record")
    _lengths(rows, tok.encode(prompts), tok.encode(completions), seqlens)


def _lengths(
    rows: RowSet, prompts: list[list[int]], completions: list[list[int]], seqlens: list[int]
) -> None:
    """Prompt lengths as encoded, response lengths what `seqlen` leaves; token columns: the
    prompts' ids, and the completions' where each encodes to its response length."""
    for i, (ids, seqlen) in enumerate(zip(prompts, seqlens, strict=True)):
        if not 1 <= len(ids) < seqlen:
            raise DumpError(
                f"{rows.where[i]}: seqlen {seqlen} leaves no response beside the prompt's {len(ids)} "
                "tokens (as --tokenizer encodes it)"
            )
        rows.prompt_len[i] = len(ids)
        rows.response_len[i] = seqlen - len(ids)
    rows.prompt_tokens = prompts
    agree = sum(len(x) == n for x, n in zip(completions, rows.response_len, strict=True))
    rows.notes["response_tokens_matching_rows"] = agree
    rows.response_tokens = completions if agree == len(completions) else None
    rows.notes["tokens"] = "encoded again from the dump's text (AReaL before v0.5.2)"

"""AReaL before v0.5.2: the coloured text files a workflow's `dump_dir` holds.

Followed: inclusionAI/AReaL @ v0.5.1, `areal/workflow/rlvr.py`, `RLVRWorkflow.arun_episode`
(`areal/workflow/multi_turn.py` writes the same layout, but with the last turn's prompt and
output only: refused, `_refuse_multi_turn`), used from v0.3.0-lite on; v0.5.2 replaced
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
from simctl.traces.importers.tokenize import cut_inside_character, load_tokenizer, note_decoding

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


UPSTREAM = "inclusionAI/AReaL@v0.5.1 areal/workflow/rlvr.py (RLVRWorkflow.arun_episode)"


def read_text(files: list[Path], rows: RowSet, tokenizer: Path | None) -> None:
    """Add every record of `files` to `rows`, with token columns where they agree. The
    completion is decoded with its special tokens too, so one that ends in the EOS token's
    text stopped there (also when that token was the budget's last)."""
    tok = load_tokenizer(tokenizer, "areal (.txt, before v0.5.2)")
    eos = getattr(tok.hf, "eos_token", None)
    records = [record for path in files for record in _records(path)]
    _refuse_multi_turn(records)
    prompts = tok.encode([r[4] for r in records])
    for (where, step, group, idx, prompt, seqlen, reward, done), ids in zip(records, prompts, strict=True):
        if not 1 <= len(ids) < seqlen:
            raise DumpError(
                f"{where}: seqlen {seqlen} leaves no response beside the prompt's {len(ids)} "
                "tokens (as --tokenizer encodes it)"
            )
        rows.add(
            where,
            step=step,
            group=group,
            prompt=prompt,
            order=idx,
            prompt_len=len(ids),
            response_len=seqlen - len(ids),
            truncated=False if isinstance(eos, str) and eos and done.endswith(eos) else None,
            reward=as_reward(reward, "reward", where, rows),
        )
    rows.prompt_tokens = prompts  # (their lengths are the prompt lengths)
    outs = tok.encode([r[7] for r in records])
    for i, (record, n) in enumerate(zip(records, rows.response_len, strict=True)):
        outs[i] = cut_inside_character(outs[i], n, record[7], rows) or outs[i]
    rows.keep_tokens("response_tokens", outs, rows.response_len)
    rows.notes["tokens"] = "encoded again from the dump's text (AReaL before v0.5.2)"
    note_decoding(tok, rows)
    rows.notes["upstream"] = UPSTREAM


# (where, step, group, idx, prompt, seqlen, reward, completion)
Record = tuple[str, int, str, int, str, int, float, str]


def _refuse_multi_turn(records: list[Record]) -> None:
    """One prompt per episode, or a one-line refusal. `multi_turn.py` (v0.5.1) dumps in
    this layout too, but its `prompt` is the last turn's input (the question, every earlier
    answer and the retry message) and its `sequence` that turn's output only, so the
    responses of an episode that took more turns have longer prompts, and reading them as
    one-turn responses would take earlier turns for prompt; AReaL from v0.5.2 dumps
    multi-turn trajectories as JSONL, which `areal.py` reads by turn."""
    first: dict[str, str] = {}
    for where, _, group, _, prompt, *_ in records:
        if first.setdefault(group, prompt) != prompt:
            raise DumpError(
                f"{where}: the episode's responses have different prompts, as multi_turn.py "
                "writes the last turn's (earlier turns inside); only single-turn (rlvr.py) text "
                "dumps can be read: use AReaL v0.5.2+ JSONL trajectories for multi-turn"
            )


def _records(path: Path) -> list[Record]:
    """A file's records, in order; one-line errors for anything else in it."""
    try:
        # (newline="": a prompt's or completion's CR stays one, as the writer wrote it; the
        # universal newlines of read_text turned "\r\n" into "\n", one token fewer)
        with path.open(encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise DumpError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    out: list[Record] = []
    episode, pos, number = -1, 0, 1
    for match in _RECORD.finditer(text):
        if match.start() != pos:
            break
        where = f"{path} line {number}"
        number += match.group(0).count("\n")
        pos = match.end()
        idx = int(match.group(1))
        episode += idx == 1  # (an episode's records start at idx 1)
        try:
            reward = float(match.group(4))
        except ValueError:
            raise DumpError(f"{where}: reward {match.group(4)!r} is not a number") from None
        group = f"{path}#{episode}"
        out.append(
            (
                where,
                int(path.parent.name),
                group,
                idx,
                match.group(5),
                int(match.group(3)),
                reward,
                match.group(6),
            )
        )
    if pos != len(text):
        raise DumpError(f"{path} line {number}: not an 'idx: i / n, seqlen: S, reward is R.' record")
    return out

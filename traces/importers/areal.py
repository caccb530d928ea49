"""AReaL: the trajectories `rollout.dump_to_file=true` writes.

Followed: inclusionAI/AReaL @ 4aef98d8 (v1.0.4-17, May 2026), `areal/infra/workflow_executor.py`,
`WorkflowExecutor._dump_trajectory` (the option is `dump_to_file` in `areal/api/cli_args.py`).
Files are `<log dir>/rollout/<tail_version>/<task_id>.jsonl` (evaluation goes to
`eval-rollout/`, which is skipped), one line per response of a task with the fields

- `task_id`: the rollout task (one prompt's group of `n_samples` responses);
- `sample_idx`: the response's index in the task's batch;
- `seqlen`, `prompt_len`: tokens of prompt + response, and of the prompt;
- `head_version`, `tail_version`: oldest and newest weight versions that generated it;
- `reward`, and `prompt` / `completion` as decoded text.

The step is `tail_version` (the weights the response finished with, and the directory it is
filed under). The response length is `seqlen - prompt_len`; AReaL skips responses with no
generated token, so a group can come out short: with `--group-size` such groups are dropped
(and counted), without it the differing sizes are refused. A prompt's id is the hash of its
text (for a multi-turn workflow see below), so the same prompt keeps its id across steps
(task ids do not recur). Budget: `--max-tokens`
(`gconfig.max_new_tokens` is not dumped); epochs: `--steps-per-epoch`.

Multi-turn workflows (`areal/workflow/multi_turn.py`, `MultiTurnWorkflow.arun_episode`:
a wrong answer gets a retry message and another turn, up to `max_turns`; agent workflows
exported with `export_style: concat`) dump one record per episode: its sequence is the
prompt, then each turn's output followed by the next turn's new input, with `loss_mask` 1 on
the outputs. `_dump_trajectory` keeps only `prompt_len = seqlen - sum(loss_mask)`, so the
response length is every turn's generated tokens, and neither the number of turns nor their
lengths is dumped (`prompt_len` includes the inputs between turns, and the `prompt` and
`completion` texts are the sequence cut at `prompt_len`). Each turn's budget is
`gconfig.max_new_tokens` (`--max-tokens`; capped by what `gconfig.max_tokens` leaves of the
context, `areal/infra/remote_inf_engine.py`, `agenerate`, which is not dumped either).
Nothing in a dump tells a multi-turn one, so `--max-turns N` (the workflow's `max_turns`)
says it is: a response longer than `--max-tokens` then took at least
ceil(length / --max-tokens) turns, up to N; its budget is that many times `--max-tokens`,
the fewest turns that hold it, and it is 'length' only where it fills them all. The notes
count such responses by that least number of turns (`turns_at_least`). Without
`--max-turns`, such a response is refused, as for any format: the budget given is wrong.

A multi-turn record's `prompt` text, cut at `prompt_len`, runs past the prompt into the
first output (by as many tokens as the inputs between turns), so it is not the prompt's key.
A task is one prompt's group (`GroupedRolloutWorkflow`, `areal/infra/remote_inf_engine.py`,
runs the workflow `n_samples` times on it), so a row's prompt is keyed by the common start
of its task's prompt texts: the prompt itself wherever a response of the task took one turn
(and in a single-turn dump, whose tasks repeat one text). Where every response of a task
took several turns, that start runs on into whatever their first outputs share (a `<think>`
tag), and the prompt's id then differs from its id at other steps.

No token ids are dumped, but the text is decoded with ``skip_special_tokens=False``, so with
`--tokenizer DIR` it is encoded again and the ids become the trace's token columns, kept
only where every response (prompt) encodes to exactly its recorded length: ids of a
different count would contradict the lengths the dump records.

With `--max-turns` no token ids are added: a multi-turn record's `completion` is its
sequence's tail, which holds the inputs between turns and lacks the start of its first
output (of the same count, so its length agrees), and no record says how many turns it
took. Without `--max-turns` the texts are taken as one turn's (as for agents exported with
`export_style: individual`, one record per call, whose texts are exact).

Releases v0.3.0-lite to v0.5.1 wrote coloured text files instead (`areal_text.py`, which
needs `--tokenizer`); a path holding those is read that way.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from simctl.traces.importers.areal_text import is_text_dump, read_text
from simctl.traces.importers.common import (
    DumpError,
    FormatFacts,
    ImportOptions,
    RowSet,
    as_int,
    as_reward,
    as_text,
    find_files,
    get,
    json_lines,
    stable_id,
)
from simctl.traces.importers.tokenize import load_tokenizer

UPSTREAM = "inclusionAI/AReaL@4aef98d8 areal/infra/workflow_executor.py (_dump_trajectory)"
_MULTI_TURN_TEXTS = "a multi-turn record's texts (--max-turns) are cut at prompt_len, not at its first output"


def _is_dump(path: Path) -> bool:
    return path.suffix == ".jsonl" and path.stem.isdigit() and "eval-rollout" not in path.parts


def _attach_tokens(rows: RowSet, texts: list[tuple[str, str]], tokenizer: Path) -> None:
    """Token ids from the text, for the columns whose every row matches its length."""
    tok = load_tokenizer(tokenizer, "areal")
    for i, (name, lengths) in enumerate(
        (("prompt_tokens", rows.prompt_len), ("response_tokens", rows.response_len))
    ):
        rows.keep_tokens(name, tok.encode([t[i] for t in texts]), lengths)


def _prompt_keys(rows: RowSet, texts: list[tuple[str, str]], tasks: list[tuple[int, int]]) -> None:
    """Keys each row's prompt by the common start of its task's prompt texts: the prompt
    itself where any response of the task took one turn (a longer text is the sequence cut
    past it, holding part of the first output). A single-turn dump's tasks repeat one text,
    so nothing changes there."""
    by_task: dict[tuple[int, int], list[str]] = {}
    for (prompt, _), task in zip(texts, tasks, strict=True):
        by_task.setdefault(task, []).append(prompt)
    # (os.path.commonprefix compares character by character, which is what texts need here)
    common = {task: os.path.commonprefix(prompts) for task, prompts in by_task.items()}  # noqa: RUF071
    rows.prompt = [stable_id(common[task]) for task in tasks]


def _turns_budget(length: int, opts: ImportOptions, turns: Counter[int], where: str) -> int | None:
    """The budget of a response longer than a turn's (--max-tokens) in a multi-turn dump
    (`--max-turns`): that of the fewest turns that hold it (counted in `turns`); None for
    one that fits a turn, as for any dump, and for any response of a single-turn dump (one
    over --max-tokens is then refused: the budget given is wrong)."""
    per_turn, most = opts.max_tokens, opts.max_turns
    if per_turn is None or most is None or length <= per_turn:
        return None
    least = -(-length // per_turn)
    if least > most:
        raise DumpError(
            f"{where}: response length {length} exceeds --max-turns {most} x --max-tokens {per_turn}"
        )
    turns[least] += 1
    return least * per_turn


def read(paths: tuple[Path, ...], opts: ImportOptions) -> tuple[RowSet, FormatFacts]:
    what = "AReaL dump files (<version>/<task_id>.jsonl; before v0.5.2 <version>/<qid>.txt)"
    files = find_files(paths, lambda p: _is_dump(p) or is_text_dump(p), what)
    rows = RowSet(files=files)
    text = [f for f in files if f.suffix == ".txt"]
    if text:  # (AReaL before v0.5.2: areal_text)
        if len(text) < len(files):
            raise DumpError(
                f"{text[0]}: text dumps (AReaL before v0.5.2) and JSONL ones together; import them apart"
            )
        read_text(text, rows, opts.tokenizer)
        return rows, FormatFacts()
    texts: list[tuple[str, str]] = []
    tasks: list[tuple[int, int]] = []  # (tail_version, task_id) per row: its group
    turns: Counter[int] = Counter()  # (responses over --max-tokens by their least number of turns)
    seen: dict[tuple[int, int, int], str] = {}  # (tail_version, task_id, sample_idx) -> where
    for path in files:
        # (a task whose every sample was skipped leaves an empty file: it is opened first)
        for number, obj in json_lines(path, empty=rows):
            where = f"{path} line {number}"
            seqlen = as_int(get(obj, "seqlen", where), "seqlen", where)
            prompt_len = as_int(get(obj, "prompt_len", where), "prompt_len", where)
            task = as_int(get(obj, "task_id", where), "task_id", where)
            if prompt_len < 1 or seqlen <= prompt_len:
                raise DumpError(
                    f"{where}: fields 'seqlen' {seqlen} and 'prompt_len' {prompt_len} must give "
                    "a prompt and a response of >= 1 token each"
                )
            as_int(get(obj, "head_version", where), "head_version", where)
            step = as_int(get(obj, "tail_version", where), "tail_version", where)
            order = as_int(get(obj, "sample_idx", where), "sample_idx", where)
            prompt = as_text(get(obj, "prompt", where), "prompt", where)
            texts.append((prompt, as_text(get(obj, "completion", where), "completion", where)))
            reward = as_reward(get(obj, "reward", where), "reward", where, rows)
            first = seen.setdefault((step, task, order), where)
            if first != where:
                # SPMD runs with several data-parallel ranks: each rank's executor counts task
                # ids from 0 and appends to the same file, so two prompts' samples would mix
                raise DumpError(
                    f"{where}: sample_idx {order} of task {task} at version {step} again (first "
                    f"at {first}): several data-parallel ranks appended to one file, whose "
                    "groups cannot be told apart"
                )
            tasks.append((step, task))
            rows.add(
                where,
                step=step,
                group=task,
                prompt=prompt,
                order=order,
                prompt_len=prompt_len,
                response_len=seqlen - prompt_len,
                budget=_turns_budget(seqlen - prompt_len, opts, turns, where),
                reward=reward,
            )
    _prompt_keys(rows, texts, tasks)
    if opts.tokenizer is not None and opts.max_turns is not None:
        # (a multi-turn record's texts are its sequence cut at prompt_len: the completion's ids
        # hold the inputs between turns, not the generated tokens, and its first turn's start
        # is in the prompt's; nothing tells which records took one turn)
        rows.notes["token_ids_left_out"] = _MULTI_TURN_TEXTS
    elif opts.tokenizer is not None:
        _attach_tokens(rows, texts, opts.tokenizer)
    if turns:
        rows.note_counts("turns_at_least", turns)
    return rows, FormatFacts()

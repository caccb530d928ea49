"""NeMo-RL: the `train_data_step{N}.jsonl` files GRPO writes into its log directory.

Followed: NVIDIA-NeMo/RL @ 7ea279ab (0.6.0 development, Aug 2026), `nemo_rl/algorithms/grpo.py`
(the "Log training data" block of `grpo_train`) and `nemo_rl/utils/logger.py`,
`Logger.log_batched_dict_as_jsonl`. The batch is written one response per line by iterating
micro-batches of size 1, so every field holds a one-element list:

- `content`: `[[message texts]]`;
- `rewards`: `[reward]`;
- `input_lengths`: `[prompt + response tokens]` (before padding);
- `token_ids`: `[[ids]]`, right-padded to the batch's longest sequence;
- `token_loss_mask`: `[[0 or 1]]`, 1 on generated tokens;
- `sample_loss_mask`, `advantages`, `generation_logprobs`, `prev_logprobs` (ignored), and
  `idx`, the line's index.

N in the file name is the step (NeMo-RL counts from 1; v0.2.1-v0.4.0 counted the files
from 0, so a dump with a `train_data_step0.jsonl` is numbered from 1 again). The prompt is the tokens before
the first generated one; the response is the generated tokens (in a multi-turn dump the
environment's tokens between turns, mask 0, count in neither). Groups: the batch repeats
each prompt `num_generations_per_prompt` times and writes no group id, so a group is the
responses of one step with the same prompt ids. Budget: `--max-tokens`
(`policy.generation.max_new_tokens` is not dumped); epochs: `--steps-per-epoch`.

Multi-turn environments (`grpo.max_rollout_turns` > 1; `nemo_rl/experience/rollouts.py`,
`run_multi_turn_rollout`): each turn generates an assistant message, within its own budget
(`max_new_tokens`, capped by what `policy.max_total_sequence_length` leaves of the context:
`nemo_rl/models/generation/vllm/vllm_worker.py`, `_context_capped_max_new_tokens`), and the
environment's observation is appended after it; the message log is flattened into one
sequence in which `token_loss_mask` is 1 on the generated messages only
(`grpo.py`, `add_grpo_token_loss_masks_and_generation_logprobs`). A turn is therefore a run
of 1s (an empty observation would join two turns into one). The response replayed is all
turns' generated tokens, so its budget is the number of turns times `--max-tokens` (the
per-turn budget); a response whose last turn reached `--max-tokens` was cut there, so it is
'length', its budget its length. Each turn must fit `--max-tokens`. The context limit is not
dumped, so the budget is not capped by it, and a turn cut by the context below
`--max-tokens` reads as 'stop'. The notes count responses by turns (`turns`).

Multi-turn chat prompts: a prompt's messages may include assistant messages of its own (the
history of a conversation). v0.6.0 (5fb58893) gives every assistant message
`token_loss_mask` 1 (`grpo.py`, the loss-mask loop of `grpo_train` and `async_grpo_train`),
so that history would read as a generated turn, and the prompt as ending before it; from
c3bb1d78 (v0.7.0) only a message that carries `generation_logprobs`, a generated one, gets 1
(`add_grpo_token_loss_masks_and_generation_logprobs`). Both dump `generation_logprobs`:
the rollout's log-probs on generated messages (`nemo_rl/experience/rollouts.py`,
`generate_responses`) and zeros on every other message. So leading runs of 1s whose
log-probs are all 0, before a run with any other, are read as the prompt's own; the notes
count such responses (`prompts_with_assistant_history`). A generated first turn whose every
log-prob is exactly 0 (each token sampled with probability 1) would be read as the prompt's
too; a line without `generation_logprobs` is read by the mask alone.

Releases before 0.6.0 (v0.2.1-v0.5.0) write no `token_ids` or `token_loss_mask`, only the
text (`content`: the prompt's messages as the chat template rendered them, then the
response) and `input_lengths`. With `--tokenizer DIR` the response text is encoded again
(plus the end-of-sequence token the decode dropped, where it stopped before the budget:
tokenize.response_ids), the prompt length is `input_lengths` minus that, and a group is the
responses of one step with the same prompt texts. Token columns are kept where every row's
ids agree with those lengths. Those releases append the environment's observation after
the last turn too (`run_multi_turn_rollout`; the math environment's "Environment:
correct"), so `content` ends with it and `input_lengths` counts it: trailing messages
whose tokens all have `generation_logprobs` 0 are that observation, neither response nor
prompt (`_observation_tail`).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from simctl.traces.importers.common import (
    DumpError,
    FormatFacts,
    ImportOptions,
    RowSet,
    as_int,
    as_reward,
    as_token_ids,
    find_files,
    get,
    json_lines,
    runs_of_ones,
    turn_budget,
)
from simctl.traces.importers.tokenize import TextTokenizer, load_tokenizer, note_decoding, response_ids

UPSTREAM = "NVIDIA-NeMo/RL@7ea279ab nemo_rl/algorithms/grpo.py + nemo_rl/utils/logger.py"
_NAME = re.compile(r"^train_data_step(\d+)\.jsonl$")


def _one(obj: dict[str, Any], key: str, where: str) -> Any:
    """The value of a micro-batch-of-one field (`[x]` -> x)."""
    value = get(obj, key, where)
    if not (isinstance(value, list) and len(value) == 1):
        raise DumpError(f"{where}: field '{key}' is not a one-element list (a micro-batch of 1)")
    return value[0]


def _text_row(
    obj: dict[str, Any], where: str, rows: RowSet, tok: TextTokenizer | None, budget: int | None
) -> tuple[tuple[str, ...], int, list[int], bool | None, float | None]:
    """A line of a dump before 0.6.0 (text only): (prompt texts, prompt length, generated ids,
    truncated, reward)."""
    if tok is None:
        raise DumpError(
            f"{where}: field 'token_ids' missing (NeMo-RL before 0.6.0 dumps text only: pass "
            "--tokenizer DIR to encode it)"
        )
    content = _one(obj, "content", where)
    if not (isinstance(content, list) and len(content) >= 2 and all(isinstance(c, str) for c in content)):
        raise DumpError(f"{where}: field 'content' is not a list of the prompt's and the response's texts")
    length = as_int(_one(obj, "input_lengths", where), "input_lengths", where)
    observed, tail = _observation_tail(obj, content, length, tok, where)
    response = content[-1 - observed]
    generated, truncated = response_ids(tok, tok.encode([response])[0], budget, response, rows)
    if not 1 <= len(generated) < length - tail:
        raise DumpError(
            f"{where}: field 'input_lengths' {length} leaves no prompt beside the response's "
            f"{len(generated)} tokens (as --tokenizer encodes it)"
        )
    reward = as_reward(_one(obj, "rewards", where), "rewards", where, rows)
    return tuple(content[: -1 - observed]), length - tail - len(generated), generated, truncated, reward


def _observation_tail(
    obj: dict[str, Any], content: list[str], length: int, tok: TextTokenizer, where: str
) -> tuple[int, int]:
    """(messages, tokens) after the response that were not generated: the environment's
    observation, which `run_multi_turn_rollout` appends after every turn, the last included
    (v0.2.1-v0.5.0; the math environment's "Environment: correct"), so `content` ends with
    it and `input_lengths` counts it. Found by `generation_logprobs`, zero on every token
    not generated: trailing messages whose tokens (as --tokenizer encodes them, from the
    end of `input_lengths`) all have log-prob 0, the response's first. (0, 0) without
    log-probs, or where the last message has any other."""
    if "generation_logprobs" not in obj:
        return 0, 0
    logprobs = _one(obj, "generation_logprobs", where)
    if not (isinstance(logprobs, list) and len(logprobs) >= length):
        return 0, 0
    messages, end = 0, length
    while messages < len(content) - 2:  # (a prompt and a response stay)
        n = len(tok.encode([content[-1 - messages]])[0])
        if not 0 < n <= end or any(x != 0 for x in logprobs[end - n : end]):
            break
        messages, end = messages + 1, end - n
    return messages, length - end


def _history(obj: dict[str, Any], runs: list[tuple[int, int]], length: int, where: str) -> int:
    """How many of the leading runs of `token_loss_mask` are the prompt's own assistant
    messages (a multi-turn chat prompt's history), not generated ones. v0.6.0 masks every
    assistant message with 1; only a generated one carries `generation_logprobs` (the rest
    are given zeros), so a run whose log-probs are all 0 before a run that has any other is
    the prompt's. 0 where the line has no `generation_logprobs`."""
    if "generation_logprobs" not in obj:
        return 0
    logprobs = _one(obj, "generation_logprobs", where)
    if not (
        isinstance(logprobs, list)
        and len(logprobs) >= length
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in logprobs[:length])
    ):
        raise DumpError(
            f"{where}: field 'generation_logprobs' is not a list of numbers as long as 'input_lengths'"
        )
    generated = [any(x != 0 for x in logprobs[a:b]) for a, b in runs]
    return generated.index(True) if any(generated) else 0


def _row(
    obj: dict[str, Any], where: str, rows: RowSet
) -> tuple[list[int], list[int], list[int], float | None]:
    """(prompt ids, generated ids, generated tokens per turn, reward) of one line."""
    length = as_int(_one(obj, "input_lengths", where), "input_lengths", where)
    ids = as_token_ids(_one(obj, "token_ids", where), "token_ids", where)
    mask = _one(obj, "token_loss_mask", where)
    if not isinstance(mask, list) or any(m not in (0, 1) or isinstance(m, bool) for m in mask):
        raise DumpError(f"{where}: field 'token_loss_mask' is not a list of 0 and 1")
    if not 1 <= length <= min(len(ids), len(mask)):
        raise DumpError(
            f"{where}: field 'input_lengths' {length} must be in 1..{min(len(ids), len(mask))} "
            "(the length of 'token_ids' and 'token_loss_mask')"
        )
    # (a turn: a run of generated tokens, mask 1; the environment's tokens between, mask 0)
    runs = runs_of_ones(mask[:length])
    if not runs:
        raise DumpError(f"{where}: field 'token_loss_mask' marks no generated token")
    history = _history(obj, runs, length, where)
    if history:
        rows.count("prompts_with_assistant_history")
    runs = runs[history:]
    generated = [t for a, b in runs for t in ids[a:b]]
    reward = as_reward(_one(obj, "rewards", where), "rewards", where, rows)
    return ids[: runs[0][0]], generated, [b - a for a, b in runs], reward


def read(paths: tuple[Path, ...], opts: ImportOptions) -> tuple[RowSet, FormatFacts]:
    what = "NeMo-RL dump files (train_data_step{N}.jsonl)"
    files = find_files(paths, lambda p: bool(_NAME.match(p.name)), what)
    rows = RowSet(files=files)
    rows.response_tokens, rows.prompt_tokens = [], []
    tok: TextTokenizer | None = None
    text_prompts: list[str] = []  # (a dump before 0.6.0: its rows' prompt texts)
    turn_counts: Counter[int] = Counter()  # (responses by their number of generated turns)
    numbers = [_NAME.match(p.name) for p in files]
    # v0.2.1-v0.4.0 named the files by the 0-based step (bd2e6458, v0.5.0, made it the step
    # NeMo-RL prints, from 1): a dump with a step 0 file is numbered again from 1
    shift = int(any(m is not None and int(m.group(1)) == 0 for m in numbers))
    if shift:
        rows.notes["steps"] = "file names count from 0 (NeMo-RL v0.2.1-v0.4.0): steps are those + 1"
    for path, match in zip(files, numbers, strict=True):
        if match is None:
            raise DumpError(f"{path}: name is not train_data_step{{N}}.jsonl, so its step is unknown")
        step = int(match.group(1)) + shift
        for number, obj in json_lines(path):
            where = f"{path} line {number}"
            if "token_ids" not in obj:
                tok = tok or (load_tokenizer(opts.tokenizer, "nemo-rl") if opts.tokenizer else None)
                texts, prompt_len, gen, truncated, reward = _text_row(obj, where, rows, tok, opts.max_tokens)
                rows.add(
                    where,
                    step=step,
                    group="\0".join(texts),  # (the prompt's messages, as one key)
                    prompt="\0".join(texts),
                    order=number,
                    prompt_len=prompt_len,
                    response_len=len(gen),
                    truncated=truncated,
                    reward=reward,
                )
                text_prompts.append("".join(texts))
                rows.response_tokens.append(gen)
                continue
            prompt, generated, turns, reward = _row(obj, where, rows)
            if not prompt:
                raise DumpError(f"{where}: field 'token_loss_mask' marks the first token (no prompt)")
            budget = turn_budget(turns, opts.max_tokens, where)
            # (a multi-turn response whose last turn reached a turn's budget was cut there)
            truncated = None if budget is None else turns[-1] == opts.max_tokens
            turn_counts[len(turns)] += 1
            rows.add(
                where,
                step=step,
                group=tuple(prompt),
                prompt=tuple(prompt),
                order=number,
                prompt_len=len(prompt),
                response_len=len(generated),
                truncated=truncated,
                budget=budget,
                reward=reward,
            )
            rows.prompt_tokens.append(prompt)
            rows.response_tokens.append(generated)
    if text_prompts:
        _text_prompt_tokens(rows, text_prompts, tok)
    if max(turn_counts, default=1) > 1:
        rows.note_counts("turns", turn_counts)
    return rows, FormatFacts()


def _text_prompt_tokens(rows: RowSet, texts: list[str], tok: TextTokenizer | None) -> None:
    """Prompt ids of a text-only dump, encoded again: kept where every prompt encodes to its
    length (`input_lengths` minus the response), else no prompt token column."""
    if rows.prompt_tokens or tok is None:  # (token ids and text in one import: keep neither)
        rows.prompt_tokens = None
        return
    rows.keep_tokens("prompt_tokens", tok.encode(texts), rows.prompt_len)
    rows.notes["tokens"] = "responses (and prompts, where they agree) encoded again from the dump's text"
    note_decoding(tok, rows)

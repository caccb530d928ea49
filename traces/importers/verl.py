"""verl: the JSONL files `trainer.rollout_data_dir` makes, one `{global_step}.jsonl` per step.

Followed: volcengine/verl @ b178a3cd (v0.7.0-125, Jan 2026), `verl/trainer/ppo/ray_trainer.py`,
`RayPPOTrainer._log_rollout_data` and `_dump_generations`. One line per response, written
after the step's batch was scored, with the fields

- `input`: the prompt, decoded with ``skip_special_tokens=True``;
- `output`: the response, decoded the same way (the EOS token is gone);
- `score`: the sequence reward (sum of the token-level scores);
- `step`: the global step (verl counts from 1);
- `gts`, and every reward extra info with one value per response (ignored here).

What the dump lacks and how it is recovered:

- token counts: the text is encoded again with `--tokenizer DIR` (see `tokenize.py`), and
  the ids become the trace's token columns (approximate where the tokenizer does not
  round-trip);
- the prompt's special tokens: verl renders the dataset's chat with the tokenizer's chat
  template (`AgentLoopBase.apply_chat_template`, `add_generation_prompt=True`; before the
  agent loop, `RLHFDataset`, the same), and the decode drops the template's special tokens,
  so the chat (a user message after up to eight exchanges, with or without a system
  message) is read off the text, rendered back through the template and kept where it
  decodes to the dumped text exactly (`TemplatedPrompts`); the template is the tokenizer's,
  or the run's `custom_chat_template` given as `--chat-template`, rendered with its
  `apply_chat_template_kwargs` given as `--chat-template-kwarg` (neither is dumped);
  other prompts are encoded as text and come out short by those tokens (said in the
  trace's notes);
- groups: the batch is repeated `rollout.n` times and then reordered by sequence-length
  balancing, and no group id is written, so a group is the responses of one step with the
  same prompt text (a prompt drawn twice in a step splits by `--group-size`);
- budget (`rollout.response_length`): `--max-tokens`; a response whose encoding fills it
  was truncated;
- epochs: `--steps-per-epoch`.

Multi-turn rollouts (sglang `multi_turn.enable`, `_req_level_generate_sequences` in
`verl/workers/rollout/sglang_rollout/sglang_rollout.py` up to v0.6.1; the agent loop,
`verl/experimental/agent_loop/tool_agent_loop.py`, from v0.5.0) put every turn in
`responses`, the tool's or environment's tokens between the generated ones included, and
tell them apart only by `response_mask` (0 on those), which is not dumped; neither is the
agent loop's `__num_turns__` (the naive reward manager hands it to `compute_score` in
`extra_info`, nothing writes it back). The decoded `output` therefore holds the tool text,
and nothing in it tells which tokens were generated: such a dump cannot be imported right.
`--max-turns N` above 1 (the user saying the run was multi-turn) is refused in one line.
v0.5.0 (ac826e05) also dumps the sglang multi-turn rollout's `request_id` (a uuid4 per
request; the single-turn paths have none, and from v0.6.0, 50368ae2, it is no longer
dumped), so a v0.5.0 line with `request_id` is refused too, naming `--max-turns 1`, with
which the user says that no response took a second turn and it is read as a single-turn
one (counted in the notes: `read_as_one_turn`).
"""

from __future__ import annotations

import re
from pathlib import Path

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
)
from simctl.traces.importers.tokenize import (
    TemplatedPrompts,
    load_tokenizer,
    note_decoding,
    note_template,
    response_ids,
)

UPSTREAM = "volcengine/verl@b178a3cd verl/trainer/ppo/ray_trainer.py (_dump_generations)"
_NAME = re.compile(r"^\d+\.jsonl$")


def _one_dump(files: list[Path]) -> None:
    """Refuse two files of one step: two dumps (the validation generations, which verl
    writes under the same names into `validation_data_dir`, or two runs) would merge into
    groups of twice the size."""
    seen: dict[str, Path] = {}
    for path in files:
        other = seen.setdefault(path.name, path)
        if other != path:
            raise DumpError(
                f"{path}: step file {path.name} is also in {other.parent}: give one dump "
                "directory (rollout_data_dir) per import, not a folder above two"
            )


def _refuse_multi_turn(opts: ImportOptions) -> None:
    """Refuse `--max-turns N` above 1: the decoded text of a multi-turn response holds the
    tool and environment tokens between its turns, and nothing dumped tells them apart."""
    if opts.max_turns is not None and opts.max_turns > 1:
        raise DumpError(
            f"--max-turns {opts.max_turns}: verl dumps of multi-turn rollouts cannot be imported: "
            "'output' is the decoded response with the tool and environment tokens between turns, and "
            "neither response_mask nor the turns are dumped (--max-turns 1: every response is one turn)"
        )


def read(paths: tuple[Path, ...], opts: ImportOptions) -> tuple[RowSet, FormatFacts]:
    _refuse_multi_turn(opts)
    tok = load_tokenizer(opts.tokenizer, "verl", opts.chat_template, opts.template_kwargs)
    templated = TemplatedPrompts(tok)
    templated_rows = 0
    files = find_files(paths, lambda p: bool(_NAME.match(p.name)), "verl dump files ({global_step}.jsonl)")
    _one_dump(files)
    rows = RowSet(files=files)
    rows.response_tokens, rows.prompt_tokens = [], []
    for path in files:
        records = []
        for number, obj in json_lines(path, empty=rows):  # (an empty batch writes "\n")
            where = f"{path} line {number}"
            prompt = as_text(get(obj, "input", where), "input", where)
            response = as_text(get(obj, "output", where), "output", where)
            score = obj.get("score")
            reward = None if score is None else as_reward(score, "score", where, rows)
            step = as_int(get(obj, "step", where), "step", where)
            if "request_id" in obj:
                # (v0.5.0's sglang multi-turn rollout: the tools' text is in 'output')
                if opts.max_turns != 1:
                    raise DumpError(
                        f"{where}: field 'request_id' marks verl's sglang multi-turn rollout (v0.5.0, "
                        "multi_turn.enable), whose 'output' holds the tool and environment tokens between "
                        "turns; pass --max-turns 1 if no response took a second turn"
                    )
                rows.count("read_as_one_turn")
            records.append((where, prompt, response, reward, step))
        prompts, recovered = templated.encode([r[1] for r in records])
        templated_rows += recovered
        responses = tok.encode([r[2] for r in records])
        for i, (where, prompt, response, reward, step) in enumerate(records):
            if not prompts[i]:
                raise DumpError(f"{where}: field 'input' encodes to no tokens")
            ids, truncated = response_ids(tok, responses[i], opts.max_tokens, response, rows)
            if not ids:
                raise DumpError(f"{where}: field 'output' is empty and the tokenizer has no EOS token")
            rows.add(
                where,
                step=step,
                group=prompt,
                prompt=prompt,
                order=i,
                prompt_len=len(prompts[i]),
                response_len=len(ids),
                truncated=truncated,
                reward=reward,
            )
            rows.prompt_tokens.append(prompts[i])
            rows.response_tokens.append(ids)
    rows.notes["tokens"] = "encoded again from the dump's decoded text"
    note_decoding(tok, rows)
    note_template(tok, opts.chat_template, rows)
    rows.notes["prompts"] = _prompts_note(templated_rows, len(rows.prompt_tokens), templated)
    return rows, FormatFacts()


def _prompts_note(recovered: int, total: int, templated: TemplatedPrompts) -> str:
    """How the prompt lengths were read: the chat template's special tokens, which the
    dump's decode dropped, are counted only for prompts rendered back exactly."""
    if not templated.forms:
        return "encoded as text (the tokenizer has no chat template): short by any special tokens"
    if recovered == total:
        return "rendered back through the chat template"
    return (
        f"{recovered} of {total} rendered back through the chat template; the others (not a chat "
        "the template renders to their text) encoded as text: short by any special tokens"
    )

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
- groups: the batch is repeated `rollout.n` times and then reordered by sequence-length
  balancing, and no group id is written, so a group is the responses of one step with the
  same prompt text (a prompt drawn twice in a step splits by `--group-size`);
- budget (`rollout.response_length`): `--max-tokens`; a response whose encoding fills it
  was truncated;
- epochs: `--steps-per-epoch`.
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
from simctl.traces.importers.tokenize import load_tokenizer, response_ids

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


def read(paths: tuple[Path, ...], opts: ImportOptions) -> tuple[RowSet, FormatFacts]:
    tok = load_tokenizer(opts.tokenizer, "verl")
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
            records.append((where, prompt, response, reward, step))
        prompts = tok.encode([r[1] for r in records])
        responses = tok.encode([r[2] for r in records])
        for i, (where, prompt, response, reward, step) in enumerate(records):
            if not prompts[i]:
                raise DumpError(f"{where}: field 'input' encodes to no tokens")
            ids, truncated = response_ids(tok, responses[i], opts.max_tokens, response)
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
    return rows, FormatFacts()

"""ROLL: the `rollout_dump_data.step_{N}.jsonl` files the RLVR pipeline writes into
`rollout_dump_dir` (an absolute path: ROLL writes nothing for a relative one), or the one
`rollout_data.jsonl` of releases before Oct 2025 (v0.1.x), a line per step.

Followed: alibaba/ROLL @ 8eb27cc2 (v0.3.0-9, Aug 2026), `roll/pipeline/rlvr/utils.py`,
`dump_rollout_to_specific_path` and `write_to_json_process` (called from
`roll/pipeline/rlvr/rlvr_pipeline.py` after generation). A file holds ONE JSON object of
columns, each a list with one entry per response, restricted to `COLUMMNS_CONFIG`:

- `global_step`, `responses` (decoded with ``skip_special_tokens=True``), `scores`;
- `sampling_params`: per response, the JSON text of the batch's `meta_info`, whose
  `generation_config` holds `max_new_tokens`, `num_return_sequences` and `temperature`;
- dataset columns where the data has them: `id`, `prompt`, `messages`, `tag`, `domain`, ...

Groups are the responses of a step with the same `id` (else the same prompt text); the
group size, budget and temperature come from `generation_config` unless given. Token counts
need `--tokenizer DIR` (text only is dumped): the prompt is `messages` rendered with the
tokenizer's chat template and its generation prompt, as the pipeline renders them (it
prefers that column, as the RLVR example configs set `messages: messages`; ROLL's own
datasets carry both, and both are dumped; without a template in the directory, their
contents joined, shorter than the real prompt), else `prompt`; encoded as
`get_encode_function` encodes them (`tokenizer(text_list)`, special tokens at the
tokenizer's default: a BOS where its post-processor prepends one). The config's `template`
is not dumped: the tokenizer's own template is ROLL's `native` (also `qwen2_5`, `qwen3`); a
run with ROLL's `chatml` is read with that template given as a Jinja file
(`--chat-template`); `longCOT_qwen2.5` and `longcot_V3` are Python that edits the chat or
the rendered text, which no template file reproduces, so such prompts come out a few
tokens short.

The RLVR pipeline is single-turn (`roll/distributed/scheduler/user_defined_rollout_loop.py`:
multi-turn is a TODO). The agentic pipeline (`roll/pipeline/agentic/agentic_pipeline.py`,
`agentic_rollout_pipeline.py`) dumps each step's batch with `dump_rollout_trajectories`
(`roll/pipeline/agentic/utils.py`, cec5234a, v0.1.3 on) through the same writer, so its
files have the same names, but only the columns the env manager names in
`meta_info["COLUMMNS_CONFIG"]`: `trajectory_data` (JSON text: ids, env, timing, length and
reward info), `messages` (JSON text of the chat: the environment's last observation, with
the last reply appended as decoded text), `tools`, `exp_name`, and `global_step`.
Only `AgentNativeStepEnvManager` (from v0.2.0, 3077befc: one row per trajectory, its last
step's; `remove_nan_items` drops the others) and `ProxyEnvManager` (from v0.3.0, 7f9d4d38:
one row per branch or step) name them; the others (`TrajEnvManager`, `StepEnvManager`, ...)
name none, and v0.1.3 read the key `COLUMNS_CONFIG`, which none set: nothing is written. The
agentic dumps hold no `responses`, no token ids and no `response_mask` (the tensors that mark
each turn's generated tokens are not written), and the chat's earlier assistant messages
are the environment's rendering, so a trajectory's generated turns cannot be told from the
environment's tokens: such a file is refused in one line naming what it lacks. (The
validation batch is dumped into the same directory under the same step's name.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from simctl.traces.importers.common import (
    DumpError,
    FormatFacts,
    ImportOptions,
    RowSet,
    as_float,
    as_int,
    as_reward,
    as_text,
    find_files,
    get,
    json_lines,
)
from simctl.traces.importers.tokenize import (
    TextTokenizer,
    load_tokenizer,
    note_decoding,
    note_template,
    response_ids,
)

UPSTREAM = "alibaba/ROLL@8eb27cc2 roll/pipeline/rlvr/utils.py (dump_rollout_to_specific_path)"
# (before Oct 2025, v0.1.x: one `rollout_data.jsonl`, a line of columns appended per step)
_NAME = re.compile(r"^(rollout_dump_data\.step_\d+|rollout_data)\.jsonl$")


def _column(obj: dict[str, Any], key: str, n: int, where: str) -> list[Any] | None:
    if key not in obj:
        return None
    values = obj[key]
    if not isinstance(values, list) or len(values) != n:
        size = len(values) if isinstance(values, list) else type(values).__name__
        raise DumpError(f"{where}: column '{key}' has {size} values, 'responses' has {n}")
    return values


def _prompt_text(value: Any, key: str, where: str, tok: TextTokenizer | None = None) -> str:
    """`prompt` text, or `messages` (a list of {role, content}, or its JSON text) as the
    rollout rendered them: through the tokenizer's chat template (with the generation
    prompt) where it has one, else their contents joined (shorter: no template tokens)."""
    if key == "prompt":
        return as_text(value, key, where)
    messages = value
    if isinstance(value, str):
        try:
            messages = json.loads(value)
        except json.JSONDecodeError:
            return value
        except (ValueError, RecursionError):  # (an integer of thousands of digits, nesting)
            raise DumpError(f"{where}: column 'messages' is JSON this reader cannot hold") from None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise DumpError(f"{where}: column 'messages' is not a list of chat messages")
    if tok is not None and tok.has_template:
        try:
            return tok.render(messages)
        except Exception as exc:  # (jinja's errors, a message the template cannot render)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DumpError(
                f"{where}: column 'messages': the tokenizer's chat template failed ({first})"
            ) from None
    return "\n".join(str(m.get("content", "")) for m in messages)


def _facts(params: list[Any] | None, where: str) -> FormatFacts:
    """The generation config of the first response (one batch, one config)."""
    if not params:
        return FormatFacts()
    try:
        meta = json.loads(params[0]) if isinstance(params[0], str) else params[0]
        config = meta.get("generation_config") or {}
    except (ValueError, AttributeError, RecursionError):  # (not JSON, not a table, too deep)
        raise DumpError(f"{where}: column 'sampling_params' is not JSON of the batch meta_info") from None
    if not isinstance(config, dict):
        raise DumpError(f"{where}: column 'sampling_params': 'generation_config' is not a JSON object")
    facts = FormatFacts()
    if config.get("max_new_tokens") is not None:
        budget = as_int(config["max_new_tokens"], "generation_config.max_new_tokens", where)
        if budget < 1:
            raise DumpError(f"{where}: field 'generation_config.max_new_tokens' is {budget}, expected >= 1")
        facts.max_tokens = budget
    if config.get("num_return_sequences") is not None:
        n = as_int(config["num_return_sequences"], "generation_config.num_return_sequences", where)
        # with `is_num_return_sequences_expand` (the async pipeline's setting) ROLL sends each
        # of a prompt's responses as its own request and rewrites this to 1: the group size
        # is then what the `id` groups show, not 1
        facts.group_size = n if n > 1 else None
    if config.get("temperature") is not None:
        facts.temperature = as_float(config["temperature"], "generation_config.temperature", where)
    return facts


def _last_per_step(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The file's lines of columns, the last of each step only: the single-file layout of
    ROLL before Oct 2025 appends a line per step, and a resumed run appends its steps again."""
    lines: dict[object, tuple[int, dict[str, Any]]] = {}
    for number, obj in json_lines(path):
        steps = obj.get("global_step")
        key = json.dumps(steps[:1]) if isinstance(steps, list) else number
        lines.pop(key, None)  # (a step written again: its last writing, in its own place)
        lines[key] = (number, obj)
    return list(lines.values())


def _merge(a: FormatFacts, b: FormatFacts, where: str) -> FormatFacts:
    for name in ("max_tokens", "group_size", "temperature"):
        old, new = getattr(a, name), getattr(b, name)
        if old is not None and new is not None and old != new:
            raise DumpError(f"{where}: generation_config {name} {new} differs from earlier steps' {old}")
        setattr(a, name, old if old is not None else new)
    return a


def _refuse_agentic(obj: dict[str, Any], where: str) -> None:
    """Refuse the agentic pipeline's dump (columns `trajectory_data`, `messages`, `tools`):
    it records no response, token ids or response mask, so no turn can be counted."""
    if "responses" not in obj and "trajectory_data" in obj:
        raise DumpError(
            f"{where}: a ROLL agentic pipeline dump (column 'trajectory_data'): it has no 'responses', "
            "token ids or response_mask, so a trajectory's generated tokens cannot be told from the "
            "environment's; only the RLVR pipeline's dumps can be imported"
        )


def read(paths: tuple[Path, ...], opts: ImportOptions) -> tuple[RowSet, FormatFacts]:
    tok = load_tokenizer(opts.tokenizer, "roll", opts.chat_template, opts.template_kwargs)
    what = "ROLL dump files (rollout_dump_data.step_N.jsonl, or rollout_data.jsonl)"
    files = find_files(paths, lambda p: bool(_NAME.match(p.name)), what)
    rows, facts = RowSet(files=files), FormatFacts()
    rows.response_tokens, rows.prompt_tokens = [], []
    for path in files:
        for number, obj in _last_per_step(path):
            where = f"{path} line {number}"
            _refuse_agentic(obj, where)
            responses = get(obj, "responses", where)
            if not isinstance(responses, list):
                raise DumpError(f"{where}: column 'responses' is not a list")
            n = len(responses)
            facts = _merge(facts, _facts(_column(obj, "sampling_params", n, where), where), where)
            budget = opts.max_tokens if opts.max_tokens is not None else facts.max_tokens
            # (`get_encode_function` renders `messages` when the config names it and the data
            # has it, the RLVR examples' setting, and reads `prompt` otherwise; both are
            # dumped where the data has both, as ROLL's own datasets do)
            key = next((k for k in ("messages", "prompt") if k in obj), None)
            if key is None:
                raise DumpError(f"{where}: columns 'prompt' and 'messages' both missing")
            if key == "messages" and "prompt" in obj:
                rows.notes["prompts_from"] = (
                    "messages (the dump also has 'prompt', which ROLL reads without it)"
                )
            texts = [_prompt_text(v, key, where, tok) for v in _column(obj, key, n, where) or []]
            ids = _column(obj, "id", n, where) or texts
            steps = _column(obj, "global_step", n, where)
            if steps is None:
                raise DumpError(f"{where}: column 'global_step' missing")
            scores = _column(obj, "scores", n, where)
            # (`get_encode_function` tokenizes the rendered prompts with `tokenizer(text_list)`:
            # add_special_tokens at its default, so a tokenizer that prepends BOS did)
            prompts = tok.encode(texts, special=True)
            outs = tok.encode([as_text(r, "responses", where) for r in responses])
            for i in range(n):
                if not prompts[i]:
                    raise DumpError(f"{where}: column '{key}'[{i}] encodes to no tokens")
                gen, truncated = response_ids(tok, outs[i], budget, responses[i], rows)
                if not gen:
                    raise DumpError(f"{where}: column 'responses'[{i}] is empty and the tokenizer has no EOS")
                rows.add(
                    f"{where} response {i}",
                    step=as_int(steps[i], "global_step", where),
                    group=str(ids[i]),
                    prompt=texts[i],
                    order=i,
                    prompt_len=len(prompts[i]),
                    response_len=len(gen),
                    truncated=truncated,
                    reward=None if scores is None else as_reward(scores[i], "scores", where, rows),
                )
                rows.prompt_tokens.append(prompts[i])
                rows.response_tokens.append(gen)
    rows.notes["tokens"] = "encoded again from the dump's decoded text"
    note_decoding(tok, rows)
    note_template(tok, opts.chat_template, rows)
    if not tok.has_template:
        rows.notes["prompts"] = (
            "messages joined without a chat template (the tokenizer has none): approximate"
        )
    return rows, facts

"""`simctl trace import FORMAT PATH... -o T.parquet`: a framework's rollout dump as a trace.

The model is checked against the simulator's catalogue so that `simctl replay` can use the
recorded name without a flag; a model outside it is a HF model directory (or its
config.json), whose architecture fields the trace then carries (`model_config`). The
catalogue lives in a higher layer (sim/), so the composition root hands the check in
through :func:`set_model_check` rather than this layer importing upwards. Without one
(this module used on its own) any name is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from simctl.traces.cli_options import NumberRange, PathArg
from simctl.traces.importers.common import DumpError, Imported, ImportOptions
from simctl.traces.io import write_trace
from simctl.traces.outputs import check_output_file

#: The formats `simctl trace import` reads (traces/importers/<format>.py each).
FORMAT_NAMES = ("verl", "areal", "nemo-rl", "roll", "slime", "table")
#: The largest budget, group size, turn count or epoch length an option takes (beyond, a
#: typo that would wrap around in the trace's columns).
MAX_OPTION = 2**31 - 1
#: Turns --model into (the name to record, the model_config to record or None), raising
#: ValueError for a model it does not know.
_model_check: Callable[[str], tuple[str, dict[str, Any] | None]] | None = None


def set_model_check(check: Callable[[str], tuple[str, dict[str, Any] | None]]) -> None:
    """Install the catalogue lookup `--model` is checked with (called by `simctl.cli`)."""
    global _model_check
    _model_check = check


def _parse_columns(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for text in values:
        name, sep, source = text.partition("=")
        if not sep or not name.strip() or not source.strip():
            raise click.BadParameter(f"'{text}' is not NAME=SOURCE", param_hint="--column")
        out[name.strip()] = source.strip()
    return out


# apply_chat_template's own parameters, which the importer sets as the rollout did
_RESERVED_KWARGS = frozenset(
    {
        "conversation",
        "messages",
        "tokenize",
        "add_generation_prompt",
        "chat_template",
        "return_dict",
        "continue_final_message",
        "return_tensors",
        "tokenizer_kwargs",
        "return_assistant_tokens_mask",
    }
)


def _parse_template_kwargs(values: tuple[str, ...]) -> dict[str, Any]:
    """`KEY=VALUE` pairs for apply_chat_template; VALUE is read as JSON (`false`, `3`,
    `"x"`, `[...]`) and kept as text where it is not JSON."""
    out: dict[str, Any] = {}
    for text in values:
        name, sep, raw = text.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise click.BadParameter(f"'{text[:80]}' is not KEY=VALUE", param_hint="--chat-template-kwarg")
        if name in _RESERVED_KWARGS:
            raise click.BadParameter(
                f"'{name}' is set by the importer as the rollout set it", param_hint="--chat-template-kwarg"
            )
        if name in out:
            raise click.BadParameter(f"'{name}' given twice", param_hint="--chat-template-kwarg")
        try:
            out[name] = json.loads(raw)
        except (ValueError, RecursionError):
            out[name] = raw
    return out


def _model(name: str) -> tuple[str, dict[str, Any] | None]:
    if _model_check is None:
        return name, None
    try:
        return _model_check(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None


@click.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(FORMAT_NAMES))
@click.argument(
    "paths", metavar="PATH...", nargs=-1, required=True, type=PathArg(exists=True, path_type=Path)
)
@click.option("-o", "--output", type=PathArg(dir_okay=False, path_type=Path), required=True)
@click.option(
    "--model",
    required=True,
    help="Rollout model (recorded for replay): a catalogue name, or a HF model directory or its config.json.",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1, max=MAX_OPTION),
    help="Generation budget, where the dump has none.",
)
@click.option(
    "--group-size", type=click.IntRange(min=1, max=MAX_OPTION), help="Responses per prompt (GRPO group size)."
)
@click.option(
    "--tokenizer",
    type=PathArg(exists=True, file_okay=False, path_type=Path),
    help="Local Hugging Face tokenizer directory (verl, roll: required; areal: adds token ids).",
)
@click.option(
    "--reward-key",
    metavar="KEY",
    help="slime: the key of dict rewards to take (slime's --reward-key); without it they are left out.",
)
@click.option(
    "--max-turns",
    type=click.IntRange(min=1, max=MAX_OPTION),
    help=(
        "areal: a multi-turn workflow's max_turns (each turn's budget is --max-tokens); "
        "verl: 1 says no response took a second turn (more is refused)."
    ),
)
@click.option(
    "--steps-per-epoch", type=click.IntRange(min=1, max=MAX_OPTION), help="Steps per pass over the prompts."
)
@click.option(
    "--temperature", type=NumberRange(min=0.0), help="Sampling temperature (default: the dump's, or 1)."
)
@click.option("--hardware", default="unknown", show_default=True, help="GPU the rollout ran on.")
@click.option("--column", "columns", multiple=True, help="table: NAME=SOURCE reads column NAME from SOURCE.")
@click.option(
    "--chat-template",
    type=PathArg(exists=True, dir_okay=False, path_type=Path),
    help=(
        "verl, roll: a Jinja chat template file the run rendered prompts with, where not the "
        "tokenizer's own (verl's custom_chat_template; a ROLL template other than native)."
    ),
)
@click.option(
    "--chat-template-kwarg",
    "template_kwargs",
    multiple=True,
    metavar="KEY=VALUE",
    help=(
        "verl, roll: an argument the run gave apply_chat_template (verl's "
        "data.apply_chat_template_kwargs), VALUE as JSON, e.g. enable_thinking=false."
    ),
)
def import_cmd(
    fmt: str,
    paths: tuple[Path, ...],
    output: Path,
    model: str,
    max_tokens: int | None,
    group_size: int | None,
    tokenizer: Path | None,
    reward_key: str | None,
    max_turns: int | None,
    steps_per_epoch: int | None,
    temperature: float | None,
    hardware: str,
    columns: tuple[str, ...],
    chat_template: Path | None,
    template_kwargs: tuple[str, ...],
) -> None:
    """Import the rollout dumps of an RL framework (docs/importing-traces.md).

    FORMAT is verl, areal, nemo-rl, roll, slime or table; each PATH is a dump file or a
    directory searched for the format's files."""
    from simctl.traces.importers import import_dump

    check_output_file(output, inputs=paths, what="trace", kind="parquet")
    model_name, model_config = _model(model)
    opts = ImportOptions(
        model=model_name,
        max_tokens=max_tokens,
        group_size=group_size,
        tokenizer=tokenizer,
        reward_key=reward_key,
        max_turns=max_turns,
        steps_per_epoch=steps_per_epoch,
        temperature=temperature,
        hardware=hardware,
        columns=_parse_columns(columns),
        chat_template=chat_template,
        template_kwargs=_parse_template_kwargs(template_kwargs),
    )
    if columns and fmt != "table":
        raise click.BadParameter("only the table format takes column mappings", param_hint="--column")
    try:
        imported = import_dump(fmt, paths, opts)
    except DumpError as exc:
        raise click.ClickException(str(exc)) from None
    imported.meta.model_config = model_config
    write_trace(output, imported.df, imported.meta, imported.lists)
    df = imported.df
    groups = len(df.drop_duplicates(["step", "prompt_id"]))
    files = len(imported.meta.notes["import"]["files"])
    tokens = "with token ids" if "response_tokens" in imported.lists else "no token ids"
    click.echo(
        f"wrote {output} ({fmt}: {files} files, {df['step'].nunique()} steps, {groups} groups of "
        f"{imported.meta.group_size}, {tokens}, model {opts.model})"
    )
    _say_notes(fmt, imported, tokenizer, reward_key, max_turns)
    if (chat_template is not None or template_kwargs) and fmt not in ("verl", "roll"):
        click.echo(
            f"--chat-template not used: {fmt} prompts are not rendered through a chat template here", err=True
        )
    if imported.dropped_rows:
        click.echo(f"dropped {imported.dropped_rows} responses of incomplete groups", err=True)


def _say_notes(
    fmt: str, imported: Imported, tokenizer: Path | None, reward_key: str | None, max_turns: int | None
) -> None:
    """What the import's notes tell the user: options given but not used, rewards, turns and
    token ids left out (on stderr)."""
    df = imported.df
    notes = imported.meta.notes["import"]
    used = fmt in ("verl", "roll", "areal") or "tokens" in notes
    if tokenizer is not None and not used:
        click.echo(f"--tokenizer not used: {fmt} dumps record token counts", err=True)
    if reward_key is not None and "reward_key" not in notes:
        why = "no reward in the dump is a dict" if fmt == "slime" else f"{fmt} rewards are numbers"
        click.echo(f"--reward-key not used: {why}", err=True)
    if notes.get("reward_dicts"):
        click.echo(f"rewards left out: {notes['reward_dicts']} are dicts; pass --reward-key KEY", err=True)
    if max_turns is not None and fmt != "areal" and not notes.get("read_as_one_turn"):
        why = {
            "nemo-rl": "nemo-rl dumps mark each turn",
            "slime": "slime dumps mark each turn",
            "verl": "no line is of verl's sglang multi-turn rollout (request_id)",
            "roll": "ROLL's RLVR pipeline is single-turn",
        }.get(fmt, "only areal dumps need it")
        click.echo(f"--max-turns not used: {why}", err=True)
    if notes.get("read_as_one_turn"):
        n = notes["read_as_one_turn"]
        click.echo(f"{n} responses of a multi-turn rollout read as one turn each (--max-turns 1)", err=True)
    if notes.get("turns_at_least"):
        n = sum(notes["turns_at_least"].values())
        click.echo(
            f"{n} responses longer than --max-tokens read as multi-turn (budget: the fewest turns "
            "of --max-tokens that hold them)",
            err=True,
        )
    if notes.get("token_ids_left_out"):
        click.echo(f"token ids left out: {notes['token_ids_left_out']}", err=True)
    matching = notes.get("response_tokens_matching_rows")
    if matching is not None and "response_tokens" not in imported.lists:
        click.echo(f"token ids left out: {len(df) - matching} responses encode to another length", err=True)

"""`simctl trace annotate`: registered on the `trace` group from the composition root,
because measuring a draft model needs live/ (torch), which traces/ may not import."""

from __future__ import annotations

from pathlib import Path

import click

from simctl.live.annotate import (
    DEFAULT_BATCH_TOKENS,
    DEFAULT_METHOD,
    AnnotateError,
    annotate_file,
    check_method,
    missing_torch,
)
from simctl.traces.cli_options import PathArg
from simctl.traces.outputs import check_output_file


def _method(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """`--method`, checked as a usage error (exit 2, like every other bad option)."""
    try:
        return check_method(value)
    except AnnotateError as exc:
        raise click.BadParameter(str(exc).removeprefix("--method ")) from None


@click.command("annotate")
@click.argument("trace", type=PathArg(dir_okay=False, path_type=Path))
@click.option(
    "--drafter",
    required=True,
    help="Draft model: smollm2, random:<config> (tests) or a HF model directory.",
)
@click.option(
    "--method",
    default=DEFAULT_METHOD,
    show_default=True,
    callback=_method,
    help="Method name the acceptance is written under (accept_<method>); a model-based one.",
)
@click.option(
    "--bucket-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Width of the position buckets [default: the trace's accept_bucket_tokens, else 512].",
)
@click.option(
    "--batch-tokens",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH_TOKENS,
    show_default=True,
    help="Padded tokens per forward pass (memory).",
)
@click.option(
    "--threads", type=click.IntRange(min=1, max=1024), default=2, show_default=True, help="torch CPU threads."
)
@click.option("-o", "--output", type=PathArg(dir_okay=False, path_type=Path), required=True)
def annotate_cmd(
    trace: Path,
    drafter: str,
    method: str,
    bucket_tokens: int | None,
    batch_tokens: int,
    threads: int,
    output: Path,
) -> None:
    """Measure a draft model's exact-match acceptance over TRACE's recorded tokens and
    write it as accept_<method> (+ position buckets) into a new trace."""
    check_output_file(output, inputs=[trace], suffixes={".parquet"}, what="annotated trace", kind="parquet")
    missing = missing_torch()
    if missing:
        raise click.ClickException(missing)
    import torch

    torch.set_num_threads(threads)
    got = annotate_file(
        trace, output, drafter, method=method, bucket_tokens=bucket_tokens, batch_tokens=batch_tokens
    )
    click.echo(
        f"{output}: accept_{got.method} from {got.drafter} over {got.requests} requests, "
        f"{got.positions} positions: {got.accepted} accepted ({got.acceptance:.3f}); "
        f"buckets of {got.bucket_tokens} tokens"
    )

"""`simctl models [MODEL]`: the model catalogue, and what the cost model reads of one model
(a catalogue name, or a HF directory or config.json: the check that simctl reads your own
model as you expect before a replay prices it)."""

from __future__ import annotations

import click

from simctl.sim.model_spec import ModelSpec
from simctl.sim.models import MODELS, get_model


def _billions(n: int) -> str:
    return f"{n / 1e9:.3g}B" if n < 1e12 else f"{n / 1e12:.3g}T"


def _summary(m: ModelSpec) -> str:
    moe = f", {m.num_experts} experts (top-{m.experts_per_token})" if m.is_moe else ""
    return (
        f"{_billions(m.param_count())} params, {_billions(m.active_param_count())} active, "
        f"{m.layers} layers{moe}, KV {m.kv_bytes_per_token() / 1024:.0f} KiB/token (bf16)"
    )


@click.command("models")
@click.argument("model", required=False)
def models_cmd(model: str | None) -> None:
    """List the catalogue's models; with MODEL (a name, or a HF model directory or its
    config.json), the architecture simctl prices it with."""
    if model is None:
        for m in sorted(MODELS.values(), key=lambda m: m.name.lower()):
            click.echo(f"{m.name:32s} {_summary(m)}")
        return
    try:
        m = get_model(model)
    except ValueError as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    click.echo(f"{m.name}: {_summary(m)}")
    attention = "multi-head latent (MLA)" if m.mla_kv_dim else f"{m.heads} heads, {m.kv_heads} KV heads"
    click.echo(f"  hidden {m.hidden}, head_dim {m.head_dim}, {attention}")
    if m.is_moe:
        ffn = f"expert FFN {m.moe_ffn}{f' + shared {m.shared_width}' if m.shared_width else ''}"
        click.echo(f"  {ffn}, {m.moe_layers} expert layers, {m.dense_layers} dense of FFN {m.ffn}")
    else:
        click.echo(f"  FFN {m.ffn}")
    if m.windowed:
        click.echo(
            f"  sliding window {m.window} tokens on {m.window_layers} of {m.layers} layers "
            f"(KV/token counts the other {m.context_layers}; each sequence adds "
            f"{m.window_kv_tokens():.0f} tokens' worth for its windows)"
        )
    click.echo(f"  vocab {m.vocab}, embeddings {'tied' if m.tie_embeddings else 'untied'}")
    experts = (
        f" (routed experts at {m.expert_bytes_per_param * 8:g} bits)" if m.expert_bytes_per_param else ""
    )
    click.echo(f"  weights {m.weight_bytes() / 2**30:.1f} GiB in bf16{experts}")

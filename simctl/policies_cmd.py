"""`simctl policies [NAME]`: the policies runnable by name, and one policy's parameters."""

from __future__ import annotations

import click

from simctl.policies.params import PolicySpecError
from simctl.policies.registry import REGISTRY, family


@click.command("policies")
@click.argument("name", required=False)
def policies_cmd(name: str | None) -> None:
    """List policies runnable by name, with their parameters (name=default); with NAME,
    that policy's parameters in detail (type, default, allowed values, help)."""
    if name is None:
        for fam in sorted(REGISTRY.values(), key=lambda f: f.name):
            click.echo(f"{fam.name:28s} {fam.help}")
            declared = fam.declared()
            if declared:
                click.echo(f"{'':28s}   " + " ".join(f"{d.name}={d.default_text}" for d in declared))
        return
    try:
        fam = family(name)
    except PolicySpecError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{fam.name}: {fam.help}")
    declared = fam.declared()
    if not declared:
        click.echo("no parameters")
        return
    for d in declared:
        click.echo(f"  {d.name} ({d.kind.type_text}, default {d.default_text}): {d.help}")
        click.echo(f"      allowed: {d.kind.allowed}")

"""`simctl policies`: the policies runnable by name."""

from __future__ import annotations

import click

from simctl.policies.registry import REGISTRY


@click.command("policies")
def policies_cmd() -> None:
    """List policies runnable by name."""
    for name, (_, text) in sorted(REGISTRY.items()):
        click.echo(f"{name:28s} {text}")

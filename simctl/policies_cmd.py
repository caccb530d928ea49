"""`simctl policies [NAME]`: the policies runnable by name (built-in, and those installed
distributions declare in the `simctl.policies` entry-point group), and one policy's
parameters; NAME may also be a plug-in spec (`module.path:Class`, `file.py:Class`)."""

from __future__ import annotations

import click

from simctl.policies.params import PolicySpecError
from simctl.policies.registry import REGISTRY
from simctl.traces.plugins import entry_point_family, entry_point_policies, make_policy, resolve


def _list() -> None:
    for fam in sorted(REGISTRY.values(), key=lambda f: f.name):
        _line(fam.name, fam.help, " ".join(f"{d.name}={d.default_text}" for d in fam.declared()))
    for ep in entry_point_policies():
        if ep.name in REGISTRY:
            click.echo(f"{ep.name:28s} (entry point {ep.value} of {ep.dist}: shadowed by the built-in)")
            continue
        try:
            loaded = entry_point_family(ep.name)
        except PolicySpecError as exc:
            click.echo(f"{ep.name:28s} (entry point of {ep.dist}, not loadable: {exc})")
            continue
        if loaded is not None:
            params = " ".join(f"{d.name}={d.default_text}" for d in loaded.declared())
            _line(loaded.name, f"{loaded.help} [{ep.dist}]", params)


def _line(name: str, help_text: str, params: str) -> None:
    click.echo(f"{name:28s} {help_text}")
    if params:
        click.echo(f"{'':28s}   {params}")


@click.command("policies")
@click.argument("name", required=False)
def policies_cmd(name: str | None) -> None:
    """List policies runnable by name, with their parameters (name=default); with NAME,
    that policy's parameters in detail (type, default, allowed values, help)."""
    if name is None:
        _list()
        return
    try:
        fam, args = resolve(name)
        if args:  # (parameters given with the name are checked as a run would check them)
            make_policy(name)
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

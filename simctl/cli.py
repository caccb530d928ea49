"""The `simctl` command: one click program, subcommands registered from each package."""

from __future__ import annotations

import click

from simctl.traces.cli import trace_group


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="simctl")
def main() -> None:
    """Simulate RL rollout designs on a GPU cluster, run them live, and compare."""


main.add_command(trace_group)


def _register() -> None:
    from simctl.live.calibrate import calibrate_cmd
    from simctl.live.cli import live_cmd
    from simctl.policies_cmd import policies_cmd
    from simctl.replay_cmd import replay_cmd
    from simctl.reports.cli import report_cmd

    main.add_command(replay_cmd)
    main.add_command(policies_cmd)
    main.add_command(report_cmd)
    main.add_command(live_cmd)
    main.add_command(calibrate_cmd)


_register()

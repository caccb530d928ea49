"""Stops what a local Ray instance started when the sweep that started it dies without
cleaning up.

`simctl.sweep_runner.local_ray` shuts its Ray down and stops whatever is left of it when
the sweep ends, is interrupted or gets SIGTERM. But Ray's core worker can abort the driver
outright: after a SIGTERM during running tasks it sometimes dies on an internal check
("An unexpected system state has occurred", task_manager.cc; Ray 2.60), and then no Python
cleanup runs, as after a SIGKILL. The raylet's agents then stay behind, re-parented and out
of the sweep's reach, for over 20 s (6 of 40 SIGTERMed two-worker sweeps on this 2-core
machine, and every SIGKILLed one).

So the sweep starts this guard first, as its own child outside Ray. It reads the Ray
processes the sweep notes ("pid create_time" per line) on stdin; when stdin closes (the
sweep ended, whichever way) it terminates those still running, kills them after a grace
period, and exits. A process is matched by its start time too, so a recycled pid is never
touched. It ignores SIGINT and SIGTERM: a Ctrl-C or a kill of the whole group must not stop
it before its one pass.
"""

from __future__ import annotations

import signal
import sys
from contextlib import suppress
from typing import Any

GRACE_S = 5.0


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import psutil

    noted: dict[int, float] = {}
    for line in sys.stdin:  # until the sweep closes it or dies
        with suppress(ValueError):
            pid, created = line.split()
            noted[int(pid)] = float(created)
    procs = []
    for pid, created in noted.items():
        with suppress(psutil.Error):
            proc = psutil.Process(pid)
            if abs(proc.create_time() - created) < 1e-3:
                procs.append(proc)
    stop(procs)


def stop(procs: list[Any], grace_s: float = GRACE_S) -> None:
    """SIGTERM `procs` (psutil processes), then SIGKILL those still running after `grace_s`."""
    import psutil

    for proc in procs:
        with suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with suppress(psutil.Error):
            proc.kill()


if __name__ == "__main__":
    main()

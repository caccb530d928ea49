"""simctl.ray_guard: once its input closes (the sweep ended or died), it stops the processes
it was told of, and only those: a pid whose start time differs is someone else's."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil


def _ignores_sigterm(pid: int) -> bool:
    """From /proc/PID/status: SigIgn, a hex mask with bit (signal - 1)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(mask >> (signal.SIGTERM - 1) & 1)


def test_guard_stops_what_it_was_told_of_and_nothing_else() -> None:
    told = subprocess.Popen(["sleep", "60"])
    recycled = subprocess.Popen(["sleep", "60"])  # its pid, noted with another start time
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
        ]
    )
    guard = subprocess.Popen([sys.executable, "-m", "simctl.ray_guard"], stdin=subprocess.PIPE, text=True)
    try:
        assert guard.stdin is not None
        for proc, shift in ((told, 0.0), (recycled, 10.0), (stubborn, 0.0)):
            created = psutil.Process(proc.pid).create_time() + shift
            guard.stdin.write(f"{proc.pid} {created!r}\n")
        guard.stdin.write("not a line\n")
        guard.stdin.flush()
        deadline = time.monotonic() + 20
        while not _ignores_sigterm(guard.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # (it sets its handlers first thing; the interpreter starts)
        guard.send_signal(signal.SIGTERM)  # ignored: its one pass is still to come
        assert guard.poll() is None
        guard.stdin.close()
        assert guard.wait(timeout=20) == 0
        assert told.wait(timeout=5) == -signal.SIGTERM
        assert stubborn.wait(timeout=5) == -signal.SIGKILL  # after the grace period
        assert recycled.poll() is None
    finally:
        for proc in (told, recycled, stubborn, guard):
            if proc.poll() is None:
                proc.kill()
                proc.wait()

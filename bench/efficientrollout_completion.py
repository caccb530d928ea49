"""veRL's rollout on the EfficientRollout preset against the paper's own baseline timings.

Run: .venv/bin/python bench/efficientrollout_completion.py [--seeds 3]   (about a minute per seed)

EfficientRollout (Kim, Lee et al.) publishes three measurements of its veRL (AR) baseline on
Qwen2.5-7B, one A100 node, TP1, 1,024 responses per step capped at 8,192 tokens:

- Table 2: rollout 82.4 s per step, the mean of 100 training steps;
- Fig. 6c (App. B), the first step of the second epoch: 50% of requests finish within 13 s,
  90% within 22 s, 99% within 30 s, the last at about 88 s;
- Table 5: mean response length 661 tokens from the second epoch on.

This replays `verl` on the preset's layout over steps 0-99 and prints the same statistics,
plus how many steps hold a response that reached the 8,192-token budget (the runaway tail
that sets a step's makespan) and the seconds per decode iteration the body of step 64 ran
at (its median finish time over its median response length). It measures the preset's
length inputs and the cost model together; nothing here is fitted.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

PRESET = "efficientrollout-qwen7b-8k"
STEPS = 100
EPOCH2 = 64  # the preset's steps_per_epoch: step 64 is the first of the second epoch
PAPER_MEAN_ROLLOUT = 82.4  # Table 2
PAPER_F6C = {"p50": 13.0, "p90": 22.0, "p99": 30.0, "max": 88.0}  # App. B, Fig. 6c
PAPER_MEAN_LEN = 661.4  # Table 5, Qwen2.5-7B


def replay(seed: int) -> tuple[np.ndarray, pd.DataFrame]:
    """veRL's per-step rollout makespans and its requests table, steps 0-99."""
    from simctl.reproduce_runner import _setup
    from simctl.sim.experiments import _ER_FULL
    from simctl.sim.replay import run_policy
    from simctl.traces.generate import generate_trace
    from simctl.traces.io import Trace

    df, meta, lists = generate_trace(PRESET, STEPS, seed)
    setup = _setup(
        Trace(df=df, meta=meta, lists=lists), _ER_FULL.cluster, (PRESET, 1.0, tuple(range(STEPS)), seed)
    )
    run = run_policy(setup, "verl")
    return np.array([m.rollout_makespan_s for m in run.steps]), pd.concat(run.requests, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args()
    print(f"{PRESET}, veRL, steps 0-{STEPS - 1}")
    print(f"paper: Table 2 mean rollout {PAPER_MEAN_ROLLOUT} s; Fig. 6c (step 64) {PAPER_F6C}")
    head = f"{'seed':>4s} {'mean s':>7s} {'capped':>7s} {'mean len':>8s}"
    print(head + "  step 64: p50 / p90 / p99 / max s   s/iteration (body)")
    for seed in range(args.seeds):
        makespans, rq = replay(seed)
        capped = rq.groupby("step")["response_len"].max() >= 8192
        epoch2 = rq[rq["step"] >= EPOCH2]["response_len"].mean()
        at = rq[rq["step"] == EPOCH2]
        q = np.quantile(at["finish_s"].to_numpy(), [0.5, 0.9, 0.99, 1.0])
        body = q[0] / float(np.median(at["response_len"]))
        cells = " / ".join(f"{v:5.1f}" for v in q)
        runs = f"{seed:4d} {makespans.mean():7.1f} {int(capped.sum()):4d}/{STEPS} {epoch2:8.0f}"
        print(f"{runs}  {cells}   {1e3 * body:5.1f} ms")
    paper_body = PAPER_F6C["p50"] / PAPER_MEAN_LEN
    print(f"paper: mean len {PAPER_MEAN_LEN} (Table 5): body >= {1e3 * paper_body:.1f} ms per iteration")
    print("(13 s over the mean length; a log-normal's median response is shorter than its mean)")


if __name__ == "__main__":
    main()

"""Do the simulator's results stay the same across a change? (issue #17's speed work)

Replays every registered policy on every bundled sample (all of its steps, its own
layout, seed 0) and writes one digest per (policy, sample): per-step metrics and a hash of
the requests table and of the timeline's original columns (columns added later, such as a
phase split, do not count). Run it on the tree before and after a change and compare:

    .venv/bin/python bench/check_sim_identity.py --out before.json
    ... change ...
    .venv/bin/python bench/check_sim_identity.py --out after.json --compare before.json

Exit 1 and one line per difference when the results differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "traces/samples").glob("*.parquet"))
TIMELINE_COLUMNS = (
    "policy",
    "step",
    "worker",
    "t0_s",
    "t1_s",
    "iterations",
    "batch",
    "kv_tokens",
    "gamma_mean",
    "replicas",
)
REQUEST_SKIP = ()


def _hash(frame: pd.DataFrame) -> str:
    frame = frame.reset_index(drop=True)
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()).hexdigest()[
        :16
    ]


def digest(sample: Path, policy: str) -> dict[str, object]:
    import simctl

    trace = simctl.load_trace(sample)
    try:
        result = simctl.replay(trace, [policy])
    except Exception as exc:  # a policy that refuses a trace refuses it the same way
        return {"refused": f"{type(exc).__name__}: {str(exc)[:200]}"}
    steps = result.steps.drop(columns=[c for c in result.steps.columns if "wall" in c or "cpu" in c])
    timeline = result.timeline[[c for c in TIMELINE_COLUMNS if c in result.timeline.columns]]
    requests = result.requests[[c for c in result.requests.columns if c not in REQUEST_SKIP]]
    tl = result.timeline.assign(busy_s=result.timeline["t1_s"] - result.timeline["t0_s"])
    per_worker = tl.groupby(["step", "worker"])[["busy_s", "iterations"]].sum().reset_index()
    return {
        "steps": json.loads(steps.to_json(orient="records", double_precision=15)),
        "requests": _hash(requests),
        "timeline": _hash(timeline),
        # --loose: times to the microsecond, and the timeline as busy seconds and
        # iterations per worker (a change in where a block stops splits it otherwise)
        "requests_us": _hash(_rounded(requests)),
        "busy_us": _hash(_rounded(per_worker)),
    }


def _rounded(frame: pd.DataFrame) -> pd.DataFrame:
    """Float columns rounded to 1e-6 (seconds: a microsecond)."""
    floats = frame.select_dtypes("float").columns
    return frame.assign(**{c: frame[c].round(6) for c in floats})


# Step-time parts after the rollout follow from the trace's metadata and the post-rollout
# model (sim/step_time.py), not from the rollout simulation: a change there is not a
# change of the simulator's results.
POST_ROLLOUT = ("step_time_s", "reward_s", "train_s", "weight_sync_s", "post_source")


def _rollout(d: object, loose: bool = False) -> object:
    if not isinstance(d, dict) or "steps" not in d:
        return d
    steps = [{k: _value(v, loose) for k, v in s.items() if k not in POST_ROLLOUT} for s in d["steps"]]
    if loose:  # exact hashes out, rounded ones in
        return {"steps": steps, "requests_us": d.get("requests_us"), "busy_us": d.get("busy_us")}
    return {**d, "steps": steps, "requests_us": None, "busy_us": None}


def _value(v: object, loose: bool) -> object:
    return float(f"{v:.9g}") if loose and isinstance(v, float) else v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--policies", default="", help="comma-separated subset (default: all registered)")
    ap.add_argument("--samples", default="", help="comma-separated substrings of sample names")
    ap.add_argument(
        "--loose",
        action="store_true",
        help="same to 9 significant digits and the microsecond, timeline compared per worker "
        "(for changes that move where blocks stop: the clock then rounds differently in the last bit)",
    )
    args = ap.parse_args()
    from simctl.policies.registry import REGISTRY

    names = [p for p in args.policies.split(",") if p] or sorted(REGISTRY)
    samples = [s for s in SAMPLES if not args.samples or any(k in s.name for k in args.samples.split(","))]
    out: dict[str, object] = {}
    for sample in samples:
        for name in names:
            key = f"{sample.stem}/{name}"
            out[key] = digest(sample, name)
            print(key, "refused" if "refused" in out[key] else "ok", file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True))
    if not args.compare:
        return 0
    before = json.loads(args.compare.read_text())
    bad = [k for k in out if k in before and _rollout(before[k], args.loose) != _rollout(out[k], args.loose)]
    new = [k for k in out if k not in before]  # (a sample or policy the baseline lacks)
    for k in bad:
        print(f"DIFFERENT {k}")
    compared = len(out) - len(new)
    missing = f"; {len(new)} not in {args.compare}" if new else ""
    print(f"{compared - len(bad)} of {compared} identical{missing}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

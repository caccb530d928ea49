"""The bundled samples are what a newcomer replays first, so each must show its paper's
mechanism: it replays on the layout its paper reports (recorded in its metadata, as `trace
gen` records a generated trace's), and the paper's policy acts on it. Before, three samples
recorded no layout and replayed on 512 H100s (EfficientRollout's 7B sample there never
speculated: 1.00x), and the RhymeRL sample's three steps all sat in epoch 0, where RhymeRL
runs as veRL (1.00x)."""

from __future__ import annotations

from pathlib import Path

import pytest

import simctl
from simctl.traces.layouts import layout_for

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"
PAPER_SAMPLES = (
    "efficientrollout-qwen7b-8k-6steps.parquet",
    "rhymerl-math-14b-16k-tokens.parquet",
    "seer-moonlight-64k-tokens.parquet",
    "tlt-qwen32b-32k-2steps.parquet",
)


@pytest.mark.parametrize("name", PAPER_SAMPLES)
def test_sample_records_its_papers_layout(name: str) -> None:
    meta = simctl.load_trace(SAMPLES / name).meta
    assert meta.cluster is not None
    assert meta.cluster == layout_for(meta.preset, meta.notes.get("scale", 1.0))


def test_the_readme_sample_replays_on_the_products_512_gpus() -> None:
    """The README's main job: the DAPO sample records no layout, so it replays on h100x512."""
    assert simctl.load_trace(SAMPLES / "dapo-32b-20k-2steps.parquet").meta.cluster is None


def _per_step(name: str, policy: str) -> tuple[list[float], list[float], list[float]]:
    steps = simctl.replay(SAMPLES / name, ["verl", policy]).steps.set_index(["policy", "step"])
    base = steps.loc["verl", "rollout_makespan_s"].tolist()
    made = steps.loc[policy, "rollout_makespan_s"].tolist()
    return base, made, steps.loc[policy, "mean_accept_len"].tolist()


def test_rhymerl_sample_brings_its_prompts_back_and_rhymerl_acts_from_the_second_epoch() -> None:
    """One step per epoch over the same five prompts: step 0 has no history, so RhymeRL is
    veRL there (RhymeRL §6.2: the first epoch runs plain with veRL's placement); from step 1
    it drafts from the previous epoch's responses and finishes sooner."""
    df = simctl.load_trace(SAMPLES / "rhymerl-math-14b-16k-tokens.parquet").df
    assert df.groupby("step")["epoch"].first().tolist() == [0, 1, 2]
    prompts = df.groupby("step")["prompt_id"].apply(frozenset)
    assert prompts[0] == prompts[1] == prompts[2]
    base, made, accept = _per_step("rhymerl-math-14b-16k-tokens.parquet", "rhymerl")
    assert made[0] == pytest.approx(base[0], rel=1e-9)  # (blocks cut elsewhere: float sums)
    assert all(a > 1.3 for a in accept[1:])
    assert all(m < 0.8 * b for m, b in zip(made[1:], base[1:], strict=True))


def test_efficientrollout_speculates_on_its_own_sample() -> None:
    """On the sample's 8 A100s (EfficientRollout's setting) every step speculates and ends
    sooner than veRL's."""
    base, made, accept = _per_step("efficientrollout-qwen7b-8k-6steps.parquet", "efficientrollout")
    assert all(a > 2 for a in accept)
    assert all(m < 0.9 * b for m, b in zip(made, base, strict=True))


def test_tlt_sample_reaches_the_step_where_tlt_drafts_with_its_trained_drafter() -> None:
    """Two steps: TLT spot-trains its drafter on idle GPUs in the first and drafts with it
    from the second (TLT §4); with one step, as the sample had, a newcomer saw only the
    model-free first step."""
    base, made, accept = _per_step("tlt-qwen32b-32k-2steps.parquet", "tlt")
    assert accept[0] < 2 < 4 < accept[1]
    assert made[1] < 0.7 * base[1]


def test_efficientrollout_in_the_main_job_stays_plain_on_the_worker_that_ends_the_step(monkeypatch) -> None:
    """The README's explanation of EfficientRollout at 1.00x in the main job: it speculates
    on most workers, but each step ends with a worker that never does, because its own
    Eq. 3 toggle prices that batch (its last 16 requests, all at the 20K-token cap)
    under the 1.05 switch-on threshold (W4 drafting reads the whole KV)."""
    from simctl.policies import efficientrollout
    from simctl.policies.contract import StepStarted

    seen: list[tuple[int, int, int, float]] = []  # (step, worker, batch, predicted speedup)
    step = [-1]
    predicted, on_event = (
        efficientrollout.EfficientRolloutSpeculation.predicted,
        efficientrollout.EfficientRolloutSpeculation.on_event,
    )

    def noting(self, view, worker):  # type: ignore[no-untyped-def]
        got = predicted(self, view, worker)
        if got is not None:
            seen.append((step[0], worker, view.worker(worker).running, got))
        return got

    def stepping(self, event, view):  # type: ignore[no-untyped-def]
        step[0] += isinstance(event, StepStarted)
        return on_event(self, event, view)

    monkeypatch.setattr(efficientrollout.EfficientRolloutSpeculation, "predicted", noting)
    monkeypatch.setattr(efficientrollout.EfficientRolloutSpeculation, "on_event", stepping)
    res = simctl.replay(SAMPLES / "dapo-32b-20k-2steps.parquet", ["verl", "efficientrollout"])
    steps = res.steps.set_index(["policy", "step"])
    base = steps.loc["verl", "rollout_makespan_s"].tolist()
    made = steps.loc["efficientrollout", "rollout_makespan_s"].tolist()
    assert made == pytest.approx(base, rel=1e-9)
    assert all(a > 4 for a in steps.loc["efficientrollout", "mean_accept_len"])
    req = res.requests[res.requests["policy"] == "efficientrollout"]
    for s, frame in req.groupby("step"):
        last = int(frame.loc[frame["finish_s"].idxmax(), "worker"])
        assert frame.loc[frame["worker"] == last, "drafted"].sum() == 0  # never speculated there
        assert frame.loc[frame["worker"] != last, "drafted"].sum() > 0
        on_last = [(b, v) for st, w, b, v in seen if st == s and w == last]
        assert on_last and max(v for _, v in on_last) < 1.05
        tail = frame[frame["worker"] == last].nlargest(16, "finish_s")
        assert (tail["response_len"] == 20480).all()  # all at the cap: the batch never shrinks
        assert min(b for b, _ in on_last) == 16  # its last 16, which finish together

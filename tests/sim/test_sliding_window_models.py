"""Models with sliding-window layers and the newer MoE families (sim/model_config.py,
sim/model_spec.py, sim/cost_model.py, sim/worker.py).

gpt-oss, Gemma 2 and Gemma 3 attend within a window in most or half of their layers, and
vLLM keeps only the window's KV there (its hybrid KV cache manager). Priced as full
attention they would hold twice (gpt-oss) to six times (Gemma 3) the KV per token they
do, and read it every iteration. GLM-4.5, MiniMax-M2 and gpt-oss are what RL frameworks
(slime, verl) train in 2026; their configs must read to their published sizes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from simctl.sim.cluster import parse_cluster
from simctl.sim.cost_model import RooflineCostModel
from simctl.sim.engine import SimError
from simctl.sim.model_config import MXFP4_BYTES_PER_PARAM, ModelConfigError, essentials, model_from_config
from simctl.sim.models import get_model
from tests.factories import LinearCost, make_frame, make_trace, run_one
from tests.sim.test_model_config import CATALOGUE_CONFIGS

# the catalogue entry's config (ai-dynamo/aiconfigurator @ 095f58a's copy), with the fields
# the reader leaves aside and the whole quantization_config, as the file has them
GPT_OSS_20B: dict[str, Any] = {
    **CATALOGUE_CONFIGS["gpt-oss-20b"],
    "experts_per_token": 4,
    "attention_bias": True,
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "lm_head"],
    },
}
# google/gemma-3-27b-it: the multimodal config's text_config holds only these (the rest
# are Gemma3TextConfig's defaults)
GEMMA3_27B: dict[str, Any] = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 62,
        "hidden_size": 5376,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "intermediate_size": 21504,
        "query_pre_attn_scalar": 168,
        "sliding_window": 1024,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
    "vision_config": {"hidden_size": 1152},
}
GEMMA2_9B: dict[str, Any] = {
    "model_type": "gemma2",
    "num_hidden_layers": 42,
    "hidden_size": 3584,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "intermediate_size": 14336,
    "vocab_size": 256000,
    "sliding_window": 4096,
}


def test_gpt_oss_reads_to_its_published_size_with_mxfp4_experts_and_half_its_layers_sliding() -> None:
    m = model_from_config(GPT_OSS_20B, "gpt-oss-20b")
    # openai/gpt-oss README: 21B parameters, 3.6B active (without the input embedding)
    assert m.param_count() == pytest.approx(21e9, rel=0.01)
    assert m.active_param_count() - m.vocab * m.hidden == pytest.approx(3.6e9, rel=0.01)
    assert (m.window, m.window_layers, m.context_layers) == (128, 12, 12)
    assert m.expert_bytes_per_param == MXFP4_BYTES_PER_PARAM == 0.53125
    # MXFP4 experts: 12.8 GiB of weights, not 39 GiB in BF16
    bf16 = dataclasses.replace(m, expert_bytes_per_param=0.0)
    assert m.weight_bytes() / 2**30 == pytest.approx(12.8, abs=0.1)
    assert bf16.weight_bytes() > 2.9 * m.weight_bytes()
    # each sequence's windows, in context tokens of the 12 full layers: 12 x 128 / 12
    assert m.window_kv_tokens() == 128.0
    assert m.kv_bytes_per_token() == 2 * 12 * 8 * 64 * 2


def test_the_catalogue_has_the_models_rl_frameworks_train_at_their_published_sizes() -> None:
    published = {  # total, active (model cards, READMEs: sim/models.py cites them)
        "GLM-4.5": (355e9, None),
        "GLM-4.5-Air": (106e9, None),
        "MiniMax-M2": (230e9, None),
        "gpt-oss-20b": (21e9, 3.6e9),
        "gpt-oss-120b": (117e9, 5.1e9),
    }
    for name, (total, active) in published.items():
        m = get_model(name)
        assert m.param_count() == pytest.approx(total, rel=0.01), name
        if active is not None:
            assert m.active_param_count() - m.vocab * m.hidden == pytest.approx(active, rel=0.01), name
    air = get_model("zai-org/GLM-4.5-Air")
    assert (air.dense_layers, air.moe_layers, air.shared_experts, air.kv_heads) == (1, 45, 1, 8)
    assert get_model("MiniMax-M2").shared_width == 0 and not get_model("MiniMax-M2").windowed


def test_gemma3s_minimal_text_config_takes_the_class_defaults_and_slides_five_layers_in_six() -> None:
    m = model_from_config(GEMMA3_27B, "gemma-3-27b-it")
    assert m.vocab == 262208 and m.tie_embeddings
    # full attention on layers 5, 11, ..., 59: 10 of 62
    assert (m.window, m.window_layers, m.context_layers) == (1024, 52, 10)
    assert m.param_count() == pytest.approx(27e9, rel=0.02)  # the language model of the 27B
    # the 4B's text config omits heads too: Gemma3TextConfig's 8 heads, 4 KV heads, head_dim 256
    four = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "hidden_size": 2560,
        "intermediate_size": 10240,
    }
    small = model_from_config({**four, "sliding_window": 1024}, "gemma-3-4b")
    assert (small.heads, small.kv_heads, small.head_dim, small.window_layers) == (8, 4, 256, 29)


@pytest.mark.parametrize(
    ("config", "sliding"),
    [
        (GEMMA2_9B, 21),  # even-numbered layers
        ({**GEMMA2_9B, "num_hidden_layers": 5}, 3),
        ({**GPT_OSS_20B, "layer_types": None}, 12),  # the same alternation without the list
        ({**GEMMA2_9B, "layer_types": ["full_attention"] * 42}, 0),
        ({**GEMMA2_9B, "layer_types": ["sliding_attention"] * 41 + ["full_attention"]}, 41),
    ],
)
def test_which_layers_slide(config: dict[str, Any], sliding: int) -> None:
    assert model_from_config(config, "m").window_layers == sliding


# Qwen2.5-7B's config with the window fields every Qwen config carries
QWEN: dict[str, Any] = {**CATALOGUE_CONFIGS["Qwen2.5-7B"], "sliding_window": 131072, "max_window_layers": 28}


def test_a_sliding_window_field_alone_does_not_make_a_window() -> None:
    # Qwen: only with use_sliding_window, and then from max_window_layers on
    assert not model_from_config({**QWEN, "use_sliding_window": False}, "q").windowed
    assert not model_from_config({**QWEN, "use_sliding_window": True}, "q").windowed  # 28 of 28 full
    on = model_from_config({**QWEN, "use_sliding_window": True, "max_window_layers": 20}, "q")
    assert (on.window, on.window_layers) == (131072, 8)
    # Mistral 7B v0.1's window covers every layer: priced as full attention
    mistral = {**QWEN, "model_type": "mistral", "sliding_window": 4096}
    assert not model_from_config(mistral, "m").windowed
    # a catalogue Qwen is unchanged by the fields it carries
    plain = {k: v for k, v in QWEN.items() if k not in ("sliding_window", "max_window_layers")}
    assert model_from_config({**QWEN, "use_sliding_window": False}, "q") == model_from_config(plain, "q")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"layer_types": ["sliding_attention"] * 3}, "layer_types"),  # not one per layer
        ({"layer_types": ["linear_attention", "full_attention"] * 12}, "layer_types"),
        ({"layer_types": "sliding_attention"}, "layer_types"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"sliding_window": "128"}, "sliding_window"),
        ({"quantization_config": "mxfp4"}, "quantization_config"),
        ({"quantization_config": {"bits": 4}}, "quantization_config"),
    ],
)
def test_a_bad_window_or_quantization_field_is_one_line(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelConfigError) as err:
        model_from_config({**GPT_OSS_20B, **change}, "m", source="gpt/config.json")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("gpt/config.json: ") and f"'{field}'" in msg


def test_a_trace_keeps_what_reads_back_to_the_same_windowed_model() -> None:
    kept = essentials(GPT_OSS_20B)
    assert kept["quantization_config"] == {"quant_method": "mxfp4"}  # not the module lists
    assert model_from_config(kept, "gpt-oss-20b") == model_from_config(GPT_OSS_20B, "gpt-oss-20b")
    gemma = essentials(GEMMA3_27B)
    assert model_from_config(gemma, "g") == model_from_config(GEMMA3_27B, "g")


def _full_attention_twin(m):
    return dataclasses.replace(m, window=0, window_layers=0)


def test_the_roofline_reads_a_window_per_sequence_in_sliding_layers_and_holds_more_sequences() -> None:
    gpu = parse_cluster("h100x8:tp1").gpu
    m = get_model("gpt-oss-20b")
    win, full = RooflineCostModel(m, gpu, 1), RooflineCostModel(_full_attention_twin(m), gpu, 1)
    # KV per context token halves (12 of 24 layers keep every token): twice the tokens
    assert win.kv_capacity_tokens == pytest.approx(2 * full.kv_capacity_tokens, rel=1e-6)
    assert win.kv_window_tokens == 128.0 and full.kv_window_tokens == 0.0
    b = 64
    # while every sequence is within its window the sliding layers read all of it
    short = np.array([16.0, 64.0, 128.0]) * b
    np.testing.assert_allclose(win.iteration_time(b, b, short), full.iteration_time(b, b, short), rtol=1e-9)
    # past it they read the window: a long-context decode costs less, and its KV read
    # grows half as fast with the context as full attention's
    long = np.array([8_000.0, 16_000.0]) * b
    tw, tf = win.iteration_time(b, b, long), full.iteration_time(b, b, long)
    assert (tw < tf).all()
    assert win.breakdown(b, b, long[1])["memory_s"] < full.breakdown(b, b, long[1])["memory_s"]
    # scalar and array paths agree
    assert float(win.iteration_time(b, b, float(long[0]))) == pytest.approx(float(tw[0]), rel=1e-12)
    # a long prompt's prefill attends a window in the sliding layers
    assert float(win.prefill_time(32_000)) < float(full.prefill_time(32_000))
    assert float(win.prefill_time(100)) == pytest.approx(float(full.prefill_time(100)), rel=1e-9)


def test_each_running_sequence_holds_its_window_of_kv() -> None:
    """A worker of 10,000 KV tokens, requests growing from 128 to 1,128 tokens of context:
    all 8 start at once without windows; with a 2,000-token window held by each running
    sequence, never more than its KV leaves room for."""
    trace = make_trace(make_frame(np.full(8, 1000), group_size=8, prompt_len=128))
    plain = run_one(trace, cluster="h100x8", cost=LinearCost(kv_capacity_tokens=10_000))
    windowed_cost = LinearCost(kv_capacity_tokens=10_000)
    windowed_cost.kv_window_tokens = 2_000.0  # type: ignore[attr-defined]
    windowed = run_one(trace, cluster="h100x8", cost=windowed_cost)
    tl_plain, tl = plain.timeline[0], windowed.timeline[0]
    assert int(tl_plain["batch"].max()) == 8
    assert 1 < int(tl["batch"].max()) <= 4  # 4 x (128 + 2,000) fits, 5 do not
    assert (tl["kv_tokens"] + tl["batch"] * 2_000 <= 10_000).all()
    assert not (tl_plain["kv_tokens"] + tl_plain["batch"] * 2_000 <= 10_000).all()
    assert windowed.steps[0].rollout_makespan_s > plain.steps[0].rollout_makespan_s
    # a request whose context and window do not fit a worker is refused, naming the window
    too_long = LinearCost(kv_capacity_tokens=3_000)
    too_long.kv_window_tokens = 2_000.0  # type: ignore[attr-defined]
    with pytest.raises(SimError, match="sliding window"):
        run_one(trace, cluster="h100x8", cost=too_long)


def test_seers_scheduler_reserves_each_sequences_window_so_nothing_is_preempted() -> None:
    """Seer dispatches a chunk only where its KV fits (§4.2: no preemption). A worker of
    12,000 tokens, requests of 128 + 3,000 tokens, each holding a 2,000-token window: told
    the window (WorkerView.kv_window_tokens), the scheduler runs two at a time and nothing
    is preempted; blind to it, it sends four and the worker preempts."""
    import dataclasses
    from unittest import mock

    import pandas as pd

    from simctl.sim import view as sim_view

    trace = make_trace(make_frame(np.full(8, 3000), group_size=8, prompt_len=128))
    cost = LinearCost(kv_capacity_tokens=12_000)
    cost.kv_window_tokens = 2_000.0  # type: ignore[attr-defined]
    aware = run_one(trace, "seer-divided", cluster="h100x1", cost=cost)
    worker = sim_view.SimView.worker

    def blind(self, w):  # the view as before WorkerView had the window
        return dataclasses.replace(worker(self, w), kv_window_tokens=0)

    with mock.patch.object(sim_view.SimView, "worker", blind):
        unaware = run_one(trace, "seer-divided", cluster="h100x1", cost=cost)
    assert int(pd.concat(aware.requests)["preemptions"].sum()) == 0
    assert int(aware.timeline[0]["batch"].max()) == 2
    assert int(pd.concat(unaware.requests)["preemptions"].sum()) > 0

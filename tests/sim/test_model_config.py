"""A model outside the catalogue, from its HF config.json: the reader, its errors, and the
model travelling with a trace (`replay --model DIR`, `trace import --model DIR`, a trace's
`model_config`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.cli import main
from simctl.sim.model_config import ModelConfigError, essentials, model_from_config
from simctl.sim.models import get_model, model_of_trace, model_record
from simctl.traces.io import read_trace, write_trace
from simctl.traces.schema import TraceMeta
from tests.factories import make_frame

# The catalogue's entries written as their config.json fields (the values its comments cite).
CATALOGUE_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen2.5-7B": {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
    "Qwen2.5-0.5B": {
        "model_type": "qwen2",
        "num_hidden_layers": 24,
        "hidden_size": 896,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Llama-3.1-8B": {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
    },
    "Qwen3-235B-A22B": {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 94,
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "head_dim": 128,
        "num_key_value_heads": 4,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1536,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    "Moonlight-16B-A3B": {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 27,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "n_routed_experts": 64,
        "num_experts_per_tok": 6,
        "moe_intermediate_size": 1408,
        "n_shared_experts": 2,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "intermediate_size": 11264,
        "vocab_size": 163840,
    },
    "Kimi-K2": {
        "model_type": "kimi_k2",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "n_routed_experts": 384,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 2048,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "intermediate_size": 18432,
        "vocab_size": 163840,
    },
    "gpt-oss-20b": {
        "model_type": "gpt_oss",
        "num_hidden_layers": 24,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "tie_word_embeddings": False,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "quantization_config": {"quant_method": "mxfp4"},
    },
    "GLM-4.5-Air": {
        "model_type": "glm4_moe",
        "num_hidden_layers": 46,
        "hidden_size": 4096,
        "num_attention_heads": 96,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "n_routed_experts": 128,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 1,
        "vocab_size": 151552,
        "tie_word_embeddings": False,
        "partial_rotary_factor": 0.5,
        "num_nextn_predict_layers": 1,
    },
    "MiniMax-M2": {
        "model_type": "minimax_m2",
        "num_hidden_layers": 62,
        "hidden_size": 3072,
        "num_attention_heads": 48,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 1536,
        "num_local_experts": 256,
        "num_experts_per_tok": 8,
        "shared_intermediate_size": 0,
        "vocab_size": 200064,
        "tie_word_embeddings": False,
        "sliding_window": None,
    },
    "SmolLM2-135M": {
        "model_type": "llama",
        "num_hidden_layers": 30,
        "hidden_size": 576,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
}


@pytest.mark.parametrize("name", sorted(CATALOGUE_CONFIGS))
def test_a_catalogue_models_config_reads_as_its_entry(name: str) -> None:
    """The reader and the catalogue agree field for field (and so in every derived count)."""
    entry = dataclasses.replace(get_model(name), hf_ids=())
    assert model_from_config(CATALOGUE_CONFIGS[name], name) == entry


def test_a_model_directory_and_its_config_file(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen2.5-7B-my-sft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**CATALOGUE_CONFIGS["Qwen2.5-7B"], "rope_theta": 1e6}))
    by_dir, by_file = get_model(str(folder)), get_model(str(folder / "config.json"))
    assert by_dir == by_file and by_dir.name == "Qwen2.5-7B-my-sft"
    assert by_dir.param_count() == get_model("Qwen2.5-7B").param_count()
    other = tmp_path / "mine.json"
    other.write_text(json.dumps(CATALOGUE_CONFIGS["Llama-3.1-8B"]))
    assert get_model(str(other)).name == "mine"


def test_mixtral_counts_against_its_model_card() -> None:
    """Mixtral 8x7B (arXiv:2401.04088): 46.7B parameters, 12.9B active per token."""
    config = {
        "model_type": "mixtral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    m = model_from_config(config, "Mixtral-8x7B")
    assert m.param_count() == pytest.approx(46.7e9, rel=0.01)
    assert m.active_param_count() == pytest.approx(12.9e9, rel=0.01)


def test_qwen_moe_shared_expert_and_dense_layers() -> None:
    """qwen2_moe: the shared expert's own width; `mlp_only_layers` and `decoder_sparse_step`
    make layers dense (their FFN is `intermediate_size`)."""
    h, layers, width, shared, ffn = 256, 8, 64, 96, 512
    config = {
        "model_type": "qwen2_moe",
        "num_hidden_layers": layers,
        "hidden_size": h,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": ffn,
        "vocab_size": 1000,
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": width,
        "shared_expert_intermediate_size": shared,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [1],
    }
    m = model_from_config(config, "tiny-moe")
    sparse = [i for i in range(layers) if i != 1 and (i + 1) % 2 == 0]  # layers 3, 5, 7
    assert m.dense_layers == layers - len(sparse) == 5
    attn = 2 * h * 4 * 64 + 2 * h * 2 * 64 + 2 * h  # q, o, k, v (head_dim 64) and two norms
    moe = (2 * 3 * h * width) + 3 * h * shared + h * 6  # top-2, the shared expert, the router
    expected = 2 * 1000 * h + layers * attn + 5 * 3 * h * ffn + 3 * moe + h
    assert m.active_param_count() == expected


def test_a_nested_language_model_is_read() -> None:
    """Multimodal configs nest the language model (`text_config`); that is what is priced."""
    config = {"model_type": "my_vlm", "text_config": CATALOGUE_CONFIGS["Qwen2.5-7B"], "vision_config": {}}
    assert model_from_config(config, "vlm").param_count() == get_model("Qwen2.5-7B").param_count()
    assert essentials(config) == CATALOGUE_CONFIGS["Qwen2.5-7B"]
    # Qwen2-VL keeps the LM's fields at the top level (the catalogue entry adds the ViT)
    flat = {**CATALOGUE_CONFIGS["Qwen2.5-7B"], "model_type": "qwen2_vl", "vision_config": {"depth": 32}}
    vl = get_model("Qwen2-VL-72B")
    lm = {**flat, "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64}
    lm |= {"num_key_value_heads": 8, "intermediate_size": 29568}
    assert model_from_config(lm, "vl").param_count() == vl.param_count() - vl.vision_params


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported (supported: llama,"),
        ({"hidden_size": None}, "field 'hidden_size' missing"),
        ({"num_hidden_layers": "28"}, "field 'num_hidden_layers' must be a positive integer, got '28'"),
        ({"num_hidden_layers": 0}, "field 'num_hidden_layers' must be a positive integer, got 0"),
        ({"vocab_size": True}, "field 'vocab_size' must be a positive integer, got True"),
        ({"hidden_size": 10**30}, "field 'hidden_size' = 10000000000000000... exceeds 2147483647"),
        ({"tie_word_embeddings": "no"}, "field 'tie_word_embeddings' must be true or false, got 'no'"),
        ({"num_key_value_heads": 5}, "'num_key_value_heads' = 5 does not divide num_attention_heads = 28"),
        ({"num_attention_heads": 27}, "field 'head_dim' missing"),
        (
            {
                "model_type": "qwen2_moe",
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 8,
            },
            "field 'shared_expert_intermediate_size' missing",
        ),
        (
            {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 9},
            "field 'num_experts_per_tok' = 9 exceeds num_local_experts = 8",
        ),
    ],
)
def test_a_bad_config_is_one_line_naming_file_and_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CATALOGUE_CONFIGS["Qwen2.5-7B"], **change}))
    with pytest.raises(ModelConfigError) as err:
        get_model(str(path))
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}: ") and message in text


def test_unreadable_configs(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    for path, message in (
        (bad, "not JSON"),
        (tmp_path / "missing.json", "no such file"),
    ):
        with pytest.raises(ValueError, match=message):
            get_model(str(path))
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        get_model(str(tmp_path))
    with pytest.raises(ValueError, match="or give a HF model directory"):
        get_model(str(tmp_path / "nothing-here"))  # neither a name nor a path


dense_configs = st.fixed_dictionaries(
    {
        "model_type": st.sampled_from(["llama", "qwen2", "qwen3", "mistral", "gemma"]),
        "num_hidden_layers": st.integers(1, 96),
        "hidden_size": st.sampled_from([512, 1024, 2048, 4096, 8192]),
        "num_attention_heads": st.sampled_from([8, 16, 32, 64]),
        "num_key_value_heads": st.sampled_from([1, 2, 4, 8]),
        "intermediate_size": st.integers(64, 40000),
        "vocab_size": st.integers(1000, 260000),
    },
    optional={"head_dim": st.sampled_from([64, 128, 256]), "tie_word_embeddings": st.booleans()},
)


@settings(max_examples=60, deadline=None)
@given(config=dense_configs, extra=st.dictionaries(st.sampled_from(["rope_theta", "torch_dtype"]), st.text()))
def test_what_a_trace_keeps_reads_back_to_the_same_model(
    config: dict[str, Any], extra: dict[str, str]
) -> None:
    """A trace keeps `essentials` of a config; that reads back to the same model, and more
    layers always cost more parameters and KV."""
    model = model_from_config({**config, **extra}, "m")
    assert model_from_config(essentials({**config, **extra}), "m") == model
    deeper = model_from_config({**config, "num_hidden_layers": config["num_hidden_layers"] + 1}, "m")
    assert deeper.param_count() > model.param_count()
    assert deeper.kv_bytes_per_token() > model.kv_bytes_per_token()


# ------------------------------------------------------------------- with a trace

SAMPLE = (
    Path(__file__).resolve().parents[2] / "traces" / "samples" / "efficientrollout-qwen7b-8k-6steps.parquet"
)


def _model_dir(root: Path, name: str, config: dict[str, Any]) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _makespan(*args: str) -> tuple[int, str, float | None]:
    r = CliRunner().invoke(main, ["replay", *args, "--policy", "verl", "--steps", "0"])
    if r.exit_code:
        return r.exit_code, r.output, None
    doc = json.loads(Path(args[args.index("--json") + 1]).read_text())
    return 0, r.output, doc["policies"]["verl"]["steps"][0]["rollout_makespan_s"]


def test_replay_prices_a_model_from_its_directory_as_the_catalogue_does(tmp_path: Path) -> None:
    """`--model DIR` with the catalogue model's config gives the catalogue's makespan; a
    deeper model of the same family takes longer."""
    same = _model_dir(tmp_path, "my-qwen-7b", CATALOGUE_CONFIGS["Qwen2.5-7B"])
    deeper = _model_dir(tmp_path, "my-qwen-9b", {**CATALOGUE_CONFIGS["Qwen2.5-7B"], "num_hidden_layers": 36})
    runs = {}
    for label, model in (("catalogue", "Qwen2.5-7B"), ("same", str(same)), ("deeper", str(deeper))):
        out = tmp_path / f"{label}.json"
        code, output, runs[label] = _makespan(str(SAMPLE), "--model", model, "--json", str(out))
        assert code == 0, output
    assert runs["same"] == runs["catalogue"]
    assert runs["deeper"] is not None and runs["catalogue"] is not None
    assert runs["deeper"] > runs["catalogue"]


def test_a_trace_carries_its_model(tmp_path: Path) -> None:
    """A trace whose model is outside the catalogue replays from its `model_config` with no
    flag; a broken one fails in one line naming the trace and the field."""
    trace = read_trace(SAMPLE)
    name, config = model_record(str(_model_dir(tmp_path, "my-qwen-7b", CATALOGUE_CONFIGS["Qwen2.5-7B"])))
    assert name == "my-qwen-7b" and config == CATALOGUE_CONFIGS["Qwen2.5-7B"]
    meta = dataclasses.replace(trace.meta, model=name, model_config=config)
    carried = write_trace(tmp_path / "carried.parquet", trace.df, meta, trace.lists)
    assert read_trace(carried).meta.model_config == config
    assert model_of_trace(read_trace(carried).meta, "t") == dataclasses.replace(
        get_model("Qwen2.5-7B"), name=name, hf_ids=()
    )
    code, output, makespan = _makespan(str(carried), "--json", str(tmp_path / "c.json"))
    _, _, expected = _makespan(str(SAMPLE), "--json", str(tmp_path / "s.json"))
    assert code == 0 and makespan == expected, output
    broken = dataclasses.replace(meta, model_config={**config, "hidden_size": -1})
    bad = write_trace(tmp_path / "broken.parquet", trace.df, broken, trace.lists)
    code, output, _ = _makespan(str(bad), "--json", str(tmp_path / "b.json"))
    assert code == 1
    line = f"trace {bad}: model_config: field 'hidden_size' must be a positive integer, got -1"
    assert line in output and len(output.strip().splitlines()) == 1


def test_a_trace_with_a_model_config_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    meta = TraceMeta(group_size=4, model="mine", model_config=[1, 2])  # type: ignore[arg-type]
    path = write_trace(tmp_path / "m.parquet", make_frame([10, 20, 30, 40]), meta)
    r = CliRunner().invoke(main, ["replay", str(path), "--cluster", "h100x8"])
    assert r.exit_code != 0 and "metadata model_config: list is not a JSON object" in r.output


def test_trace_import_records_a_models_config(tmp_path: Path) -> None:
    """`trace import --model DIR` records the directory's name and its config's fields."""
    table = tmp_path / "rollouts.parquet"
    rows = [
        {
            "step": 0,
            "prompt_id": p,
            "sample": i,
            "prompt_len": 100 + p,
            "response_len": 50 + 10 * i,
            "max_tokens": 512,
        }
        for p in range(4)
        for i in range(4)
    ]
    pd.DataFrame(rows).to_parquet(table)
    folder = _model_dir(
        tmp_path, "policy-ckpt-300", {**CATALOGUE_CONFIGS["Llama-3.1-8B"], "architectures": ["x"]}
    )
    out = tmp_path / "imported.parquet"
    r = CliRunner().invoke(
        main, ["trace", "import", "table", str(table), "-o", str(out), "--model", str(folder)]
    )
    assert r.exit_code == 0, r.output
    meta = read_trace(out).meta
    assert meta.model == "policy-ckpt-300" and meta.model_config == CATALOGUE_CONFIGS["Llama-3.1-8B"]
    catalogue = tmp_path / "catalogue.parquet"
    r = CliRunner().invoke(
        main, ["trace", "import", "table", str(table), "-o", str(catalogue), "--model", "llama-3.1-8b"]
    )
    assert r.exit_code == 0, r.output
    assert read_trace(catalogue).meta.model_config is None
    r = CliRunner().invoke(
        main,
        [
            "trace",
            "import",
            "table",
            str(table),
            "-o",
            str(tmp_path / "x.parquet"),
            "--model",
            str(tmp_path / "no.json"),
        ],
    )
    assert r.exit_code == 2 and "no such file" in r.output


def test_a_profile_of_the_model_under_another_name_is_accepted(tmp_path: Path) -> None:
    """A profile calibrated with `--model DIR` prices a replay of the same architecture under
    the catalogue's name (names differ, fields agree); another architecture is refused."""
    from simctl.sim.cluster import parse_cluster
    from simctl.sim.cost_model import CostModelError, load_cost_model

    folder = _model_dir(tmp_path, "renamed", CATALOGUE_CONFIGS["Qwen2.5-7B"])
    rows = [
        {
            "kind": "decode",
            "num_seqs": b,
            "new_tokens": b,
            "context_tokens": 1000 * b,
            "gamma": 0,
            "time_s": 0.01 + 1e-4 * b,
        }
        for b in (1, 8, 32)
    ]
    doc = {"format": "simctl-profile/1", "model": str(folder), "tp": 1, "kv_capacity_tokens": 100_000}
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({**doc, "measurements": rows}))
    cluster = parse_cluster("h100x8:tp1")
    assert load_cost_model(get_model("Qwen2.5-7B"), cluster, profile) is not None
    with pytest.raises(CostModelError, match="field 'model'"):
        load_cost_model(get_model("Llama-3.1-8B"), cluster, profile)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from(sorted(CATALOGUE_CONFIGS)),
    changes=st.dictionaries(
        st.sampled_from(["text_config", *sorted({k for c in CATALOGUE_CONFIGS.values() for k in c})]),
        json_values,
        max_size=3,
    ),
)
def test_any_config_reads_or_fails_in_one_line(base: str, changes: dict[str, Any]) -> None:
    """Whatever a config's fields hold, the reader gives a model whose counts are positive
    or one ModelConfigError line naming the source; never another exception."""
    try:
        model = model_from_config({**CATALOGUE_CONFIGS[base], **changes}, "m", source="cfg.json")
    except ModelConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("cfg.json: ")
        return
    assert model.param_count() > 0 and model.kv_bytes_per_token() > 0
    assert model.active_param_count() <= model.param_count()


def test_models_command_lists_the_catalogue_and_reads_a_directory(tmp_path: Path) -> None:
    from simctl.sim.models import MODELS

    listing = CliRunner().invoke(main, ["models"])
    assert listing.exit_code == 0
    assert {line.split()[0] for line in listing.output.splitlines()} == set(MODELS)
    folder = _model_dir(tmp_path, "my-moe", {**CATALOGUE_CONFIGS["Qwen3-235B-A22B"]})
    shown = CliRunner().invoke(main, ["models", str(folder)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("my-moe: 235B params, 22.2B active, 94 layers, 128 experts (top-8)")
    assert "expert FFN 1536, 94 expert layers, 0 dense" in shown.output
    bad = CliRunner().invoke(main, ["models", str(tmp_path / "nope.json")])
    assert bad.exit_code == 1 and bad.output.count("\n") == 1 and "no such file" in bad.output


def test_a_directory_decides_the_architecture_even_under_a_catalogue_name(tmp_path: Path) -> None:
    """A HF checkout of a catalogue model is that model (nothing to record); a fine-tune
    that changed the architecture under its base's name is its own config's model."""
    same = _model_dir(tmp_path, "Qwen2.5-7B", CATALOGUE_CONFIGS["Qwen2.5-7B"])
    assert get_model(str(same)) is get_model("Qwen2.5-7B")
    assert model_record(str(same)) == ("Qwen2.5-7B", None)
    (tmp_path / "sft").mkdir()
    grown = _model_dir(
        tmp_path / "sft", "Qwen2.5-7B", {**CATALOGUE_CONFIGS["Qwen2.5-7B"], "vocab_size": 160000}
    )
    assert get_model(str(grown)).vocab == 160000
    name, config = model_record(str(grown))
    assert name == "Qwen2.5-7B" and config is not None and config["vocab_size"] == 160000
    meta = TraceMeta(group_size=4, model=name, model_config=config)
    assert model_of_trace(meta, "t").vocab == 160000  # the trace's config, not the catalogue


def test_a_config_nested_too_deeply_names_the_file(tmp_path: Path) -> None:
    from simctl.sim.model_config import read_config_file

    (tmp_path / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ModelConfigError, match=r"config\.json: JSON nested too deeply"):
        read_config_file(tmp_path)


def test_a_directory_without_a_config_is_named_as_such(tmp_path: Path) -> None:
    """A model directory lacking config.json is said to lack it (it listed the catalogue)."""
    from simctl.sim.models import get_model

    with pytest.raises(ValueError) as info:
        get_model(str(tmp_path))
    assert (
        str(info.value) == f"model directory {tmp_path}: no config.json in it (a HF model directory has one)"
    )

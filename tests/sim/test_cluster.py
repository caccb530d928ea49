"""Cluster specs: names, TOML files, and one-line errors naming the bad field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simctl.sim.cluster import ClusterSpec, parse_cluster
from simctl.sim.hardware import get_gpu


@pytest.mark.parametrize(
    ("spec", "nodes", "per_node", "gpu", "tp", "workers"),
    [
        ("h100x512", 64, 8, "H100-SXM-80GB", 4, 128),
        ("h100x1024", 128, 8, "H100-SXM-80GB", 4, 256),
        ("a100x8", 1, 8, "A100-SXM-80GB", 4, 2),
        ("h200x256", 32, 8, "H200-SXM-141GB", 4, 64),
        ("h100x512:tp8", 64, 8, "H100-SXM-80GB", 8, 64),
        ("a100x8:tp1", 1, 8, "A100-SXM-80GB", 1, 8),
        ("H100X16:TP2", 2, 8, "H100-SXM-80GB", 2, 8),
        ("h100x4", 1, 4, "H100-SXM-80GB", 4, 1),
        ("a100x2", 1, 2, "A100-SXM-80GB", 2, 1),
        ("h100x1", 1, 1, "H100-SXM-80GB", 1, 1),
    ],
)
def test_parse_names(spec: str, nodes: int, per_node: int, gpu: str, tp: int, workers: int) -> None:
    c = parse_cluster(spec)
    assert (c.nodes, c.gpus_per_node, c.gpu.name, c.tp) == (nodes, per_node, gpu, tp)
    assert c.total_gpus == nodes * per_node and c.num_workers == workers
    assert c.gpu_mem_util == 0.9


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("h100x7x", "expected NAMExCOUNT[:tpN][:dpN][:fp8] or a .toml file"),
        ("h100", "expected NAMExCOUNT"),
        ("h100x12", "GPU count 12 must be a multiple of 8"),
        ("h100x0", "GPU count 0"),
        ("mi300xx8", "unknown GPU 'mi300x'"),
        ("h100x8:tp3", "tp3 does not divide gpus_per_node=8"),
        ("h100x16:tp16", "tp16 does not divide"),
        ("h800x256:dp24", "field 'dp'=24 does not divide the 256 GPUs of 32 nodes"),
        ("h800x256:dp12", "field 'dp'=12: a worker spanning nodes takes whole nodes of 8 GPUs"),
        ("h800x8:dp3", "field 'dp'=3 does not divide gpus_per_node=8"),
        ("h800x256:tp2:dp32", "field 'tp'=2 with 'dp'=32: data-parallel attention ranks run tp1"),
        ("h800x8:int4", "unknown option 'int4'; expected tpN, dpN, bf16 or fp8"),
        ("h800x8:dp2:dp4", "option 'dp' given twice"),
        ("h800x8:fp8:bf16", "option 'weights' given twice"),
        ("h800x8:dp0", "tp and dp must be positive"),
    ],
)
def test_bad_names(spec: str, fragment: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_cluster(spec)
    msg = str(err.value)
    assert fragment in msg and repr(spec) in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("spec", "nodes", "tp", "dp", "per_worker", "workers", "weights", "first_nodes"),
    [
        ("h800x256:dp32:fp8", 32, 1, 32, 32, 8, "fp8", [0, 4, 8]),
        ("h800x64:tp1:dp32:fp8", 8, 1, 32, 32, 2, "fp8", [0, 4]),
        ("h800x8:dp4", 1, 1, 4, 4, 2, "bf16", [0, 0]),
        ("h100x16:dp16:bf16", 2, 1, 16, 16, 1, "bf16", [0]),
        ("h100x16:tp8:fp8", 2, 8, 1, 8, 2, "fp8", [0, 1]),
        ("h100x16:fp8:tp2", 2, 2, 1, 2, 8, "fp8", [0, 0, 0]),
    ],
)
def test_parse_data_parallel_and_fp8_names(
    spec: str,
    nodes: int,
    tp: int,
    dp: int,
    per_worker: int,
    workers: int,
    weights: str,
    first_nodes: list[int],
) -> None:
    c = parse_cluster(spec)
    assert (c.nodes, c.tp, c.dp, c.gpus_per_worker, c.num_workers, c.weights) == (
        nodes,
        tp,
        dp,
        per_worker,
        workers,
        weights,
    )
    assert [c.worker_node(w) for w in range(len(first_nodes))] == first_nodes
    assert c.spans_nodes == (per_worker > 8)
    d = json.loads(json.dumps(c.to_dict()))
    assert (d["dp"], d["gpus_per_worker"], d["weights"]) == (dp, per_worker, weights)


def test_toml_data_parallel_worker(tmp_path: Path) -> None:
    body = 'nodes = 8\ngpus_per_node = 8\ngpu = "h800"\ndp = 32\nweights = "fp8"\n'
    c = parse_cluster(_write(tmp_path, body))
    assert (c.tp, c.dp, c.num_workers, c.weights, c.spans_nodes) == (1, 32, 2, "fp8", True)
    assert c == parse_cluster("h800x64:dp32:fp8")


@settings(max_examples=300, deadline=None)
@given(
    gpu=st.sampled_from(["h100", "h800", "a100", "h200"]),
    count=st.sampled_from([1, 2, 4, 8, 16, 24, 32, 64, 96, 256]),
    options=st.lists(
        st.sampled_from(["tp1", "tp2", "tp4", "tp8", "tp3", "dp2", "dp4", "dp8", "dp16", "dp32", "dp6"])
        | st.sampled_from(["fp8", "bf16", "fp4", "ep8", "tp", ""]),
        max_size=3,
    ),
)
def test_fuzz_name_specs(gpu: str, count: int, options: list[str]) -> None:
    """Any NAMExCOUNT:options spec parses into workers that tile the cluster, or fails with one
    line naming the spec."""
    spec = f"{gpu}x{count}" + "".join(f":{o}" for o in options)
    try:
        c = parse_cluster(spec)
    except ValueError as err:
        assert repr(spec) in str(err) and "\n" not in str(err)
        return
    assert c.num_workers * c.gpus_per_worker == c.total_gpus == count
    assert c.gpus_per_node % c.tp == 0  # tensor parallelism never crosses a node
    assert c.dp == 1 or c.tp == 1
    nodes = [c.worker_node(w) for w in range(c.num_workers)]
    assert nodes == sorted(nodes) and nodes[-1] < c.nodes
    if c.spans_nodes:
        assert c.gpus_per_worker % c.gpus_per_node == 0
    else:
        assert c.gpus_per_node % c.gpus_per_worker == 0


def _write(tmp_path: Path, body: str, name: str = "x.toml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_toml_with_overrides(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        'nodes = 4\ngpus_per_node = 8\ngpu = "H800"\ntp = 8\n'
        "gpu_mem_util = 0.85\nnvlink_gbps = 200\nrdma_gbps = 25.5\n",
    )
    c = parse_cluster(path)
    assert (c.nodes, c.tp, c.num_workers, c.gpu_mem_util) == (4, 8, 4, 0.85)
    assert c.gpu.nvlink_bw == pytest.approx(200e9) and c.gpu.rdma_bw == pytest.approx(25.5e9)
    assert c.gpu.hbm_bw == get_gpu("h800").hbm_bw
    assert parse_cluster(str(path)) == c


def test_toml_defaults(tmp_path: Path) -> None:
    c = parse_cluster(_write(tmp_path, 'nodes = 2\ngpus_per_node = 8\ngpu = "h100"\n'))
    assert (c.tp, c.gpu_mem_util, c.num_workers) == (4, 0.9, 4)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            'nodes = 1\ngpus_per_node = 8\ngpu = "h100"\ntp = 3\n',
            "cluster file x.toml: field 'tp'=3 does not divide gpus_per_node=8",
        ),
        ('gpus_per_node = 8\ngpu = "h100"\n', "missing field 'nodes'"),
        ('nodes = 0\ngpus_per_node = 8\ngpu = "h100"\n', "field 'nodes'=0"),
        ('nodes = "2"\ngpus_per_node = 8\ngpu = "h100"\n', "field 'nodes'='2'"),
        ('nodes = 1\ngpus_per_node = 8\ngpu = "tpu"\n', "field 'gpu'"),
        ('nodes = 1\ngpus_per_node = 8\ngpu = "h100"\ngpu_mem_util = 1.5\n', "field 'gpu_mem_util'=1.5"),
        ('nodes = 1\ngpus_per_node = 8\ngpu = "h100"\nspeed = 3\n', "unknown field 'speed'"),
        ('nodes = 1\ngpus_per_node = 8\ngpu = "h100"\nweights = "int4"\n', "field 'weights'='int4'"),
        ('nodes = 1\ngpus_per_node = 8\ngpu = "h100"\ndp = 0\n', "field 'dp'=0"),
        ('nodes = 3\ngpus_per_node = 8\ngpu = "h100"\ndp = 16\n', "field 'dp'=16 does not divide the 24"),
        ('nodes = 4\ngpus_per_node = 8\ngpu = "h100"\ntp = 2\ndp = 16\n', "field 'tp'=2 with 'dp'=16"),
        ("nodes = = 1\n", "cannot read"),
    ],
)
def test_bad_toml(tmp_path: Path, body: str, fragment: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_cluster(_write(tmp_path, body))
    msg = str(err.value)
    assert fragment in msg and "x.toml" in msg and "\n" not in msg


def test_missing_toml_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cluster file absent\.toml: cannot read"):
        parse_cluster(tmp_path / "absent.toml")


def test_dataclass_validation() -> None:
    with pytest.raises(ValueError, match="'tp'=3 does not divide gpus_per_node=8"):
        ClusterSpec(1, 8, get_gpu("h100"), tp=3)
    with pytest.raises(ValueError, match="'nodes'=0"):
        ClusterSpec(0, 8, get_gpu("h100"))
    with pytest.raises(ValueError, match="gpu_mem_util"):
        ClusterSpec(1, 8, get_gpu("h100"), gpu_mem_util=0.0)
    with pytest.raises(ValueError, match="'weights'='fp4' must be one of bf16, fp8"):
        ClusterSpec(1, 8, get_gpu("h100"), tp=1, weights="fp4")
    with pytest.raises(ValueError, match="'dp'=16: a worker spanning nodes takes whole nodes of 12"):
        ClusterSpec(4, 12, get_gpu("h100"), tp=1, dp=16)


def test_to_dict_is_json_provenance() -> None:
    c = parse_cluster("h100x512")
    d = json.loads(json.dumps(c.to_dict()))
    assert d["total_gpus"] == 512 and d["num_workers"] == 128 and d["tp"] == 4
    assert d["gpu"]["name"] == "H100-SXM-80GB" and d["source"] == "h100x512"


def test_a_gpu_outside_the_catalogue_from_its_datasheet(tmp_path: Path) -> None:
    """Datasheet overrides on a base GPU: the numbers land in the spec in SI units, the
    roofline follows them (more HBM bandwidth: a faster memory-bound decode step; fewer
    FLOPs: a slower compute-bound prefill; more HBM: more KV), and what a datasheet does
    not give stays the base's unless set."""
    from simctl.sim.cost_model import load_cost_model
    from simctl.sim.models import get_model

    body = 'nodes = 1\ngpus_per_node = 8\ngpu = "h100"\ntp = 1\n'
    custom = parse_cluster(
        _write(
            tmp_path,
            body + 'gpu_name = "H20"\nhbm_gb = 96\nhbm_tbps = 4.0\nbf16_tflops = 148\nfp8_tflops = 296\n',
        )
    )
    h100 = get_gpu("h100")
    g = custom.gpu
    assert g.name == "H20" and g.hbm_bytes == pytest.approx(96e9) and g.hbm_bw == pytest.approx(4.0e12)
    assert g.bf16_flops == pytest.approx(148e12) and g.fp8_flops == pytest.approx(296e12)
    assert (g.allreduce_latency_s, g.per_seq_overhead_s, g.nvlink_bw) == (
        h100.allreduce_latency_s,
        h100.per_seq_overhead_s,
        h100.nvlink_bw,
    )
    assert custom.to_dict()["gpu"]["name"] == "H20" and "H20" in custom.label
    model = get_model("qwen2.5-7b")
    mine, base = load_cost_model(model, custom), load_cost_model(model, parse_cluster("h100x8:tp1"))
    assert float(mine.iteration_time(1, 1, 1000.0)) < float(base.iteration_time(1, 1, 1000.0))
    assert float(mine.iteration_time(1, 8192, 4096.0)) > float(base.iteration_time(1, 8192, 4096.0))
    assert mine.kv_capacity_tokens > base.kv_capacity_tokens
    engine = parse_cluster(_write(tmp_path, body + "allreduce_us = 20\nper_seq_us = 30\n", "e.toml"))
    assert engine.gpu.allreduce_latency_s == pytest.approx(20e-6)
    assert engine.gpu.per_seq_overhead_s == pytest.approx(30e-6)
    assert engine.gpu.name == "H100-SXM-80GB (modified)"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("hbm_gb = -96\n", "field 'hbm_gb'=-96 must be a finite positive float"),
        ("bf16_tflops = 5e6\n", "field 'bf16_tflops'=5000000.0 is outside 1-1,000,000"),
        ("hbm_tbps = 1e-300\n", "field 'hbm_tbps'=1e-300 is outside 0.01-1,000"),
        ("nvlink_gbps = 1e-9\n", "field 'nvlink_gbps'=1e-09 GB/s is below 0.1 GB/s"),
        ("hbm_tbps = nan\n", "field 'hbm_tbps'=nan must be a finite positive float"),
        ("gpu_name = 3\n", "field 'gpu_name'=3 must be a string"),
        ('gpu_name = "x\\ny\\nz"\n', "field 'gpu_name' must be one printable line"),
        ("gpu_mem_util = 1e-300\n", "field 'gpu_mem_util'=1e-300 must be in 0.01-1"),
        ("hbm_gbs = 3\n", "unknown field 'hbm_gbs'"),
    ],
)
def test_bad_gpu_overrides_are_one_line(tmp_path: Path, extra: str, fragment: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_cluster(_write(tmp_path, 'nodes = 1\ngpus_per_node = 8\ngpu = "h100"\n' + extra))
    msg = str(err.value)
    assert fragment in msg and "x.toml" in msg and "\n" not in msg

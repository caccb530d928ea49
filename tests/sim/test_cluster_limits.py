"""Cluster specs that cannot be simulated are refused up front, one line each: non-finite or
absurd numbers in a cluster TOML, and clusters whose simulator state cannot fit in memory
(a cluster of 8 million GPUs used to die in a MemoryError traceback after a minute)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simctl.sim.cluster import BYTES_PER_WORKER, ClusterSpec, check_size, parse_cluster
from simctl.sim.hardware import get_gpu

BASE = 'nodes = 2\ngpus_per_node = 8\ngpu = "h100"\ntp = 4\n'


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("nvlink_gbps = inf", "'nvlink_gbps'=inf must be a finite positive float"),
        ("nvlink_gbps = nan", "'nvlink_gbps'=nan must be a finite positive float"),
        ("rdma_gbps = -5", "'rdma_gbps'=-5 must be a finite positive float"),
        ("rdma_gbps = 1e12", "'rdma_gbps'=1000000000000.0 GB/s is above 100,000 GB/s"),
        ("gpu_mem_util = nan", "'gpu_mem_util'=nan must be a finite positive float"),
    ],
)
def test_bad_numbers_in_a_cluster_file(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(BASE + extra + "\n")
    with pytest.raises(ValueError, match=r"c\.toml") as info:
        parse_cluster(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def _spec() -> ClusterSpec:
    return ClusterSpec(nodes=1_000_000, gpus_per_node=8, gpu=get_gpu("h100"), tp=4, source="h100x8000000")


def test_a_cluster_too_large_for_memory_is_refused_with_the_estimate() -> None:
    with pytest.raises(ValueError, match=r"8,000,000 GPUs are 2,000,000 workers, about 16\.4 GB"):
        check_size(_spec(), memory_bytes=1 << 34)


def test_parse_cluster_checks_the_size() -> None:
    with pytest.raises(ValueError, match="GB of simulator state"):
        parse_cluster("h100x" + str(8 * 10**9))


def test_size_limit_is_half_the_memory() -> None:
    spec = _spec()
    check_size(spec, memory_bytes=2 * spec.num_workers * BYTES_PER_WORKER)
    with pytest.raises(ValueError):
        check_size(spec, memory_bytes=2 * spec.num_workers * BYTES_PER_WORKER - 2)


def test_the_papers_largest_layout_fits() -> None:
    assert parse_cluster("h100x1024").num_workers == 256

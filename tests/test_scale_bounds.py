"""Bounds that scale: classes of alike ranks, per-class LPs and cuts where the exact LP is too big,
steps and latency from one source per class, and the lazy collectives that let `xccl bound` run on
rings too big to list every chunk of."""

from __future__ import annotations

import time

import pytest
from conftest import assert_one_line_error

import topologies as T
from synth.bounds import bandwidth as bw_module
from synth.bounds import bandwidth_bound_method, bandwidth_time_us, latency_time_us, steps_lower_bound
from synth.bounds import latency as lat_module
from synth.collectives import make_collective
from xccl.cli.output import slow_stage

SYMMETRIC = ["ring:8", "hypercube:3", "torus:3x3", "switch:6", "dgx-h100x2", "dgx-a100x2", "ndv2x2"]


def test_classes_of_alike_ranks():
    assert T.load("ring:8").rank_classes() == (tuple(range(8)),)
    assert T.load("dgx-h100x4").rank_classes() == (tuple(range(32)),)
    assert T.load("line:5").rank_classes() == ((0, 4), (1, 3), (2,))  # ends, inner, middle
    dgx1 = T.load("dgx1").rank_classes()
    assert sorted(r for cls in dgx1 for r in cls) == list(range(8))


@pytest.fixture
def scaled(monkeypatch):
    """The scale path on small topologies: no exact LP, one source per class."""
    monkeypatch.setattr(bw_module, "LP_COLUMNS", 0)
    monkeypatch.setattr(lat_module, "EXACT_RANKS", 0)
    bw_module._part_rates.cache_clear()
    bw_module._seconds_per_byte.cache_clear()
    bw_module._rounds_bound.cache_clear()
    yield
    bw_module._part_rates.cache_clear()
    bw_module._seconds_per_byte.cache_clear()
    bw_module._rounds_bound.cache_clear()


def _exact(name: str, coll: str) -> tuple:
    topo = T.load(name)
    c = make_collective(coll, topo.num_ranks)
    bw_module._part_rates.cache_clear()
    bw_module._seconds_per_byte.cache_clear()
    return bandwidth_time_us(topo, c, 1 << 30), steps_lower_bound(topo, c), latency_time_us(topo, c)


@pytest.mark.parametrize("name", SYMMETRIC)
@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_per_class_bounds_equal_the_exact_ones_on_symmetric_topologies(name, coll, request):
    exact = _exact(name, coll)
    request.getfixturevalue("scaled")
    topo = T.load(name)
    c = make_collective(coll, topo.num_ranks, lazy=True)
    assert bandwidth_bound_method(topo, c).startswith("flow LP per class")
    assert bandwidth_time_us(topo, c, 1 << 30) == pytest.approx(exact[0], rel=1e-6)
    assert steps_lower_bound(topo, c) == exact[1]
    assert latency_time_us(topo, c) == pytest.approx(exact[2])


@pytest.mark.parametrize("name", [*SYMMETRIC, "dgx1", "line:6", "star:5"])
@pytest.mark.parametrize("coll", ["alltoall", "broadcast", "gather", "scatter", "allgather"])
def test_cut_bounds_never_exceed_the_exact_bound(name, coll, request):
    exact = _exact(name, coll)
    request.getfixturevalue("scaled")
    topo = T.load(name)
    c = make_collective(coll, topo.num_ranks, lazy=True)
    assert bandwidth_time_us(topo, c, 1 << 30) <= exact[0] * (1 + 1e-9)
    assert steps_lower_bound(topo, c) <= exact[1]
    assert latency_time_us(topo, c) <= exact[2] + 1e-9


def test_alltoall_cut_is_the_nic_bound_of_a_cluster(scaled):
    topo = T.load("dgx-h100x4")  # 32 ranks: 8 per machine behind 8 NICs of 50 GB/s
    c = make_collective("alltoall", 32, lazy=True)
    # a machine receives 8 x 24 chunks through 8 x 50 GB/s: 1 GiB / 32 per chunk
    assert bandwidth_time_us(topo, c, 1 << 30) == pytest.approx((1 << 30) / 32 * 8 * 24 / (400 * 1e3))


def test_a_lazy_collective_lists_its_chunks_only_when_read():
    c = make_collective("allgather", 100_000, lazy=True)
    assert c.size_chunks == 100_000 and "chunks" not in c.__dict__
    with pytest.raises(Exception, match="XCCL_MAX_SLOTS"):
        c.chunks  # noqa: B018
    assert make_collective("alltoall", 4, lazy=True).chunks == make_collective("alltoall", 4).chunks


@pytest.mark.serial  # times itself: run alone (see Makefile)
def test_bound_on_a_ring_too_big_to_list_its_chunks(xccl):
    start = time.perf_counter()
    proc = xccl("bound", "-t", "ring:5000", "-C", "reducescatter", "--json")  # 25 M chunks
    assert proc.returncode == 0, proc.stderr
    assert time.perf_counter() - start < 30
    import json

    doc = json.loads(proc.stdout)
    assert doc["steps"] == 2500 and doc["rounds_per_chunk"] == "4999/2"
    assert "cuts" in doc["bandwidth_bound"]


def test_a_slow_stage_says_so_on_stderr(capsys):
    with slow_stage("quick"):
        pass
    with slow_stage("slow", after_s=0.01):
        time.sleep(0.1)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "xccl: slow ..." and err[1].startswith("xccl: slow: ")
    assert not any("quick" in line for line in err)


def test_a_ring_alltoall_too_big_is_refused_before_it_is_built(xccl):
    proc = xccl("baseline", "ring", "-t", "dgx-h100x64", "-C", "alltoall")  # 67 M sends
    assert_one_line_error(proc, "baseline ring", "alltoall on 512 ranks", "XCCL_MAX_BASELINE_SENDS")

"""Bandwidth bounds that stay fast at every size (part "bnd2"): the closed forms of rings, tori and
hypercubes, the shortest-path routing that gives the alltoall LP's rate without the LP, and the
multicast LP solved one destination at a time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import topologies as T
from synth.bounds import bandwidth as bw_module
from synth.bounds import bandwidth_bound_method, bandwidth_time_us
from synth.bounds import flow as flow_module
from synth.bounds.flow import flow_network, max_rate
from synth.bounds.routing import routed_rates
from synth.collectives import make_collective

GIB = 1 << 30
B_US = 25e3  # the families' 25 GB/s in bytes per microsecond


def _bound(name: str, coll: str) -> tuple[float, str]:
    topo = T.load(name)
    c = make_collective(coll, topo.num_ranks, lazy=True)
    return bandwidth_time_us(topo, c, GIB), bandwidth_bound_method(topo, c)


def _lp_rate(name: str, coll: str) -> float:
    """The multi-commodity flow LP itself (what the routing must equal where it is used)."""
    topo = T.load(name)
    c = make_collective(coll, topo.num_ranks)
    commodities, shared = bw_module._commodities(c)
    return max_rate(flow_network(topo, bw_module._capacities(topo, "GBps").as_dict()), commodities, shared)


@pytest.mark.parametrize(
    ("name", "degree"), [("ring:9", 2), ("torus:4x4", 4), ("torus:5x5", 4), ("hypercube:4", 4), ("hypercube:6", 6)]
)
def test_allgather_on_a_regular_family_is_the_degree_bound(name, degree):
    n = T.load(name).num_ranks
    time_us, _ = _bound(name, "allgather")
    assert time_us == pytest.approx((n - 1) / n * GIB / (degree * B_US), rel=1e-9)  # (n-1)/n M / (k B)


@pytest.mark.parametrize(
    ("name", "closed_us"),
    [
        ("ring:8", GIB * 8 / (8 * B_US)),  # M n / (8 B): the ring's bisection
        ("ring:64", GIB * 64 / (8 * B_US)),
        ("torus:4x4", GIB * 4 / (8 * B_US)),  # M N / (8 B) on an N x N torus
        ("torus:8x8", GIB * 8 / (8 * B_US)),
        ("hypercube:4", GIB / (2 * B_US)),  # M / (2 B): the bisection of n/2 links
        ("hypercube:7", GIB / (2 * B_US)),
    ],
)
def test_alltoall_on_a_symmetric_family_is_its_closed_form_without_an_lp(name, closed_us, monkeypatch):
    def no_lp(*args, **kwargs):
        raise AssertionError("the multi-commodity LP ran")

    monkeypatch.setattr(bw_module, "max_rate", no_lp)  # hypercube:7 took over 5 minutes in it
    bw_module._part_rates.cache_clear()
    time_us, how = _bound(name, "alltoall")
    bw_module._part_rates.cache_clear()
    assert time_us == pytest.approx(closed_us, rel=1e-12)
    assert how == bw_module.MET


@pytest.mark.parametrize("name", ["ring:6", "torus:4x4", "hypercube:3", "dgx-h100x2", "ndv2x2"])
def test_the_routing_rate_is_the_lp_rate_where_it_is_used(name):
    topo = T.load(name)
    c = make_collective("alltoall", topo.num_ranks)
    assert bandwidth_bound_method(topo, c) == bw_module.MET
    rate = bw_module._part_rates(topo, "alltoall", topo.num_ranks, None, "GBps")[0][1]
    assert rate == pytest.approx(_lp_rate(name, "alltoall"), rel=1e-9)


@pytest.mark.parametrize("name", ["torus:4x8", "line:6", "star:5", "dgx1"])
def test_the_routing_brackets_the_lp_and_the_lp_runs_where_they_differ(name):
    topo = T.load(name)
    c = make_collective("alltoall", topo.num_ranks)
    commodities, _ = bw_module._commodities(c)
    lower, upper = routed_rates(flow_network(topo, bw_module._capacities(topo, "GBps").as_dict()), commodities)
    exact = _lp_rate(name, "alltoall")
    assert lower <= exact * (1 + 1e-9) and exact <= upper * (1 + 1e-9)
    if bandwidth_bound_method(topo, c) == "flow LP":
        rate = bw_module._part_rates(topo, "alltoall", topo.num_ranks, None, "GBps")[0][1]
        assert rate == pytest.approx(exact, rel=1e-9)


def test_the_multicast_lp_is_the_least_of_its_destinations(monkeypatch):
    topo = T.load("dgx1")
    arcs = flow_network(topo, bw_module._capacities(topo, "GBps").as_dict())
    commodities = [{s: 1.0 for s in range(8) if s != d} | {d: -7.0} for d in range(8)]
    solved = []
    real = flow_module._flow_rows

    def count(arcs, commodities, shared, index):
        solved.append(len(commodities))
        return real(arcs, commodities, shared, index)

    monkeypatch.setattr(flow_module, "_flow_rows", count)
    joint = min(max_rate(arcs, [one], shared=False) for one in commodities)
    solved.clear()
    assert max_rate(arcs, commodities, shared=False) == joint
    assert solved == [1] * 8  # one single-commodity LP per destination


@pytest.mark.slow
def test_hypercube_11_allgather_bound_finishes():
    """The per-class LP of hypercube:11 (2,048 rows, 22,529 columns) ran past 5 minutes in the dual
    simplex; the interior point solves it in about a second."""
    proc = subprocess.run(
        [sys.executable, "-m", "xccl.cli.main", "bound", "-t", "hypercube:11", "-C", "allgather", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["rows"][-1]  # 1 GiB
    assert row["bandwidth_us"] == pytest.approx(2047 / 2048 * GIB / (11 * B_US), rel=1e-9)


def test_the_sweep_benchmark_times_one_case():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bound_sweep.py"
    spec = importlib.util.spec_from_file_location("bound_sweep", path)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    row = sweep.run_case("ring:8", "alltoall", 60, 8)
    assert row["stopped"] == "" and row["how"] == bw_module.MET
    assert row["bound_us"] == pytest.approx(GIB * 8 / (8 * B_US), rel=1e-12)
    assert row["wall_s"] > 0 and row["peak_MB"] > 0
    assert "ring:8" in sweep._table([row])

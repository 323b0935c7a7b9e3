"""Lower bounds (steps, rounds per chunk, GB/s min-cut) and the cost models."""

from __future__ import annotations

from fractions import Fraction

import pytest

import topologies as T
from synth.baselines import make_baseline
from synth.bounds import bandwidth_time_us, lower_bound_us, rounds_per_chunk_bound, steps_lower_bound
from synth.collectives import make_collective
from synth.cost import link_bound_us, sccl_cost, simulate
from synth.timing import IDEAL, PROTOCOLS, model_params


def test_dgx1_allgather_bounds():
    dgx1 = T.load("dgx1")
    ag = make_collective("allgather", 8)
    assert steps_lower_bound(dgx1, ag) == 2
    assert rounds_per_chunk_bound(dgx1, ag) == Fraction(7, 6)
    assert rounds_per_chunk_bound(dgx1, make_collective("reducescatter", 8)) == Fraction(7, 6)


@pytest.mark.parametrize("n", range(2, 9))
def test_ring_allgather_bounds(n):
    ring = T.ring(n)
    ag = make_collective("allgather", n)
    assert steps_lower_bound(ring, ag) == n // 2
    assert rounds_per_chunk_bound(ring, ag) == Fraction(n - 1, 2)


def test_dgx1_alltoall_bound_is_the_bisection():
    # 16 chunks must cross between the two sockets over 6 NVLinks each way
    assert rounds_per_chunk_bound(T.load("dgx1"), make_collective("alltoall", 8)) == Fraction(8, 3)


def test_min_cut_bound_of_two_ndv2_machines_is_the_nic():
    topo = T.load("ndv2x2")
    size = 1 << 30
    t = bandwidth_time_us(topo, make_collective("allgather", 16), size)
    assert size / t / 1e3 == pytest.approx(25.0)  # 12.5 GB/s NIC per machine, half the data crosses it


def test_min_cut_bound_of_eight_a100_machines():
    topo = T.load("dgx-a100x8")
    t = bandwidth_time_us(topo, make_collective("allgather", 64), 1 << 30)
    assert (1 << 30) / t / 1e3 == pytest.approx(64 * 200 / 56)  # the node cut (ForestColl's optimum)


def test_allreduce_bound_is_reducescatter_plus_allgather():
    topo = T.switch(8)
    size = 1 << 20
    ar = bandwidth_time_us(topo, make_collective("allreduce", 8), size)
    ag = bandwidth_time_us(topo, make_collective("allgather", 8), size)
    assert ar == pytest.approx(2 * ag)


@pytest.mark.parametrize("n", [3, 5, 8])
def test_simulated_ring_allgather_matches_closed_form(n):
    bw, alpha = 25.0, 0.7
    topo = T.ring(n, bandwidth_GBps=bw, alpha_us=alpha)
    algo = make_baseline("ring", topo, make_collective("allgather", n))
    for size in (1024, 1 << 20, 1 << 30):
        expected = (n - 1) * (alpha + size / (n * bw * 1e3))
        result = simulate(algo, topo, size, IDEAL)
        assert result.time_us == pytest.approx(expected, rel=1e-9)
        assert result.algbw_GBps == pytest.approx(size / expected / 1e3)
        assert result.busbw_GBps == pytest.approx(result.algbw_GBps * (n - 1) / n)


def test_sccl_cost_is_steps_alpha_plus_rounds_per_chunk():
    topo = T.ring(4)
    algo = make_baseline("ring", topo, make_collective("allgather", 4))
    cost = sccl_cost(algo, topo, 4 << 20)
    assert cost.latency_us == pytest.approx(3 * 0.7)
    assert cost.bandwidth_us == pytest.approx(3 * (1 << 20) / 25e3)


@pytest.mark.parametrize("name", ["dgx1", "ring:6", "switch:8", "ndv2x2", "dgx2x2"])
@pytest.mark.parametrize("kind", ["ring", "bidir-ring"])
def test_no_baseline_beats_the_lower_bound(name, kind):
    topo = T.load(name)
    n = topo.num_ranks
    algo = make_baseline(kind, topo, make_collective("allgather", n, 2))
    for size in (1024, 1 << 20, 1 << 30):
        assert simulate(algo, topo, size).time_us >= lower_bound_us(topo, algo.collective, size) * (1 - 1e-9)


@pytest.mark.parametrize("name", ["dgx1", "ring:6", "switch:8", "ndv2x2", "dgx2x2"])
@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_the_link_bound_of_a_schedule_bounds_its_time_and_no_schedule_beats_it(name, coll):
    # the busiest edge's bytes at line rate (what runtime.choice.faster_protocol rules a protocol
    # out by, where it took the min-cut bound's LPs): no model runs the schedule faster than it
    # over its rate, and it is never below the bound every schedule of the collective meets
    topo = T.load(name)
    n = topo.num_ranks
    algo = make_baseline("ring", topo, make_collective(coll, n, n if coll == "allreduce" else 2))
    models = (IDEAL, *(model_params("calibrated", p) for p in PROTOCOLS))
    for size in (1024, 1 << 20, 1 << 30):
        bound = link_bound_us(algo, topo, size)
        assert bound >= bandwidth_time_us(topo, algo.collective, size) * (1 - 1e-9)
        for p in models:
            assert simulate(algo, topo, size, p).time_us >= bound / p.rate_fraction * (1 - 1e-9)


def test_the_link_bound_of_a_ring_allgather_is_its_busiest_link():
    topo = T.ring(5, bandwidth_GBps=25.0, alpha_us=0.7)
    algo = make_baseline("ring", topo, make_collective("allgather", 5))
    assert link_bound_us(algo, topo, 1 << 30) == pytest.approx(4 * (1 << 30) / (5 * 25e3), rel=1e-12)

"""SMT synthesis reproduces the known answers (SCCL's paper and simple topologies)."""

from __future__ import annotations

import pytest

from synth.bounds import rounds_per_chunk_bound, steps_lower_bound
from synth.collectives import make_collective
from synth.smt import least_steps, pareto_front, solve_instance
from topologies import load


def check(outcome, topo, steps, rounds, chunks):
    """A satisfiable answer is a verified algorithm of exactly the instance asked."""
    assert outcome.word == "sat", outcome.message()
    algo = outcome.algorithm
    algo.verify(topo)
    assert (algo.num_steps, algo.rounds, algo.chunks) == (steps, rounds, chunks)
    return algo


def test_dgx1_allgather_needs_two_steps():
    topo = load("dgx1")
    coll = make_collective("allgather", 8, 1)
    assert solve_instance(topo, coll, 1).word == "unsat"
    check(solve_instance(topo, coll, 2), topo, 2, 2, 1)


@pytest.mark.parametrize("name", ["allgather", "reducescatter"])
def test_dgx1_front_is_sccls(name):
    """{(S=2, R=3, C=2), (S=3, R=7, C=6)}, and the walk ends because 7/6 meets the bound."""
    topo = load("dgx1")
    front = pareto_front(topo, name)
    points = [(a.num_steps, a.rounds, a.chunks) for a in front.algorithms]
    assert points == [(2, 3, 2), (3, 7, 6)]
    assert front.stop == "bandwidth optimal" and front.complete
    assert front.rounds_per_chunk_bound == rounds_per_chunk_bound(topo, make_collective(name, 8, 1))
    for algo in front.found:
        algo.verify(topo)
        assert algo.collective.name == name
    for a in front.algorithms:  # no point beats a front point in both measures
        for b in front.found:
            assert not (b.num_steps <= a.num_steps and b.rounds_per_chunk < a.rounds_per_chunk)
            assert not (b.num_steps < a.num_steps and b.rounds_per_chunk <= a.rounds_per_chunk)
    if name == "reducescatter":
        assert all(o.via and "dual" in o.via for o in front.outcomes)


def test_dgx1_alltoall_needs_three_steps_with_one_chunk():
    topo = load("dgx1")
    result = least_steps(topo, make_collective("alltoall", 8, 1))
    assert result.algorithm is not None and result.algorithm.num_steps == 3
    assert result.proven and result.algorithm.provenance.optimal
    assert [o.word for o in result.outcomes] == ["unsat"]  # S = 2 (the hop bound) is impossible
    result.algorithm.verify(topo)


@pytest.mark.parametrize("n", range(2, 9))
def test_ring_allgather_least_steps_is_half_the_ring(n):
    topo = load(f"ring:{n}")
    result = least_steps(topo, make_collective("allgather", n, 1))
    assert result.algorithm.num_steps == n // 2 and result.proven
    result.algorithm.verify(topo)


@pytest.mark.parametrize("n", range(2, 7))
def test_fully_connected_allgather_needs_one_step(n):
    topo = load(f"fully-connected:{n}")
    result = least_steps(topo, make_collective("allgather", n, 1))
    assert result.algorithm.num_steps == 1
    result.algorithm.verify(topo)


@pytest.mark.parametrize(
    "name, steps, rounds",
    [("broadcast", 2, 2), ("reduce", 2, 2), ("gather", 2, 2), ("scatter", 2, 3), ("reducescatter", 2, 3)],
)
def test_other_collectives_on_dgx1(name, steps, rounds):
    topo = load("dgx1")
    coll = make_collective(name, 8, 1)
    assert steps_lower_bound(topo, coll) == steps
    algo = check(solve_instance(topo, coll, steps, rounds), topo, steps, rounds, 1)
    if coll.combining:
        assert algo.provenance.via and "inverted" in algo.provenance.via


def test_allreduce_direct_and_composed():
    """Recursive doubling on a 4-ring (2 steps, partial sums travel) and DGX-1's 2+2 composition."""
    ring = load("ring:4")
    direct = solve_instance(ring, make_collective("allreduce", 4, 1), 2, 2, allreduce="direct")
    check(direct, ring, 2, 2, 1)
    assert "direct" in direct.via and direct.algorithm.provenance.via == direct.via
    assert (
        solve_instance(ring, make_collective("allreduce", 4, 1), 1, 1, allreduce="direct").word == "unsat"
    )
    dgx1 = load("dgx1")
    composed = solve_instance(dgx1, make_collective("allreduce", 8, 16), 4, 6)
    algo = check(composed, dgx1, 4, 6, 16)
    assert algo.provenance.via == "reducescatter + allgather"
    no = solve_instance(dgx1, make_collective("allreduce", 8, 16), 3, 6)
    assert no.word == "unsat" and no.scope and "composition" in no.scope


def test_allreduce_front_composes_the_two_fronts():
    topo = load("ring:4")
    front = pareto_front(topo, "allreduce")
    assert [(a.num_steps, a.rounds, a.chunks) for a in front.algorithms] == [(4, 6, 8)]
    assert front.stop == "bandwidth optimal"
    for algo in front.found:
        algo.verify(topo)
        assert algo.provenance.via == "reducescatter + allgather"

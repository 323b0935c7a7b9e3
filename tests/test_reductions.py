"""Reductions (synth.reductions): apply gives simpler problems, invert maps their solutions back to
verified solutions of the original; every front end goes through them."""

from __future__ import annotations

import doctest

import pytest

import synth.reductions
import topologies as T
from sketches import Sketch
from synth.algorithm import Algorithm, Send, Step
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.milp import synthesize
from synth.reductions import (
    DUAL,
    QUOTIENT,
    REDUCE_BROADCAST,
    REDUCESCATTER_ALLGATHER,
    Problem,
    ReductionError,
    Solution,
    compose,
    invert,
)
from synth.timing import DEFAULT
from topologies.model import Link, Topology


def test_module_doctest():
    result = doctest.testmod(synth.reductions)
    assert result.attempted > 0 and result.failed == 0


def test_inversion_and_composition_give_a_verified_allreduce():
    topo = T.load("dgx1")
    ag = make_baseline("ring", topo.reverse(), make_collective("allgather", 8))
    rs = invert(ag, make_collective("reducescatter", 8))
    rs.verify(topo)
    assert all(s.op == "reduce" for st in rs.steps for s in st.sends)
    ar = compose(
        rs,
        make_baseline("ring", topo, make_collective("allgather", 8)),
        make_collective("allreduce", 8, 8),
        "rs + ag",
    )
    ar.verify(topo)
    assert ar.num_steps == 14 and ar.provenance.via == "rs + ag"


def _asymmetric_ring(n: int = 4) -> Topology:
    """A ring whose clockwise links are fast and counter-clockwise ones slow."""
    links = {}
    for r in range(n):
        links[(r, (r + 1) % n)] = Link(100.0, 1.0)
        links[((r + 1) % n, r)] = Link(5.0, 20.0)
    return Topology.build("asym-ring", n, links)


@pytest.mark.parametrize(
    ("name", "root", "dual", "op"),
    [
        ("reducescatter", None, "allgather", "reduce"),
        ("reduce", 2, "broadcast", "reduce"),
        ("gather", 1, "scatter", "copy"),
    ],
)
def test_dual_runs_the_dual_backwards_on_the_reversed_topology(name, root, dual, op):
    topo = _asymmetric_ring()
    reduced = DUAL.apply(Problem(topo, make_collective(name, 4, 1, root)))
    (sub,) = reduced.subproblems
    assert sub.collective == make_collective(dual, 4, 1, root)
    assert sub.topology.link(1, 0) == topo.link(0, 1)  # every link turned around
    solved = make_baseline("ring", sub.topology, sub.collective)
    algo = reduced.invert([Solution(solved)]).algorithm  # verified on the original topology
    assert algo.collective == make_collective(name, 4, 1, root)
    turned = [(s.chunk, s.dst, s.src) for st in reversed(solved.steps) for s in st.sends]
    assert sorted(turned) == sorted((s.chunk, s.src, s.dst) for st in algo.steps for s in st.sends)
    assert {s.op for st in algo.steps for s in st.sends} == {op}
    assert algo.provenance.via == f"inverted {dual} on the reversed topology"


def test_dual_refuses_what_has_none():
    problem = Problem(T.ring(4), make_collective("allgather", 4))
    assert not DUAL.accepts(problem)
    with pytest.raises(ReductionError, match="allgather has no dual"):
        DUAL.apply(problem)


def test_inverting_a_timed_dual_mirrors_it_in_time():
    topo = T.ring(3)
    reduced = DUAL.apply(Problem(topo, make_collective("reduce", 3, 1, 0)))
    (sub,) = reduced.subproblems
    sends = (Send(0, 0, 1, start_us=0.0), Send(0, 0, 2, start_us=1.0))
    dual = Algorithm(sub.collective, topo.name, (Step(1, sends),))
    finish = {(0, 0, 1): 4.0, (0, 0, 2): 6.0}
    primal = reduced.invert([Solution(dual, makespan_us=6.0, finish_us=finish)])
    starts = [(s.src, s.dst, s.start_us) for st in primal.algorithm.steps for s in st.sends]
    assert starts == [(2, 0, 0.0), (1, 0, 2.0)]  # 6 - 6 and 6 - 4, listed by start
    assert primal.makespan_us == 6.0


def test_an_inverted_milp_schedule_is_causal_on_links_that_differ_by_direction():
    """Each send of the mirrored schedule starts after its data arrived, timed on the link it
    uses (the dual's timing used the opposite link, so the slow direction came out late)."""
    topo = _asymmetric_ring()
    size = 1 << 20
    result = synthesize(topo, "reducescatter", Sketch("plain"), size_bytes=size)  # calibrated model
    logical = topo.logical()
    piece = size / result.algorithm.collective.size_chunks
    arrival: dict[tuple[int, int], float] = {}
    for st in result.algorithm.steps:
        for s in st.sends:
            assert s.start_us >= arrival.get((s.src, s.chunk), 0.0) - 1e-9
            end = s.start_us + DEFAULT.delay_us(logical.links[(s.src, s.dst)], piece)
            arrival[(s.dst, s.chunk)] = max(arrival.get((s.dst, s.chunk), 0.0), end)
    assert max(arrival.values()) == pytest.approx(result.makespan_us)


def test_allreduce_composes_two_subproblems_at_a_common_chunk_count():
    topo = T.ring(4)
    reduced = REDUCESCATTER_ALLGATHER.apply(Problem(topo, make_collective("allreduce", 4, 4)))
    assert [p.collective for p in reduced.subproblems] == [
        make_collective("reducescatter", 4, 1),
        make_collective("allgather", 4, 1),
    ]
    rs = make_baseline("ring", topo, make_collective("reducescatter", 4, 1))
    ag = make_baseline("ring", topo, make_collective("allgather", 4, 2))
    algo = reduced.invert([Solution(rs), Solution(ag)]).algorithm  # verified
    assert algo.collective == make_collective("allreduce", 4, 8)
    assert algo.rounds == 2 * rs.rounds + ag.rounds  # the reducescatter's chunks split in two
    assert algo.provenance.via == "reducescatter + allgather"


def test_timed_parts_run_one_after_the_other():
    topo = T.ring(4)
    reduced = REDUCE_BROADCAST.apply(Problem(topo, make_collective("allreduce", 4, 1)))
    first, second = (make_baseline("ring", topo, p.collective).with_provenance() for p in reduced.subproblems)
    timed = Algorithm(
        second.collective,
        second.topology,
        tuple(
            Step(st.rounds, tuple(Send(s.chunk, s.src, s.dst, s.op, 1.0) for s in st.sends))
            for st in second.steps
        ),
    )
    whole = reduced.invert([Solution(first, makespan_us=10.0), Solution(timed, makespan_us=5.0)])
    assert whole.makespan_us == 15.0
    tail = whole.algorithm.steps[first.num_steps :]
    assert {s.start_us for st in tail for s in st.sends} == {11.0}


def test_allreduce_chunks_must_split_among_the_ranks():
    problem = Problem(T.ring(4), make_collective("allreduce", 4, 3))
    assert not REDUCESCATTER_ALLGATHER.accepts(problem)
    with pytest.raises(ReductionError, match="divisible by 4 ranks, got 3"):
        REDUCESCATTER_ALLGATHER.apply(problem)


def test_invert_takes_one_solution_per_subproblem():
    topo = T.ring(4)
    reduced = REDUCESCATTER_ALLGATHER.apply(Problem(topo, make_collective("allreduce", 4, 4)))
    ag = make_baseline("ring", topo, make_collective("allgather", 4))
    with pytest.raises(ReductionError, match="expected 2 solution"):
        reduced.invert([Solution(ag)])


def test_the_quotient_completes_every_orbit():
    """One send per orbit of a symmetric algorithm -> all of them: the direct allgather on 4 fully
    connected ranks is one orbit under their 24 permutations."""
    topo = T.load("fully-connected:4")
    full = make_baseline("direct", topo, make_collective("allgather", 4))
    reduced = QUOTIENT.apply(Problem(topo, full.collective))
    (quotient,) = reduced.subproblems
    assert quotient.symmetry is not None and not quotient.symmetry.trivial
    kept = tuple(Step(st.rounds, st.sends[:1]) for st in full.steps)
    completed = reduced.invert([Solution(Algorithm(full.collective, topo.name, kept))]).algorithm
    assert [set(st.sends) for st in completed.steps] == [set(st.sends) for st in full.steps]


def test_baseline_gather_is_the_inverted_scatter():
    algo = make_baseline("ring", T.ring(5), make_collective("gather", 5, 1, 2))
    assert algo.provenance.via == "inverted scatter on the reversed topology"
    assert {s.op for st in algo.steps for s in st.sends} == {"copy"}

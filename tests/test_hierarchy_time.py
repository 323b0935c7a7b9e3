"""simulate_composition: the engine's time of a composed allgather from its parts equals the
engine's run of the whole Algorithm (synth.cost.simulate), whichever runs the parts allow."""

from __future__ import annotations

import functools

import pytest

from synth.algorithm import Algorithm
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.cost import simulate
from synth.reductions.base import Problem, Solution
from synth.reductions.hierarchy import HIERARCHY, Machines, compose, machine_graph, machine_topology, to_steps
from synth.reductions.hierarchy_time import simulate_composition
from synth.timing import model_params
from topologies.model import Link, Topology
from topologies.registry import load

SIZES = (1024.0, float(1 << 20), float(1 << 30))
MODELS = ("ideal", "calibrated")


@functools.cache
def _parts(name: str, within: str, between: str = "trees"):
    """The topology, the verified Algorithm ``invert`` makes and the Composition of the same parts."""
    from synth.trees.synthesis import synthesize

    topo = load(name)
    reduced = HIERARCHY.apply(Problem(topo, make_collective("allgather", topo.num_ranks)))
    outer, inner = reduced.subproblems

    def part(problem: Problem, how: str) -> Algorithm:
        if how == "trees":  # sized small: few chunks, a fast test
            return synthesize(problem.topology, "allgather", size_bytes=float(1 << 16)).algorithm
        if how == "smt":
            from synth.smt import least_steps

            return least_steps(problem.topology, problem.collective, time_limit_s=60).algorithm
        return make_baseline(
            how, problem.topology, make_collective("allgather", problem.topology.num_ranks, 2)
        )

    first, second = part(outer, between), part(inner, within)
    algo = reduced.invert([Solution(first), Solution(second)]).algorithm
    return topo, algo, compose(first, second, reduced.data)


def _both(topo, algo, composition, size, model):
    params = model_params(model)
    lines: list[str] = []
    got = simulate_composition(composition, topo, size, params, provenance=algo.provenance, log=lines.append)
    return simulate(algo, topo, size, params), got, lines[0]


def _assert_equal(want, got):
    assert got.time_us == pytest.approx(want.time_us, rel=1e-9, abs=1e-12)
    assert (got.size_bytes, got.model) == (want.size_bytes, want.model)
    assert got.busbw_GBps == pytest.approx(want.busbw_GBps, rel=1e-9)


@pytest.mark.parametrize(
    ("name", "within", "path"),
    [
        ("dgx-h100x2", "trees", "one rail's"),
        ("dgx-h100x3", "ring", "one rail's"),
        pytest.param("dgx-h100x4", "smt", "one rail's", marks=pytest.mark.slow),  # the SMT solve: 6 s
        ("dgx-a100x3", "ring", "one rail's"),
        ("ndv2x2", "trees", "all 8 rails'"),  # one NIC per machine: the rails meet
    ],
)
def test_the_parts_time_what_the_engine_times_on_the_whole(name, within, path):
    topo, algo, composition = _parts(name, within)
    for size in SIZES:
        for model in MODELS:
            want, got, how = _both(topo, algo, composition, size, model)
            _assert_equal(want, got)
            assert path in how and "1 machine run(s)" in how, how


def test_calls_merged_by_a_baseline_are_timed_as_the_whole():
    """Both parts one baseline: a step's sends on one connection are one call (when sends cost)."""
    topo, algo, composition = _parts("dgx-h100x2", "ring", between="ring")
    assert algo.provenance.method == "baseline:ring"
    want, got, _ = _both(topo, algo, composition, float(1 << 20), "calibrated")
    _assert_equal(want, got)
    merged = simulate_composition(composition, topo, float(1 << 20), model_params("calibrated"))
    assert merged.time_us != pytest.approx(got.time_us, rel=1e-6)  # the provenance mattered here


def test_every_machine_runs_alike_on_a_symmetric_network():
    """ordered's machine-relative ties: one inner run stands for all machines (sorted by absolute
    chunk, machine 0 broke ties differently at the wrap and ran on its own)."""
    topo, algo, composition = _parts("dgx-h100x4", "ring")
    want, got, how = _both(topo, algo, composition, float(1 << 30), "ideal")
    _assert_equal(want, got)
    assert "1 machine run(s)" in how, how


def test_transfers_within_the_tolerance_run_whole():
    topo, algo, composition = _parts("dgx-h100x2", "ring")
    want, got, how = _both(topo, algo, composition, 1e-4, "ideal")
    _assert_equal(want, got)
    assert how.startswith("composition timed: one run of all") and "tolerance" in how, how


def _two_by_two(shared: str) -> Topology:
    """2 machines of 2 ranks, each rank on the network switch. ``shared="machines"``: ranks 0, 3 on
    switch s1, ranks 1, 2 on s2 (s1 <-> s2), so both machines' inner routes cross s1 <-> s2;
    ``shared="rail"``: each machine's ranks meet at a PCIe switch that is also their way out."""
    fast, slow = Link(50.0, 0.5), Link(25.0, 1.0)
    links: dict = {}
    if shared == "machines":
        switches = {"net": "network", "s1": "switch", "s2": "switch"}
        for r, sw in ((0, "s1"), (3, "s1"), (1, "s2"), (2, "s2")):
            links[(r, sw)] = links[(sw, r)] = fast
            links[(r, "net")] = links[("net", r)] = slow
        links[("s1", "s2")] = links[("s2", "s1")] = fast
    else:
        switches = {"net": "network", "p0": "switch", "p1": "switch", "n0": "nic", "n1": "nic"}
        for m in (0, 1):
            for r in (2 * m, 2 * m + 1):
                links[(r, f"p{m}")] = links[(f"p{m}", r)] = fast
            links[(f"p{m}", f"n{m}")] = links[(f"n{m}", f"p{m}")] = fast
            links[(f"n{m}", "net")] = links[("net", f"n{m}")] = slow
    return Topology.build(f"two-by-two-{shared}", 4, links, switches, (0, 0, 1, 1))


@pytest.mark.parametrize(
    ("shared", "path"), [("machines", "machines share an edge"), ("rail", "one run of all")]
)
def test_parts_that_meet_run_together(shared, path):
    topo = _two_by_two(shared)
    machines = Machines(2, 2, Link(25.0, 1.0), Link(25.0, 1.0))
    first = make_baseline("ring", machine_graph(topo, machines), make_collective("allgather", 2, 2))
    second = make_baseline("ring", machine_topology(topo, machines), make_collective("allgather", 2, 4))
    composition = compose(first, second, machines)
    algo = Algorithm(
        make_collective("allgather", 4, composition.chunks), topo.name, to_steps(composition, topo)
    )
    algo.verify(topo)
    for model in MODELS:
        want, got, how = _both(topo, algo, composition, float(1 << 20), model)
        _assert_equal(want, got)
        assert path in how, how


def test_a_composition_timed_in_two_models_has_its_routes_checked_once(monkeypatch):
    """The routes depend on the composition and topology only: the second model reuses them (at
    4096 GPUs they are 77 s of each call) and both times still equal the engine's."""
    import synth.reductions.hierarchy_time as hierarchy_time
    from common.memo import SameObjects

    topo, algo, composition = _parts("dgx-h100x3", "ring")
    searched: list[int] = []
    ways = hierarchy_time._Ways

    def counted(*args):
        searched.append(1)
        return ways(*args)

    monkeypatch.setattr(hierarchy_time, "_Ways", counted)
    monkeypatch.setattr(hierarchy_time, "_CHECKED", SameObjects())
    for model in MODELS:
        want, got, _ = _both(topo, algo, composition, float(1 << 20), model)
        _assert_equal(want, got)
    assert len(searched) == 1

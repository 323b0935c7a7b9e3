"""Tree-packing synthesis against known optima: the min-cut bound, SCCL's bandwidth-optimal DGX-1
fronts, ForestColl's published throughputs; the pieces (arborescences, symmetry) on their own."""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from conftest import assert_one_line_error

from synth.algorithm import Algorithm
from synth.baselines import make_baseline
from synth.bounds import bandwidth_time_us, lower_bound_us, rounds_per_chunk_bound
from synth.collectives import make_collective
from synth.cost import simulate
from synth.errors import InfeasibleError
from synth.reductions import Problem, Solution
from synth.timing import model_params
from synth.trees import synthesize
from synth.trees.arborescence import min_arborescence, tree_cost
from synth.trees.packing import pack, pair_classes
from synth.trees.symmetry import find_group
from topologies import load
from topologies.io import topology_from_dict, topology_to_dict
from topologies.model import Topology

GiB = float(1 << 30)
FRONTS = Path(__file__).parent / "data" / "dgx1-fronts"

IDEAL = model_params("ideal")
"""The bound is at line rate with no per-call or per-send cost: the schedule is timed the same way."""


def _packing(name: str):
    topo = load(name)
    return topo, pack(topo, pair_classes(topo, find_group(topo)))


def _bound_rate(topo, name: str = "allgather") -> float:
    """GB/s per rank the min-cut bound allows (synth.bounds, a flow LP on the physical graph)."""
    n = topo.num_ranks
    return GiB / n / (bandwidth_time_us(topo, make_collective(name, n), GiB) * 1e3)


def _ratio(topo, algo: Algorithm, size: float = GiB) -> float:
    coll = make_collective(
        algo.collective.name, topo.num_ranks, topo.num_ranks if algo.collective.name == "allreduce" else 1
    )
    return lower_bound_us(topo, coll, size) / simulate(algo, topo, size, IDEAL).time_us


@pytest.mark.parametrize(
    "name", ["ring:4", "ring:8", "hypercube:3", "torus:3x3", "dgx1", "dgx-a100", "dgx-h100"]
)
def test_packing_reaches_the_min_cut_bound(name):
    topo, packing = _packing(name)
    assert packing.optimal
    assert packing.rate_GBps == pytest.approx(_bound_rate(topo), rel=1e-6)
    assert packing.upper_GBps == pytest.approx(packing.rate_GBps, rel=1e-6)


@pytest.mark.parametrize("name", ["ring:4", "hypercube:3"])
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_small_instances_within_a_tenth_of_a_percent_of_the_lower_bound(name, collective):
    topo = load(name)
    result = synthesize(topo, collective)
    result.algorithm.verify(topo)
    assert result.algorithm.collective.name == collective and result.optimal
    assert _ratio(topo, result.algorithm) >= 0.999


def test_dgx1_rate_is_the_smt_bandwidth_optimal_front():
    """SCCL's bandwidth-optimal DGX-1 allgather takes 7 rounds for 6 chunks (sccl.md), the stored
    front's (3, 7, 6); the packing ships exactly one chunk per 7/6 rounds of a 25 GB/s NVLink."""
    topo, packing = _packing("dgx1")
    smt = Algorithm.load(FRONTS / "allgather-dgx1-s3-r7-c6.json")
    assert smt.rounds_per_chunk == rounds_per_chunk_bound(topo, smt.collective) == Fraction(7, 6)
    unit = topo.chunk_capacity().unit_GBps
    assert Fraction(unit / packing.rate_GBps).limit_denominator(100) == smt.rounds_per_chunk
    trees = synthesize(topo, "allgather").algorithm
    assert simulate(trees, topo, GiB, IDEAL).time_us <= 1.05 * simulate(smt, topo, GiB, IDEAL).time_us


def test_dgx1_allreduce_rate_is_the_smt_bandwidth_optimal_front():
    """The stored allreduce front's bandwidth-optimal end is (6, 14, 48): 7/24 rounds per chunk,
    an allgather's and a reducescatter's 7/6 over 8 ranks each; the trees' allreduce is both packings."""
    topo = load("dgx1")
    smt = Algorithm.load(FRONTS / "allreduce-dgx1-s6-r14-c48.json")
    assert smt.rounds_per_chunk == rounds_per_chunk_bound(topo, smt.collective) == Fraction(7, 24)
    result = synthesize(topo, "allreduce")
    unit = topo.chunk_capacity().unit_GBps
    per_chunk = sum(Fraction(unit / p.rate_GBps).limit_denominator(100) for p in result.packings) / 8
    assert per_chunk == smt.rounds_per_chunk
    assert simulate(result.algorithm, topo, GiB, IDEAL).time_us <= 1.05 * simulate(smt, topo, GiB, IDEAL).time_us


@pytest.mark.parametrize(
    ("name", "algbw_GBps"),
    [
        ("dgx-a100x2", 346.67),
        ("dgx-a100x4", 266.67),
        ("dgx-h100", 514.3),
        ("dgx-h100x2", 533.3),
        ("dgx-h100x4", 516.1),
    ],
)
def test_forestcoll_published_optimal_allgather_throughput(name, algbw_GBps):
    """ForestColl's optimal allgather algbw on the same machines (cost-models-and-bounds.md, 2.2)."""
    topo, packing = _packing(name)
    assert packing.optimal
    assert topo.num_ranks * packing.rate_GBps == pytest.approx(algbw_GBps, abs=0.05)


@pytest.mark.parametrize("name", ["dgx-a100x2", "dgx-h100x2"])
@pytest.mark.parametrize(
    "collective", ["allgather", "reducescatter", pytest.param("allreduce", marks=pytest.mark.slow)]
)
def test_two_machines_within_three_percent_of_the_lower_bound(name, collective):
    topo = load(name)
    algo = synthesize(topo, collective).algorithm
    algo.verify(topo)
    assert _ratio(topo, algo) >= 0.97


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dgx-a100x4", "dgx-h100x4"])
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce"])
def test_four_machines_within_four_percent_of_the_lower_bound(name, collective):
    topo = load(name)
    algo = synthesize(topo, collective).algorithm
    algo.verify(topo)
    assert _ratio(topo, algo) >= 0.96


def test_an_interrupted_search_keeps_a_valid_packing():
    """Ctrl-C during the search (here from the progress callback) keeps the trees found so far."""
    topo = load("dgx1")
    lines = []

    def log(line: str) -> None:
        lines.append(line)
        if "iteration 2:" in line:
            raise KeyboardInterrupt

    result = synthesize(topo, "allreduce", log=log)
    result.algorithm.verify(topo)
    assert result.interrupted and not result.optimal
    assert sum("iteration" in line for line in lines) == 2  # the allgather after it is not searched


def test_a_time_limit_of_zero_still_gives_a_verified_algorithm():
    topo = load("dgx1")
    result = synthesize(topo, "allgather", time_limit_s=0)
    result.algorithm.verify(topo)
    assert not result.optimal and result.packings[0].rate_GBps > 0


def test_refuses_what_it_does_not_synthesize():
    with pytest.raises(InfeasibleError, match="allgather, reducescatter, allreduce"):
        synthesize(load("ring:4"), "alltoall")


@pytest.mark.parametrize("seed", range(6))
def test_min_arborescence_matches_networkx(seed):
    rng = np.random.default_rng(seed)
    n = 7
    cost = rng.integers(1, 20, size=(n, n)).astype(float)
    cost[rng.random((n, n)) < 0.4] = np.inf
    cost[0, 1:] = 50.0  # every vertex reachable from the root
    graph = nx.DiGraph()
    graph.add_weighted_edges_from(
        (u, v, cost[u, v]) for u in range(n) for v in range(1, n) if u != v and np.isfinite(cost[u, v])
    )
    best = nx.minimum_spanning_arborescence(graph)
    parent = min_arborescence(cost, 0)
    assert parent[0] == -1
    assert tree_cost(cost, parent) == pytest.approx(best.size(weight="weight"))
    depth_ok = [v for v in range(1, n) if _reaches_root(parent, v)]
    assert len(depth_ok) == n - 1


def _reaches_root(parent: np.ndarray, v: int) -> bool:
    for _ in range(len(parent)):
        if v == 0:
            return True
        v = int(parent[v])
    return v == 0


@pytest.mark.parametrize(
    ("name", "order"), [("dgx-h100x4", 32), ("hypercube:3", 8), ("dgx1", 2), ("ring:8", 8)]
)
def test_symmetry_group_maps_every_link_onto_a_link_like_it(name, order):
    topo = load(name)
    group = find_group(topo)
    assert group.order == order
    links = topo.logical().links
    for perm in group.elements:
        assert sorted(perm.tolist()) == list(range(topo.num_ranks))
        for (u, v), link in links.items():
            image = links[(int(perm[u]), int(perm[v]))]
            assert image.bandwidth_GBps == link.bandwidth_GBps


def test_cli_writes_a_verified_algorithm_and_keeps_existing_files(tmp_path, xccl):
    out = tmp_path / "ag.json"
    proc = xccl("synth", "trees", "-t", "dgx1", "-C", "reducescatter", "-s", "64MiB", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "rates proven optimal" in proc.stdout and "modeled" in proc.stdout
    assert "trees: dgx1: symmetry" in proc.stderr  # progress on stderr, results on stdout
    algo = Algorithm.load(out)
    algo.verify(load("dgx1"))
    assert algo.collective.name == "reducescatter" and algo.provenance.method == "trees"
    before = out.read_bytes()
    again = xccl("synth", "trees", "-t", "dgx1", "-C", "allgather", "-o", str(out))
    assert_one_line_error(again, str(out), "--force")
    assert out.read_bytes() == before


def test_cli_refuses_bad_input_in_one_line(xccl):
    assert_one_line_error(
        xccl("synth", "trees", "-t", "dgx-h100", "-C", "allgather", "--hierarchical"), "1 machine"
    )
    assert_one_line_error(xccl("synth", "trees", "-t", "dgx1", "-C", "alltoall"), "--collective")
    assert_one_line_error(xccl("synth", "trees", "-t", "dgx1", "-C", "allgather", "-s", "0"), "size")


@pytest.mark.serial  # times itself: run alone (see Makefile)
def test_a_schedule_too_large_to_hold_is_refused_before_any_work(xccl, monkeypatch):
    """4096 GPUs by composition (16.8 M sends) ran out of 7 GB after minutes, with a traceback."""
    started = time.perf_counter()
    proc = xccl("synth", "trees", "-t", "dgx-h100x512", "-C", "allgather", "--hierarchical")
    assert_one_line_error(proc, "allgather on dgx-h100x512", "16773120 sends", "XCCL_MAX_TREES_SENDS")
    assert time.perf_counter() - started < 10
    monkeypatch.setenv("XCCL_MAX_TREES_SENDS", "100")
    assert_one_line_error(xccl("synth", "trees", "-t", "ring:16", "-C", "allreduce"), "480 sends", "limit of 100")
    monkeypatch.setenv("XCCL_MAX_TREES_SENDS", "480")
    assert xccl("synth", "trees", "-t", "ring:16", "-C", "allreduce").returncode == 0


def test_hierarchical_allgather_on_four_machines_reaches_the_bound():
    """Where the network binds (4 x 8 H100), one rail's packing on the machine graph meets that
    graph's min-cut bound and the composed schedule, verified as a whole, is within 1% of the bound."""
    from synth.reductions.hierarchy import machine_graph, machines_of

    topo = load("dgx-h100x4")
    result = synthesize(topo, "allgather", hierarchical=True)
    result.algorithm.verify(topo)
    between = machine_graph(topo, machines_of(topo))
    assert result.packings[0].rate_GBps == pytest.approx(_bound_rate(between), rel=1e-6)
    assert _ratio(topo, result.algorithm) >= 0.99


def _fresh(name: str) -> Topology:
    """``name`` built anew: ``load`` keeps topologies, and with them the routes other tests found."""
    return topology_from_dict(topology_to_dict(load(name)))


def test_hierarchical_composition_routes_its_pairs_one_search_per_source(monkeypatch):
    """The composed schedule uses thousands of rank pairs (36,000 on 512 GPUs); searched pair by
    pair they took 114 of its 134 s. One search per source rank finds them all."""
    from synth.reductions.hierarchy import HIERARCHY
    from topologies.routes import RouteGraph

    topo = _fresh("dgx-h100x4")
    problem = Problem(topo, make_collective("allgather", topo.num_ranks))
    reduced = HIERARCHY.apply(problem)
    parts = [make_baseline("direct", sub.topology, sub.collective) for sub in reduced.subproblems]
    searches = []
    routes = RouteGraph.routes
    monkeypatch.setattr(RouteGraph, "routes", lambda self, *a, **k: searches.append(a) or routes(self, *a, **k))
    algo = reduced.invert([Solution(a) for a in parts]).algorithm
    pairs = {(s.src, s.dst) for st in algo.steps for s in st.sends}
    assert len(pairs) > 2 * topo.num_ranks  # many destinations per source
    assert len(searches) <= topo.num_ranks


def test_hierarchical_reducescatter_routes_the_inverse_one_search_per_source(monkeypatch):
    """The dual's inverse is verified on the original topology, whose pairs the composition did not
    route; with few route tables kept (as on 512 GPUs) they were searched pair by pair (376
    searches here; 110 s of 208 on 512 GPUs). Now: at most a search per source and direction on
    each of the two topologies."""
    import topologies.logical
    from topologies.routes import RouteGraph

    monkeypatch.setattr(topologies.logical, "TABLES_KEPT", 1)
    searches = []
    routes = RouteGraph.routes
    monkeypatch.setattr(RouteGraph, "routes", lambda self, *a, **k: searches.append(a) or routes(self, *a, **k))
    topo = _fresh("dgx-h100x4")
    synthesize(topo, "reducescatter", hierarchical=True).algorithm.verify(topo)
    assert len(searches) <= 4 * topo.num_ranks


@pytest.mark.parametrize(("collective", "at_least"), [("reducescatter", 0.95), ("allreduce", 0.95)])
def test_hierarchical_combining_collectives_keep_the_rails_pipeline(collective, at_least):
    """Run backwards, the inner schedule must hand the network its chunks in the order the rails
    send them (chunk-major shares); machine-major shares took 0.84x the bound on 2 machines
    (0.58x on 4) for reducescatter."""
    topo = load("dgx-h100x2")
    algo = synthesize(topo, collective, hierarchical=True).algorithm
    algo.verify(topo)
    assert _ratio(topo, algo) >= at_least


@pytest.mark.parametrize("name", ["dgx-h100x8", "dgx-h100x16"])
def test_hierarchical_reducescatter_feeds_every_machine_at_once(name):
    """With one chunk per rank on the rails (as on 512 GPUs), every machine must feed a different
    machine at a time, in the order its inner reductions finish the shares. The inner
    reducescatters used to finish them in the same machine order everywhere, so every machine sent
    to machine 0, then to 1 ...: 0.53x the bound on 8 x 8 H100, where the flat packing reaches
    0.90x. Then the rails' sends, listed by absolute destination, were timed (and so mirrored) in
    an order the inner reductions did not follow: 0.81x the flat packing's time on 16 x 8 (86.5%
    of the bound on 512 GPUs). Now both follow ``m + 1, m + 2, ...`` and match the flat packing."""
    topo = load(name)
    n = topo.num_ranks
    algo = synthesize(topo, "reducescatter", hierarchical=True, max_sends=n * (n - 1)).algorithm
    algo.verify(topo)
    assert algo.chunks == 1
    flat = synthesize(topo, "reducescatter", max_sends=n * (n - 1)).algorithm
    assert simulate(algo, topo, GiB, IDEAL).time_us <= simulate(flat, topo, GiB, IDEAL).time_us / 0.99


@pytest.mark.parametrize("within", ["ring", pytest.param("smt", marks=pytest.mark.slow)])
def test_hierarchical_with_another_method_inside_the_machine(within):
    topo = load("dgx-a100x2")
    result = synthesize(topo, "allgather", hierarchical=True, within=within)
    result.algorithm.verify(topo)
    assert result.algorithm.provenance.method.startswith("trees + ")
    assert len(result.packings) == 1  # only the machine graph was packed


@pytest.mark.parametrize("name", ["dgx1", "dgx-h100x2", "torus:3x3"])
def test_step_rounds_are_those_of_the_integer_model(name):
    """The schedule counts a step's rounds from its link orbits; the model counts them per send."""
    topo = load(name)
    algo = synthesize(topo, "allgather", size_bytes=1 << 24).algorithm
    capacity = topo.chunk_capacity()
    assert [st.rounds for st in algo.steps] == [
        capacity.rounds_needed((s.src, s.dst) for s in st.sends) for st in algo.steps
    ]


def test_api_method_trees():
    import xccl
    from synth.collectives import CollectiveError

    algo = xccl.synthesize("ring:4", "allreduce", "trees", size="1MiB")
    algo.verify(load("ring:4"))
    assert algo.collective.name == "allreduce" and algo.provenance.method == "trees"
    with pytest.raises(CollectiveError, match="chunks come from the packing"):
        xccl.synthesize("ring:4", "allgather", "trees", chunks=2)


def test_reducescatter_runs_its_allgather_backwards_in_time_order():
    """With one chunk per rank (few steps, so each step's order is the schedule), the dual's sends
    go in the reverse of the order the allgather's ran: 0.58x the bound by chunk order, 0.82x now."""
    topo = load("dgx-h100x4")
    algo = synthesize(topo, "reducescatter", max_sends=1000).algorithm
    algo.verify(topo)
    assert algo.chunks == 1 and all(s.start_us is None for st in algo.steps for s in st.sends)
    assert _ratio(topo, algo) >= 0.8

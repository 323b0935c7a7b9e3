"""The topology held as arrays (topologies/arrays.py): the same graph, links, classes and
reachability as the networkx graph built one link at a time gave, without building it."""

from __future__ import annotations

import random
import tracemalloc

import networkx as nx
import pytest
from test_logical_routes import _random_fabric

import topologies as T
from topologies.arrays import LinkArrays
from topologies.builders import DEFAULT_ALPHA_US, DEFAULT_GBPS
from topologies.classes import MAX_ROUNDS
from topologies.model import Link, Topology

NAMES = ["dgx1", "dgx2", "ndv2x2", "dgx-a100x2", "dgx-h100x3", "amd-mi50", "switch:5", "line:6", "star:5"]


def _family_links(name: str) -> dict:
    """The old builders' dicts of pairs, in their order (two links per pair, wrap links once)."""
    link, links = Link(DEFAULT_GBPS, DEFAULT_ALPHA_US), {}
    family, _, size = name.partition(":")
    if family == "ring":
        n = int(size)
        for r in range(n):
            links[(r, (r + 1) % n)] = links[((r + 1) % n, r)] = Link(
                DEFAULT_GBPS, DEFAULT_ALPHA_US, 2 if n == 2 else 1
            )
    elif family == "torus":
        a, b = map(int, size.split("x"))
        for i in range(a):
            for j in range(b):
                r = i * b + j
                for other in (((i + 1) % a) * b + j, i * b + (j + 1) % b):
                    links[(r, other)] = links[(other, r)] = link
    else:
        d = int(size)
        links = {(r, r ^ (1 << k)): link for r in range(1 << d) for k in range(d)}
    return links


def _one_at_a_time(num_ranks: int, links: dict, switches: dict) -> nx.DiGraph:
    """The graph as the model built it before: one ``add_edge`` per link."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(num_ranks), kind="rank")
    for sw, kind in switches.items():
        graph.add_node(sw, kind=kind)
    for (u, v), link in links.items():
        graph.add_edge(u, v, link=link)
    return graph


def _same_graph(topo: Topology, reference: nx.DiGraph) -> None:
    graph = topo.graph
    assert list(graph.nodes(data=True)) == list(reference.nodes(data=True))
    assert list(graph.edges(data=True)) == list(reference.edges(data=True))
    assert list(topo.links()) == [(u, v, d["link"]) for u, v, d in reference.edges(data=True)]
    for v in reference:
        assert list(graph.predecessors(v)) == list(reference.predecessors(v))
        assert set(topo.neighbours(v)) == {*reference.successors(v), *reference.predecessors(v)}
    for u, v, link in list(reference.edges(data="link"))[:50]:
        assert topo.link(u, v) == link and topo.link(v, u) == reference.get_edge_data(v, u, {}).get("link")
    assert topo.num_links == reference.number_of_edges()
    assert topo.is_symmetric() == all(
        reference.get_edge_data(v, u, {}).get("link") == lk for u, v, lk in reference.edges(data="link")
    )


@pytest.mark.parametrize(
    "name", ["ring:2", "ring:7", "torus:2x2", "torus:2x3", "torus:3x4", "hypercube:1", "hypercube:4"]
)
def test_a_family_built_as_arrays_is_the_graph_its_dict_built(name):
    topo = T.load(name)
    _same_graph(topo, _one_at_a_time(topo.num_ranks, _family_links(name), {}))


@pytest.mark.parametrize("seed", range(6))
def test_a_topology_built_from_a_dict_is_the_graph_add_edge_built(seed):
    topo = _random_fabric(seed)
    links = {(u, v): link for u, v, link in topo.links()}
    shuffled = dict(random.Random(seed).sample(list(links.items()), len(links)))  # any order of adding
    rebuilt = Topology.build(topo.name, topo.num_ranks, shuffled, topo.switches, topo.node_of)
    _same_graph(rebuilt, _one_at_a_time(topo.num_ranks, shuffled, topo.switches))


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_topology_keeps_its_graph_through_its_json(name):
    topo = T.load(name)
    again = T.topology_from_dict(T.topology_to_dict(topo))
    assert again == topo and list(again.links()) == list(topo.links())
    assert list(again.graph.edges(data=True)) == list(topo.graph.edges(data=True))
    assert list(topo.reverse().links()) == list(
        Topology.build(
            topo.name, topo.num_ranks, {(v, u): lk for u, v, lk in topo.links()}, topo.switches, topo.node_of
        ).links()
    )


def test_equal_values_that_print_apart_stay_apart():
    """25 and 25.0 are equal links (one class, one label) but each link keeps what it was given."""
    links = {(0, 1): Link(25, 0.7), (1, 0): Link(25.0, 0.7), (1, 2): Link(25.0, 0.7), (2, 1): Link(25, 0.7)}
    topo = Topology.build("t", 3, links)
    assert [repr(lk) for _, _, lk in topo.links()] == [repr(lk) for lk in links.values()]
    assert topo.is_symmetric() and topo.rank_classes() == ((0, 2), (1,))


def test_a_large_family_is_built_without_networkx():
    """hypercube:12's 49,152 links: as networkx edges they held 31 MB while building (and 30 s
    and most of a GB on hypercube:17); the bound's readers never make the graph."""
    T.hypercube(3)
    tracemalloc.start()
    try:
        topo = T.hypercube(12)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12e6
    topo.rank_classes(), topo.logical().hops_from(0), topo.is_symmetric(), list(topo.logical().alphas_from(5))
    assert "graph" not in vars(topo)


def test_a_link_to_an_undeclared_switch_is_one_error():
    with pytest.raises(T.TopologyError, match=r"t: links: 'sw' is neither a rank 0\.\.1 nor a declared switch"):
        Topology.build("t", 2, {(0, "sw"): Link(25.0, 0.7), ("sw", 1): Link(25.0, 0.7)})
    with pytest.raises(T.TopologyError, match="links: 5 is neither a rank"):
        Topology.build("t", 2, {(0, 5): Link(25.0, 0.7)})


def _unchecked(seed: int, switches: bool) -> Topology:
    """A random topology that may leave ranks unreached (made without the model's check)."""
    rng = random.Random(seed)
    n = rng.randint(2, 9)
    kinds = {f"s{i}": rng.choice(["nvswitch", "pcie"]) for i in range(rng.randint(1, 3))} if switches else {}
    vertices = [*range(n), *kinds]
    links = {}
    for _ in range(rng.randint(1, 3 * n)):
        u, v = rng.sample(vertices, 2)
        links[(u, v)] = Link(25.0, 0.7)
    return Topology("t", n, LinkArrays.from_dict(n, kinds, links, "t"), (0,) * n)


@pytest.mark.parametrize("switches", [False, True])
def test_reachability_on_the_arrays_is_reachability_over_the_logical_links(switches):
    for seed in range(150):
        topo = _unchecked(seed, switches)
        logical = topo.logical()
        forward = [d >= 0 for d in logical.hops_from(0)]
        backward = [d >= 0 for d in logical.graph.hop_distances(0, logical.predecessors)]
        assert [seen for seen, _ in topo._reach()] == [forward, backward], seed


def _refined_one_vertex_at_a_time(topo: Topology) -> tuple[tuple[int, ...], ...]:
    """The colour refinement with a tuple per vertex (what topologies.classes did before)."""
    names = [*topo.ranks, *topo.switches]
    ids = {v: i for i, v in enumerate(names)}
    succ, pred, labels = [[] for _ in names], [[] for _ in names], {}
    for u, v, link in topo.links():
        label = labels.setdefault(link, len(labels))
        succ[ids[u]].append((label, ids[v]))
        pred[ids[v]].append((label, ids[u]))

    def compress(keys):
        index = {}
        return [index.setdefault(k, len(index)) for k in keys]

    colour = compress([("rank",) if isinstance(v, int) else ("switch", topo.switches[v]) for v in names])
    for _ in range(MAX_ROUNDS):
        refined = compress(
            [
                (
                    colour[i],
                    tuple(sorted((a, colour[j]) for a, j in succ[i])),
                    tuple(sorted((a, colour[j]) for a, j in pred[i])),
                )
                for i in range(len(names))
            ]
        )
        if max(refined) == max(colour):
            break
        colour = refined
    groups = {}
    for r in topo.ranks:
        groups.setdefault(colour[r], []).append(r)
    return tuple(sorted(tuple(g) for g in groups.values()))


def test_rank_classes_as_arrays_are_the_refinement_one_vertex_at_a_time():
    topos = [T.load(name) for name in [*NAMES, "line:40", "torus:3x5", "hypercube:5"]]
    topos += [_random_fabric(seed) for seed in range(30)]
    for seed in range(60):
        topo = _unchecked(seed, seed % 2 == 0)
        if all(ok for seen, _ in topo._reach() for ok in seen):
            topos.append(topo)
    for topo in topos:
        assert topo.rank_classes() == _refined_one_vertex_at_a_time(topo), topo

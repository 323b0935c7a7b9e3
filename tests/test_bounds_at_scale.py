"""Bounds in time and memory linear in the topology (issue 17 item 3): what made `xccl bound`
take minutes and gigabytes on hypercube:17 and 4,096 GPUs, each held here on small instances."""

from __future__ import annotations

import tracemalloc

import networkx as nx
import pytest

import topologies as T
from synth.bounds import bandwidth as bw_module
from synth.bounds import bandwidth_time_us, latency_time_us, rounds_per_chunk_bound, steps_lower_bound
from synth.bounds.cuts import Capacities
from synth.collectives import make_collective
from topologies.model import Link, Topology
from topologies.routes import RouteGraph


def _reference_latency(topo: Topology, name: str) -> float:
    """Max over the collective's pairs of the least summed alpha over chains of logical links
    (networkx's Dijkstra over every logical link)."""
    logical = topo.logical()
    graph = nx.DiGraph()
    graph.add_weighted_edges_from((s, d, link.alpha_us) for (s, d), link in logical.links.items())
    if name == "broadcast":
        return max(nx.single_source_dijkstra_path_length(graph, 0).values())
    if name == "gather":
        return max(nx.single_source_dijkstra_path_length(graph.reverse(), 0).values())
    return max(max(nx.single_source_dijkstra_path_length(graph, s).values()) for s in topo.ranks)


@pytest.mark.parametrize("name", ["dgx-h100x2", "dgx-a100x2", "ndv2x2", "dgx1", "line:5", "torus:3x3", "switch:6"])
@pytest.mark.parametrize("coll", ["allgather", "broadcast", "gather"])
def test_the_latency_bound_equals_a_full_dijkstra(name, coll):
    topo = T.load(name)
    c = make_collective(coll, topo.num_ranks, lazy=True)
    assert latency_time_us(topo, c) == pytest.approx(_reference_latency(topo, coll), abs=1e-9)


def test_the_latency_bound_of_a_cluster_searches_few_ranks(monkeypatch):
    """Every rank of dgx-h100x64 is one route from the source: the search stops after the few
    ranks whose distance could still shorten another's (it routed all 261,632 pairs, and 16.8 M
    on 4,096 GPUs: 6 minutes and 6 GB)."""
    topo = T.load("dgx-h100x64")
    searches = []
    real = RouteGraph.routes
    monkeypatch.setattr(RouteGraph, "routes", lambda self, *a, **k: searches.append(a) or real(self, *a, **k))
    latency = latency_time_us(topo, make_collective("alltoall", topo.num_ranks, lazy=True))
    assert len(searches) <= 16
    assert latency == pytest.approx(max(topo.logical().link(0, 8 * m + 1).alpha_us for m in range(1, 64)))


def test_a_topology_hashes_without_listing_its_links():
    topo = T.hypercube(10)  # 10,240 links: a sorted edge list held 2.7 MB
    tracemalloc.start()
    try:
        hash(topo)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000
    assert T.hypercube(10) == topo and hash(T.hypercube(10)) == hash(topo)
    assert T.hypercube(10, bandwidth_GBps=10.0) != topo


def test_topologies_equal_only_when_every_link_is():
    links = {(0, 1): Link(25.0, 0.7), (1, 0): Link(25.0, 0.7), (1, 2): Link(25.0, 0.7), (2, 1): Link(25.0, 0.7)}
    a = Topology.build("t", 3, links)
    assert Topology.build("t", 3, dict(reversed(links.items()))) == a  # order does not matter
    assert Topology.build("t", 3, {**links, (2, 1): Link(25.0, 0.8)}) != a
    assert Topology.build("t", 3, {**links, (0, 2): Link(25.0, 0.7)}) != a


@pytest.mark.parametrize("topo", [T.ring(50), T.torus(4, 5), T.hypercube(6)])
def test_a_family_shares_one_link_object(topo):
    assert len({id(link) for _, _, link in topo.links()}) == 1  # 2.2 M of them on hypercube:17


def test_an_allreduce_solves_its_alike_parts_once(monkeypatch):
    """Its reduce-scatter's dual and its allgather are the same problem on a symmetric topology."""
    calls = []
    real = bw_module._rate
    monkeypatch.setattr(bw_module, "_rate", lambda *a: calls.append(a) or real(*a))
    bw_module._part_rates.cache_clear()
    bw_module._seconds_per_byte.cache_clear()
    try:
        topo = T.load("ring:8")
        bandwidth_time_us(topo, make_collective("allreduce", 8, lazy=True), 1 << 20)
    finally:
        bw_module._part_rates.cache_clear()
        bw_module._seconds_per_byte.cache_clear()
    assert len(calls) == 1


def test_the_bounds_never_make_a_resource_per_link():
    topo = T.ring(40)  # built here, so no other test has asked for its resources
    c = make_collective("allreduce", topo.num_ranks, lazy=True)
    steps_lower_bound(topo, c), latency_time_us(topo, c), rounds_per_chunk_bound(topo, c)
    bandwidth_time_us(topo, c, 1 << 30)
    assert topo.chunk_capacity().unit_GBps == 25.0
    assert "resources" not in vars(topo.logical())  # 2.2 M Resource objects on hypercube:17
    assert "edge_capacity" not in vars(topo.chunk_capacity())
    assert topo.chunk_capacity().edge_capacity[(0, 1)] == 1  # still there when asked for


def test_a_cut_is_the_capacity_into_a_set():
    topo = T.load("dgx-h100x2")
    cuts = Capacities.of(topo, lambda link: link.total_GBps)
    for inside in ({0}, set(range(8)), {0, 9, "m0.nic0", "net"}, set(range(16)) | {"net"}):
        expected = sum(link.total_GBps for u, v, link in topo.links() if v in inside and u not in inside)
        assert cuts.capacity_into(cuts.mask(inside)) == pytest.approx(expected)
    assert cuts.as_dict() == {(u, v): link.total_GBps for u, v, link in topo.links()}

"""The lazy logical view (topologies.routes) against the path-enumerating oracle: the same links,
paths, neighbours and distances on every shipped machine, multi-machine variant, family and on
random fabrics of switches, NICs and networks."""

from __future__ import annotations

import heapq
import random

import pytest
from logical_reference import reference_routes

import topologies as T
from topologies import Link, Topology

NAMED = [
    *T.shipped_machines(),
    "ndv2x2",
    "dgx2x2",
    "dgx-a100x3",
    "dgx-h100x2",
    "ring:7",
    "line:5",
    "switch:6",
    "torus:3x4",
    "hypercube:3",
    "star:5",
    "fully-connected:4",
]


def _random_fabric(seed: int) -> Topology:
    """Two or three machines of ranks, local switches and NICs (some shared by two ranks), a
    network switch or two, and a few random extra links of other speeds."""
    rng = random.Random(seed)
    machines, per = rng.choice([2, 3]), rng.choice([2, 3, 4])
    n = machines * per
    links: dict = {}
    switches: dict[str, str] = {"net": "network"}
    if rng.random() < 0.5:
        switches["net2"] = "network"
        links[("net", "net2")] = links[("net2", "net")] = Link(50.0, 0.3)

    def both(a, b, bw, alpha):
        links[(a, b)] = links[(b, a)] = Link(bw, alpha)

    for m in range(machines):
        ranks = list(range(m * per, (m + 1) * per))
        switches[f"sw{m}"] = rng.choice(["nvswitch", "pcie"])
        for r in ranks:
            if r == ranks[0] or rng.random() < 0.8:
                both(r, f"sw{m}", rng.choice([25.0, 50.0]), 0.2)
        for k in range(0, per, rng.choice([1, 2])):
            nic = f"nic{m}.{k}"
            switches[nic] = "nic"
            for r in ranks[k : k + 2]:
                both(r, nic, 12.5, 0.0)
            both(nic, rng.choice(["net", *(["net2"] if "net2" in switches else [])]), 12.5, 0.5)
        if rng.random() < 0.5:
            both(f"sw{m}", f"nic{m}.0", 25.0, 0.1)
        for _ in range(rng.randint(0, 2)):
            a, b = rng.sample(ranks, 2)
            links[(a, b)] = Link(rng.choice([25.0, 50.0]), 0.7)
    node_of = tuple(r // per for r in range(n))
    return Topology.build(f"fabric{seed}", n, links, switches, node_of)


def _cases():
    for name in NAMED:
        yield pytest.param(T.load(name), id=name)
    for seed in range(12):
        try:
            topo = _random_fabric(seed)
        except T.TopologyError:
            continue
        yield pytest.param(topo, id=f"fabric{seed}")


def _dijkstra(n: int, src: int, weight: dict[tuple[int, int], float]) -> list[float]:
    succ: dict[int, list[tuple[int, float]]] = {}
    for (u, v), w in weight.items():
        succ.setdefault(u, []).append((v, w))
    dist = [float("inf")] * n
    dist[src] = 0.0
    heap = [(0.0, src)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in succ.get(u, ()):
            if d + w < dist[v]:
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return dist


@pytest.mark.parametrize("topo", list(_cases()))
def test_routes_match_the_path_enumerating_oracle(topo):
    expected = reference_routes(topo)
    logical = topo.logical()
    assert {pair: link.path for pair, link in logical.links.items()} == expected
    fresh = T.topology_from_dict(T.topology_to_dict(topo)).logical()  # one pair at a time
    for (src, dst), path in expected.items():
        assert fresh.link(src, dst).path == path
    for r in topo.ranks:
        assert fresh.predecessors(r) == tuple(sorted(s for s, d in expected if d == r))
        assert fresh.successors(r) == tuple(sorted(d for s, d in expected if s == r))


@pytest.mark.parametrize("topo", list(_cases()))
def test_distances_match_breadth_first_and_dijkstra_over_the_links(topo):
    logical = topo.logical()
    alphas = {pair: link.alpha_us for pair, link in logical.links.items()}
    hops = _dijkstra(topo.num_ranks, 0, dict.fromkeys(alphas, 1.0))
    for src in topo.ranks:
        want_hops = _dijkstra(topo.num_ranks, src, dict.fromkeys(alphas, 1.0))
        assert logical.hops_from(src) == [int(h) if h < float("inf") else -1 for h in want_hops]
        got, want = logical.alpha_from(src), _dijkstra(topo.num_ranks, src, alphas)
        # any rule-abiding path may be faster than the fewest-hop route; never slower
        assert all(g <= w + 1e-9 for g, w in zip(got, want, strict=True))
        if topo.name in NAMED:  # trees of switches: the same
            assert got == pytest.approx(want)
    assert hops[0] == 0


def test_a_512_gpu_cluster_routes_a_pair_without_building_all_pairs():
    topo = T.load("dgx-a100x64")
    logical = topo.logical()
    link = logical.link(7, 8)
    assert link.path == (7, "m0.nic7", "net", "m1.nic0", 8)
    assert logical.link(8, 15).path == (8, "m1.nvswitch", 15)
    assert len(logical._links) == 2 and len(logical._tables) <= 2


@pytest.mark.parametrize("kept", [1 << 18, 3])
def test_links_asked_pair_by_pair_search_each_source_once(monkeypatch, kept):
    """The IR simulator and the Algorithm model look a schedule's links up pair by pair, sources
    interleaved (each routed them in bulk first: one search per pair, a 512-GPU tree schedule's
    pairs took 100 s against 2 s). A lookup resumes its source's search where the last stopped:
    one search per source; with few routes kept (3), sources searched again, the same links."""
    import topologies.logical
    from topologies.routes import RouteGraph

    monkeypatch.setattr(topologies.logical, "ROUTES_KEPT", kept)
    topo = T.load("dgx-h100x4")
    expected = {pair: link.path for pair, link in topo.logical().links.items()}
    fresh = T.topology_from_dict(T.topology_to_dict(topo)).logical()
    searches = []
    walk = RouteGraph.walk
    monkeypatch.setattr(RouteGraph, "walk", lambda self, *a, **k: searches.append(a) or walk(self, *a, **k))
    n = topo.num_ranks
    for dst in range(n):  # destination-major: every source in turn
        for src in range(n):
            if src != dst:
                assert fresh.links[(src, dst)].path == expected[(src, dst)]
    if kept > n * n:
        assert len(set(searches)) == len(searches) > n // 2  # each source once (some read a table)
    else:
        assert len(searches) > n and fresh._kept <= kept + n

"""Topologies: shipped machines, builders, derived views, JSON round trips, symmetries."""

from __future__ import annotations

import numpy as np
import pytest

import topologies as T
from topologies import Link, Topology, automorphisms, dump_topology, topology_from_dict, topology_to_dict

SCCL_DGX1 = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]


@pytest.mark.parametrize("name", T.shipped_machines())
def test_every_shipped_machine_loads_validates_and_round_trips(name):
    topo = T.load(name)
    topo.check()
    assert topo.source and topo.description
    again = topology_from_dict(topology_to_dict(topo), where=name)
    assert again == topo
    assert dump_topology(again) == dump_topology(topo)


def test_shipped_set_is_the_one_the_foundation_promises():
    assert set(T.shipped_machines()) >= {"dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "amd-mi50"}


def test_dgx1_matches_sccl_link_matrix_and_has_four_automorphisms():
    dgx1 = T.load("dgx1")
    cap = dgx1.chunk_capacity()
    assert cap.unit_GBps == 25.0
    assert cap.links.tolist() == SCCL_DGX1
    pairs = {frozenset(p) for p in dgx1.logical().links}
    assert len(pairs) == 16
    assert sum(1 for _, _, lk in dgx1.links() if lk.count == 2) == 16  # 8 pairs, both directions
    perms = list(automorphisms(dgx1))
    assert len(perms) == 4
    assert (4, 5, 6, 7, 0, 1, 2, 3) in perms


def test_machine_rates_are_the_documented_ones():
    def rank_out(topo: Topology, r: int) -> float:
        return sum(lk.total_GBps for s, _, lk in topo.links() if s == r)

    assert rank_out(T.load("dgx1"), 0) == 150.0
    assert rank_out(T.load("dgx2"), 0) == 150.0  # datasheet line rate (6 NVLink2), not TACCL's profiled 125
    assert rank_out(T.load("dgx-a100"), 0) == 300.0
    assert rank_out(T.load("dgx-h100"), 0) == 450.0
    assert [n.bandwidth_GBps for n in T.load("ndv2").nics] == [12.5]
    assert len(T.load("dgx2").nics) == 8 and T.load("dgx2").nics[3].ranks == (6, 7)
    assert {n.bandwidth_GBps for n in T.load("dgx-a100").nics} == {25.0}
    assert {n.bandwidth_GBps for n in T.load("dgx-h100").nics} == {50.0}
    amd = T.load("amd-mi50")
    assert len(amd.logical().links) == 56


@pytest.mark.parametrize(
    ("topo", "directed_edges", "rank_pairs"),
    [
        (T.ring(6), 12, 12),
        (T.ring(2), 2, 2),
        (T.line(5), 8, 8),
        (T.fully_connected(5), 20, 20),
        (T.star(5), 8, 8),
        (T.switch(6), 12, 30),
        (T.torus(3, 4), 48, 48),
        (T.torus(2, 3), 18, 18),
        (T.hypercube(3), 24, 24),
    ],
)
def test_builder_link_counts(topo, directed_edges, rank_pairs):
    assert topo.graph.number_of_edges() == directed_edges
    assert len(topo.logical().links) == rank_pairs


def test_switch_gives_one_chunk_per_round_per_port():
    cap = T.switch(4).chunk_capacity()
    assert cap.rounds_needed([(0, 1), (0, 2)]) == 2  # one send port
    assert cap.rounds_needed([(0, 1), (2, 1)]) == 2  # one receive port
    assert cap.rounds_needed([(0, 1), (2, 3), (1, 0), (3, 2)]) == 1


def test_multi_node_routes_through_nics_and_network():
    topo = T.load("ndv2x2")
    assert topo.num_ranks == 16 and topo.num_machines == 2
    link = topo.logical().links[(0, 9)]
    assert link.path == (0, "m0.nic0", "net", "m1.nic0", 9)
    assert link.bandwidth_GBps == 12.5 and link.alpha_us == pytest.approx(1.7)
    # inside a machine the NIC does not forward: 0 and 5 are not linked in a DGX-1
    assert (0, 5) not in topo.logical().links
    # the NIC edge is one resource shared by all of machine 0's sends to machine 1
    users = topo.logical().users[("m0.nic0", "net")]
    assert len(users) == 64
    a100 = T.load("dgx-a100x8")
    assert a100.num_ranks == 64 and a100.graph.number_of_edges() == 384  # sparse: switches are vertices


def test_reverse_turns_every_link_around():
    topo = topology_from_dict(
        {
            "name": "oneway",
            "ranks": 3,
            "links": [
                {"src": 0, "dst": 1, "bandwidth_GBps": 10, "alpha_us": 1, "bidirectional": False},
                {"src": 1, "dst": 2, "bandwidth_GBps": 20, "alpha_us": 1, "bidirectional": False},
                {"src": 2, "dst": 0, "bandwidth_GBps": 30, "alpha_us": 1, "bidirectional": False},
            ],
        }
    )
    rev = topo.reverse()
    assert rev.link(1, 0) == Link(10, 1) and rev.link(0, 1) is None
    assert rev.reverse() == topo
    assert not topo.is_symmetric() and T.load("dgx1").is_symmetric()


def test_hops_and_capacity_views_agree_with_the_graph():
    ring = T.ring(8)
    hops = ring.logical().hops
    assert hops[0, 4] == 4 and hops[0, 7] == 1
    assert np.array_equal(hops, hops.T)


@pytest.mark.parametrize(
    "name",
    [
        "ring:8",
        "line:4",
        "star:5",
        "switch:16",
        "torus:4x4",
        "hypercube:3",
        "fully-connected:4",
        "ndv2x2",
        "dgx-a100x8",
    ],
)
def test_names_resolve(name):
    topo = T.load(name)
    assert topo.name == name


def test_family_names_round_trip_through_files(tmp_path):
    for name in ["torus:3x3", "switch:5", "dgx2x2"]:
        topo = T.load(name)
        path = tmp_path / f"{name.replace(':', '_')}.json"
        path.write_text(dump_topology(topo))
        assert T.load(str(path)) == topo

"""``xccl baseline nccl``: NCCL's channel layout as verified Algorithms, on every shipped machine and
on a user's own topology file, and the NCCL-structure times of shared/reference/nccl.md section 5.2."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error

import topologies as T
from synth.baselines import BaselineError, default_chunks, make_baseline
from synth.baselines.nccl import COLLECTIVES, nccl_algos
from synth.collectives import make_collective
from synth.cost import simulate
from synth.nccl.search import layout
from synth.timing import IDEAL

MACHINES = [*T.shipped_machines(), "ndv2x2", pytest.param("dgx2x2", marks=pytest.mark.slow)]
"""dgx2x2 (32 ranks) takes seconds per collective: its ``auto`` layouts are in test_baselines.py."""


def _build(topo, coll: str, algo: str = "auto"):
    n = topo.num_ranks
    chunks = default_chunks("nccl", coll, n, topo, algo)
    root = 1 if coll in ("broadcast", "reduce") else None
    return make_baseline("nccl", topo, make_collective(coll, n, chunks, root), algo)


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("coll", sorted(COLLECTIVES))
def test_every_nccl_algorithm_verifies_on_every_shipped_machine(name, coll):
    topo = T.load(name)
    for algo in ("auto", *nccl_algos(topo, coll)):
        built = _build(topo, coll, algo)
        built.verify(topo)  # make_baseline verified it too; a user gets nothing unverified
        assert built.provenance.method == "baseline:nccl"


def test_the_algorithms_follow_the_topology():
    """NVLS only where an NVSwitch reduces (kind nvls), tree only for allreduce, p2p for alltoall."""
    assert "nvls" in nccl_algos(T.load("dgx-h100"), "allreduce")
    assert "nvls" not in nccl_algos(T.load("dgx-a100"), "allreduce")
    assert nccl_algos(T.load("dgx1"), "allgather") == ("ring",)
    assert nccl_algos(T.load("dgx1"), "alltoall") == ("p2p",)
    with pytest.raises(BaselineError, match="no nvls allgather on dgx1"):
        _build(T.load("dgx1"), "allgather", "nvls")
    with pytest.raises(BaselineError, match="no tree allgather"):
        _build(T.load("dgx1"), "allgather", "tree")


@pytest.mark.parametrize(
    ("name", "channels", "bw"),
    [
        ("dgx1", 6, 20.0),  # six link-disjoint rings over every NVLink (reference 2.2)
        ("dgx-a100", 12, 20.0),  # NCCL's log: nChannels 12, bw 20
        ("dgx-h100", 12, 30.0),  # NCCL 2.19 log: Pattern 4, nChannels 12, bw 30
        ("ndv2x2", 1, 12.0),  # one NIC: one ring
        ("dgx2x2", 8, 12.0),  # one ring per NIC
    ],
)
def test_the_search_finds_nccls_channels(name, channels, bw):
    ring = layout(T.load(name)).ring
    assert (ring.channels, ring.bw_GBps) == (channels, bw)
    assert len(set(ring.rings)) == len(ring.rings) or ring.channels > ring.search_channels


def test_nvls_channels_on_dgx_h100():
    nvls = layout(T.load("dgx-h100")).nvls
    assert (nvls.channels, nvls.bw_intra_GBps, nvls.bw_inter_GBps) == (
        8,
        40.0,
        60.0,
    )  # "nChannels 8, bw 40/60"


def test_dgx1_rings_use_every_nvlink_once():
    """Six directed rings, each NVLink of the hybrid cube-mesh (2 on doubled pairs) carries its count."""
    topo = T.load("dgx1")
    ring = layout(topo).ring
    use: dict = {}
    for r in ring.rings:
        for a, b in zip(r, r[1:] + r[:1], strict=True):
            use[(a, b)] = use.get((a, b), 0) + 1
    assert use == {(u, v): link.count for u, v, link in topo.links() if isinstance(v, int)}


SECTION_5_2 = [  # allgather, 1 GiB, NCCL's structure in the project's engine, uncalibrated model
    ("dgx1", 6268.39),
    ("ndv2x2", 80532.34),
    ("dgx2x2", 10437.83),
    pytest.param("dgx-a100x8", 5286.52, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("name", "expected_us"), SECTION_5_2)
def test_reproduces_reference_section_5_2(name, expected_us):
    topo = T.load(name)
    algo = _build(topo, "allgather")
    assert simulate(algo, topo, 1 << 30, IDEAL).time_us == pytest.approx(expected_us, rel=0.01)


def test_nccl_layout_beats_the_textbook_ring_where_nccl_has_more_channels():
    topo = T.load("dgx1")
    ring = make_baseline("ring", topo, make_collective("allgather", 8, 1))
    nccl = _build(topo, "allgather")
    assert simulate(ring, topo, 1 << 30, IDEAL).time_us > 5.5 * simulate(nccl, topo, 1 << 30, IDEAL).time_us


def _user_topology(tmp_path):
    """Two machines of four GPUs, all-to-all NVLink inside, each GPU on the network: a file a user writes."""
    links = [
        {"src": m + a, "dst": m + b, "bandwidth_GBps": 50.0, "alpha_us": 0.7}
        for m in (0, 4)
        for a in range(4)
        for b in range(a + 1, 4)
    ]
    links += [{"src": r, "dst": "ib", "bandwidth_GBps": 25.0, "alpha_us": 1.7} for r in range(8)]
    doc = {
        "format": "xccl-topology/1",
        "name": "my-cluster",
        "ranks": 8,
        "node_of": [0, 0, 0, 0, 1, 1, 1, 1],
        "switches": [{"name": "ib", "kind": "network"}],
        "links": links,
    }
    path = tmp_path / "my-cluster.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("coll", sorted(COLLECTIVES))
def test_baseline_nccl_on_a_user_written_topology_file(xccl, tmp_path, coll):
    path = _user_topology(tmp_path)
    out = tmp_path / "algo.json"
    proc = xccl("baseline", "nccl", "-C", coll, "-t", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "(verified)" in proc.stdout
    check = xccl("verify", str(out), "-t", str(path))
    assert check.returncode == 0, check.stderr


def test_user_topology_gets_one_ring_per_nic_direction(tmp_path):
    topo = T.load(str(_user_topology(tmp_path)))
    ring = layout(topo).ring
    assert ring.channels == 4 and ring.bw_GBps == 12.0  # a 25 GB/s NIC per GPU, read at PCIe Gen3's 12
    assert sorted(c[0] for c in ring.chains) == [0, 1, 2, 3]  # each enters by its own GPU's NIC


def test_tree_allreduce_on_the_user_topology(xccl, tmp_path):
    path = _user_topology(tmp_path)
    proc = xccl("baseline", "nccl", "-C", "allreduce", "--algo", "tree", "-t", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "baseline:nccl" in proc.stdout


def test_an_algo_the_topology_lacks_is_a_one_line_error(xccl):
    assert_one_line_error(xccl("baseline", "nccl", "-C", "allgather", "-t", "dgx1", "--algo", "nvls"), "nvls")

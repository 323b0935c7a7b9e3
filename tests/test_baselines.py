"""Every baseline verifies on every topology it applies to; missing links are clear errors."""

from __future__ import annotations

import pytest

import topologies as T
from synth.baselines import BASELINES, BaselineError, applies, default_chunks, make_baseline
from synth.collectives import COLLECTIVES, make_collective

SUPPORTED = {
    "ring": {
        "ring:5",
        "switch:8",
        "dgx1",
        "torus:3x3",
        "hypercube:3",
        "fully-connected:4",
        "amd-mi50",
        "dgx2",
        "ndv2x2",
        "dgx2x2",
        "dgx-a100x2",
    },
    "bidir-ring": {
        "ring:5",
        "switch:8",
        "dgx1",
        "torus:3x3",
        "hypercube:3",
        "fully-connected:4",
        "amd-mi50",
        "dgx2",
        "ndv2x2",
        "dgx2x2",
        "dgx-a100x2",
    },
    "direct": {"switch:8", "fully-connected:4", "amd-mi50", "dgx2", "dgx2x2", "dgx-a100x2"},
    "recursive-doubling": {
        "dgx1",
        "ndv2x2",
        "switch:8",
        "hypercube:3",
        "fully-connected:4",
        "amd-mi50",
        "dgx2",
        "dgx2x2",
        "dgx-a100x2",
    },
    "binomial-tree": {
        "dgx1",
        "ndv2x2",
        "switch:8",
        "hypercube:3",
        "fully-connected:4",
        "amd-mi50",
        "dgx2",
        "dgx2x2",
        "dgx-a100x2",
    },
    "hierarchical": {"ndv2x2", "dgx2x2", "dgx-a100x2"},
    "nccl": {
        "ring:5",
        "switch:8",
        "dgx1",
        "torus:3x3",
        "fully-connected:4",
        "amd-mi50",
        "dgx2",
        "dgx-h100",
        "ndv2x2",
        "dgx2x2",
        "dgx-a100x2",
    },
}


NOT_ON = {("hierarchical", "ndv2x2", "alltoall")}
"""Claimed collectives a supported topology cannot carry: an NDv2 machine has no NVLink 0 -> 5,
which the alltoall inside a machine sends on (as the direct one)."""

CASES = [
    (kind, name, coll)
    for kind in BASELINES
    for name in sorted(SUPPORTED[kind])
    for coll in COLLECTIVES
    if applies(kind, coll) and (kind, name, coll) not in NOT_ON
]


@pytest.mark.parametrize(("kind", "name", "coll"), CASES)
def test_baseline_verifies(kind, name, coll):
    topo = T.load(name)
    n = topo.num_ranks
    algo = make_baseline(
        kind,
        topo,
        make_collective(
            coll,
            n,
            default_chunks(kind, coll, n, topo),
            root=1 if coll in ("broadcast", "reduce", "gather", "scatter") else None,
        ),
    )
    algo.verify(topo)  # make_baseline verifies too; a second look costs nothing
    assert algo.provenance.method == f"baseline:{kind}"
    assert algo.num_steps >= 1


def test_every_kind_is_exercised_on_every_collective_it_claims():
    for kind in BASELINES:
        claimed = {c for c in COLLECTIVES if applies(kind, c)}
        assert claimed == {c for k, _, c in CASES if k == kind}


UNSUPPORTED = [
    ("ring", "line:4", "no ring"),
    ("ring", "star:5", "no ring"),
    ("direct", "dgx1", "no link 0 -> 5"),
    ("direct", "ring:5", "no link"),
    ("recursive-doubling", "ring:5", "power-of-two"),
    ("recursive-doubling", "torus:3x3", "power-of-two"),
    ("binomial-tree", "ring:5", "no link"),
    ("hierarchical", "dgx1", "one machine"),
    ("nccl", "line:4", "no ring"),
]


@pytest.mark.parametrize(("kind", "name", "why"), UNSUPPORTED)
def test_unsupported_topologies_are_clear_errors(kind, name, why):
    topo = T.load(name)
    coll = "broadcast" if kind == "binomial-tree" else "allgather"
    with pytest.raises(BaselineError, match=f"baseline {kind}.*{why}"):
        make_baseline(
            kind, topo, make_collective(coll, topo.num_ranks, default_chunks(kind, coll, topo.num_ranks, topo))
        )


def test_ring_allreduce_step_count():
    topo = T.ring(6)
    algo = make_baseline("ring", topo, make_collective("allreduce", 6, 6))
    assert algo.num_steps == 10 and algo.provenance.via == "reducescatter + allgather"


def test_allreduce_needs_chunks_divisible_by_ranks():
    with pytest.raises(BaselineError, match="divisible"):
        make_baseline("ring", T.ring(4), make_collective("allreduce", 4, 3))

"""Baselines: ring, bidirectional ring, direct, recursive doubling, binomial tree, hierarchical.

Each builder handles non-combining collectives; :func:`make_baseline` reaches the combining ones
by transformation (reducescatter and reduce through their dual on the reversed topology,
inverted; allreduce as reducescatter + allgather), so every baseline is verified the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from synth.algorithm import Algorithm, compose, invert
from synth.baselines.common import BaselineError, hamiltonian_cycle
from synth.baselines.direct import direct
from synth.baselines.hierarchical import hierarchical
from synth.baselines.ring import bidir_ring, ring
from synth.baselines.trees import binomial_tree, recursive_doubling
from synth.collectives import Collective, make_collective
from topologies.model import Topology

__all__ = ["BASELINES", "BaselineError", "default_chunks", "hamiltonian_cycle", "make_baseline"]

Builder = Callable[[Topology, Collective], Algorithm]

BASELINES: dict[str, tuple[Builder, frozenset[str]]] = {
    "ring": (ring, frozenset({"allgather", "alltoall", "broadcast", "scatter", "gather"})),
    "bidir-ring": (bidir_ring, frozenset({"allgather", "alltoall"})),
    "direct": (direct, frozenset({"allgather", "alltoall", "broadcast", "scatter", "gather"})),
    "recursive-doubling": (recursive_doubling, frozenset({"allgather"})),
    "binomial-tree": (binomial_tree, frozenset({"broadcast"})),
    "hierarchical": (hierarchical, frozenset({"allgather"})),
}
"""kind -> (builder, the non-combining collectives it builds directly)."""


def applies(kind: str, collective_name: str) -> bool:
    """Whether ``kind`` builds ``collective_name`` (directly or by transformation)."""
    direct_set = BASELINES[kind][1]
    if collective_name == "allreduce":
        return "allgather" in direct_set
    if collective_name == "reducescatter":
        return "allgather" in direct_set
    if collective_name == "reduce":
        return "broadcast" in direct_set
    return collective_name in direct_set


def default_chunks(kind: str, collective_name: str, num_ranks: int) -> int:
    """Chunks per rank a baseline is built with unless told otherwise: one per rank's piece (an
    allreduce splits each rank's buffer in ``num_ranks`` so it can reduce-scatter), twice that for
    the bidirectional ring, which sends half of each piece each way."""
    pieces = num_ranks if collective_name == "allreduce" else 1
    return 2 * pieces if kind == "bidir-ring" else pieces


def make_baseline(kind: str, topology: Topology, collective: Collective) -> Algorithm:
    """Build and verify the ``kind`` baseline of ``collective`` on ``topology``."""
    if kind not in BASELINES:
        raise BaselineError(f"unknown baseline {kind!r}: expected one of {', '.join(BASELINES)}")
    if not applies(kind, collective.name):
        raise BaselineError(f"baseline {kind} does not apply to {collective.name}")
    n, c = collective.num_ranks, collective.chunks_per_rank
    if collective.name == "allreduce":
        if c % n:
            raise BaselineError(
                f"baseline {kind}: allreduce is built as reducescatter + allgather and needs chunks per rank "
                f"divisible by {n} ranks, got {c}"
            )
        rs = make_baseline(kind, topology, make_collective("reducescatter", n, c // n))
        ag = make_baseline(kind, topology, make_collective("allgather", n, c // n))
        algo = compose(rs, ag, collective, via="reducescatter + allgather")
    elif collective.combining:
        dual = BASELINES[kind][0](topology.reverse(), collective.dual())
        algo = invert(dual, collective)
    else:
        algo = BASELINES[kind][0](topology, collective)
    algo.verify(topology)
    return algo

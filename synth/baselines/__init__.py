"""Baselines: ring, bidirectional ring, direct, recursive doubling, binomial tree, hierarchical,
and ``nccl``: NCCL's own algorithms on the channels NCCL's search finds on the topology.

Each builder handles some collectives; :func:`make_baseline` reaches the others through
:mod:`synth.reductions` (reducescatter, reduce and gather through their dual on the reversed
topology, inverted; allreduce as reducescatter + allgather), so every baseline is verified the
same way. ``nccl`` builds each of its collectives itself, as NCCL does (:mod:`synth.baselines.nccl`),
and takes the NCCL algorithm to run (``algo``).
"""

from __future__ import annotations

from collections.abc import Callable

from synth.algorithm import Algorithm
from synth.baselines.common import BaselineError, hamiltonian_cycle
from synth.baselines.direct import direct
from synth.baselines.hierarchical import hierarchical
from synth.baselines.nccl import COLLECTIVES as NCCL_COLLECTIVES
from synth.baselines.nccl import NCCL_ALGOS, nccl, nccl_chunks
from synth.baselines.ring import bidir_ring, ring
from synth.baselines.trees import binomial_tree, recursive_doubling
from synth.collectives import DUALS, Collective
from synth.reductions import (
    DUAL,
    REDUCESCATTER_ALLGATHER,
    Problem,
    Reduction,
    ReductionError,
    Solution,
    solve_reduced,
)
from topologies.model import Topology

__all__ = ["BASELINES", "NCCL_ALGOS", "BaselineError", "default_chunks", "hamiltonian_cycle", "make_baseline"]

Builder = Callable[..., Algorithm]
"""``builder(topology, collective)``; ``nccl`` also takes ``algo``."""

BASELINES: dict[str, tuple[Builder, frozenset[str]]] = {
    "ring": (ring, frozenset({"allgather", "alltoall", "broadcast", "scatter"})),
    "bidir-ring": (bidir_ring, frozenset({"allgather", "alltoall"})),
    "direct": (direct, frozenset({"allgather", "alltoall", "broadcast", "scatter", "gather"})),
    "recursive-doubling": (recursive_doubling, frozenset({"allgather"})),
    "binomial-tree": (binomial_tree, frozenset({"broadcast"})),
    "hierarchical": (hierarchical, frozenset({"allgather", "alltoall"})),
    "nccl": (nccl, NCCL_COLLECTIVES),
}
"""kind -> (builder, the collectives it builds directly)."""


def applies(kind: str, collective_name: str) -> bool:
    """Whether ``kind`` builds ``collective_name`` (directly or through a reduction)."""
    if collective_name in BASELINES[kind][1]:
        return True
    if collective_name == "allreduce":
        return applies(kind, "reducescatter") and applies(kind, "allgather")
    return collective_name in DUALS and applies(kind, DUALS[collective_name])


def default_chunks(
    kind: str, collective_name: str, num_ranks: int, topology: Topology | None = None, algo: str | None = None
) -> int:
    """Chunks per rank a baseline is built with unless told otherwise: one per rank's piece (an
    allreduce splits each rank's buffer in ``num_ranks`` so it can reduce-scatter), twice that for
    the bidirectional ring, which sends half of each piece each way; for ``nccl``, what gives each of
    NCCL's channels on ``topology`` its share (:func:`synth.baselines.nccl.nccl_chunks`)."""
    if kind == "nccl":
        if topology is None:
            raise BaselineError("baseline nccl: its chunks follow NCCL's channels: give the topology")
        return nccl_chunks(topology, collective_name, algo or "auto")
    if algo is not None:
        raise BaselineError(f"baseline {kind} takes no algorithm (only nccl does)")
    pieces = num_ranks if collective_name == "allreduce" else 1
    return 2 * pieces if kind == "bidir-ring" else pieces


def _reduction(kind: str, problem: Problem) -> Reduction | None:
    """None where ``kind`` builds the collective itself, else the reduction that gets it there."""
    name = problem.collective.name
    if name in BASELINES[kind][1]:
        return None
    return REDUCESCATTER_ALLGATHER if name == "allreduce" else DUAL


def make_baseline(
    kind: str, topology: Topology, collective: Collective, algo: str | None = None
) -> Algorithm:
    """Build and verify the ``kind`` baseline of ``collective`` on ``topology``; ``algo`` picks
    NCCL's algorithm for ``nccl`` (one of :data:`NCCL_ALGOS`, default ``auto``)."""
    if kind not in BASELINES:
        raise BaselineError(f"unknown baseline {kind!r}: expected one of {', '.join(BASELINES)}")
    if not applies(kind, collective.name):
        raise BaselineError(f"baseline {kind} does not apply to {collective.name}")
    if algo is not None and kind != "nccl":
        raise BaselineError(f"baseline {kind} takes no algorithm (only nccl does)")
    options = {} if algo is None else {"algo": algo}

    def build(problem: Problem) -> Solution:
        algo = BASELINES[kind][0](problem.topology, problem.collective, **options)
        algo.verify(problem.topology)
        return Solution(algo)

    try:
        return solve_reduced(Problem(topology, collective), lambda p: _reduction(kind, p), build).algorithm
    except ReductionError as exc:  # an allreduce whose chunks do not split among the ranks
        raise BaselineError(f"baseline {kind}: {exc}") from None

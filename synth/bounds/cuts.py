"""The bandwidth bound where the exact flow LP is too big: LPs per class of alike ranks, and cuts.

The exact LP (:mod:`synth.bounds.flow`) has one column per commodity and arc: 512 ranks x 3,000
arcs on a 64-machine cluster, ``n`` x ``2n`` on a ring of 100,000 ranks. Past
:data:`LP_COLUMNS` the rate ``x`` comes from what only needs a few ranks, each giving an upper
bound on ``x`` (so a lower bound on the time) whichever ranks are chosen:

- multicast data (allgather, broadcast): one single-commodity LP per destination, for one
  destination per class of alike ranks (:meth:`topologies.model.Topology.rank_classes`). The exact LP is
  the least of these over every destination, so this is exact where the classes are orbits.
- every collective: cuts. A set ``S`` of vertices whose ranks must receive ``D`` chunks from
  outside bounds ``x <= capacity into S / D``. The sets tried are each representative rank, its
  machine, the two halves of the rank numbering (a ring's, torus's or hypercube's bisection),
  each alone or with the switches only its ranks use, and their complements.

Only the collectives the reductions leave (allgather, broadcast, alltoall, scatter, gather) have a
pattern here; each is read from the collective's name and size, never from its n x n chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from synth.bounds.flow import flow_network, max_rate
from synth.collectives import Collective
from topologies.model import Link, Topology, Vertex

__all__ = ["LP_COLUMNS", "Capacities", "scaled_rate"]

LP_COLUMNS = 200_000
"""Columns (commodities x arcs) of the largest flow LP solved whole; HiGHS takes about 3 s there."""

LP_ARCS = 50_000
"""Arcs of the largest single-destination LP solved (a 512-GPU cluster has about 3,000)."""

Demand = Callable[[frozenset[int]], float]


def _demand(collective: Collective) -> tuple[Demand, bool]:
    """Chunks that must enter a set of ranks from outside it, and whether the data is multicast."""
    n, c, root = collective.num_ranks, collective.chunks_per_rank, collective.root
    patterns: dict[str, tuple[Demand, bool]] = {
        "allgather": (lambda s: c * (n - len(s)) if s else 0, True),
        "broadcast": (lambda s: c if s and root not in s else 0, True),
        "alltoall": (lambda s: c * len(s) * (n - len(s)), False),
        "scatter": (lambda s: c * len(s) if root not in s else 0, False),
        "gather": (lambda s: c * (n - len(s)) if root in s else 0, False),
    }
    if collective.name not in patterns:
        raise ValueError(f"no bandwidth pattern for {collective.name}")  # reductions leave none else
    return patterns[collective.name]


def representatives(topology: Topology, avoid: int | None = None) -> list[int]:
    """One rank per class of alike ranks (the least one that is not ``avoid``)."""
    out = []
    for cls in topology.rank_classes():
        pick = next((r for r in cls if r != avoid), None)
        if pick is not None:
            out.append(pick)
    return out


def _rank_sets(topology: Topology, reps: list[int]) -> Iterator[frozenset[int]]:
    n = topology.num_ranks
    for r in reps:
        yield frozenset({r})
        yield frozenset(topology.machine_ranks(topology.node_of[r]))
    yield frozenset(range(n // 2))
    yield frozenset(range(n // 2, n))


def _local_switches(topology: Topology, ranks: frozenset[int]) -> set[Vertex]:
    """Switches wired to some rank and to ranks of ``ranks`` only."""
    out = set()
    for s in topology.switches:
        touching = [v for v in topology.neighbours(s) if isinstance(v, int)]
        if touching and all(v in ranks for v in touching):
            out.add(s)
    return out


@dataclass(frozen=True, eq=False)
class Capacities:
    """The physical edges as arrays, in ``Topology.links()`` order: tail and head ids (ranks keep
    theirs, switches follow in the topology's order) and each edge's capacity. A cut is a sum over
    a mask (no dict or list per vertex: hypercube:17 has 2.2 M edges)."""

    names: tuple[Vertex, ...]
    ids: dict[Vertex, int]
    tails: np.ndarray
    heads: np.ndarray
    caps: np.ndarray

    @classmethod
    def of(cls, topology: Topology, capacity: Callable[[Link], float]) -> Capacities:
        """Each edge's capacity from ``capacity(link)``."""
        arrays = topology.arrays
        caps = np.array([capacity(link) for link in arrays.values], dtype=float)[arrays.which]
        return cls(arrays.names, arrays.ids, arrays.tails, arrays.heads, caps)

    def as_dict(self) -> dict[tuple[Vertex, Vertex], float]:
        """``{(src, dst): capacity}`` in the same order (what the flow LPs take)."""
        names = self.names
        return {
            (names[t], names[h]): c
            for t, h, c in zip(self.tails.tolist(), self.heads.tolist(), self.caps.tolist(), strict=True)
        }

    def mask(self, vertices: Iterable[Vertex]) -> np.ndarray:
        """A vertex mask, by id."""
        out = np.zeros(len(self.names), dtype=bool)
        out[[self.ids[v] for v in vertices]] = True
        return out

    def capacity_into(self, inside: np.ndarray) -> float:
        """Capacity of the edges from outside the masked vertices into them."""
        return float(self.caps[inside[self.heads] & ~inside[self.tails]].sum())


def _cut_rate(topology: Topology, collective: Collective, cuts: Capacities, reps: list[int]) -> float:
    """The least ``capacity into S / chunks S must receive`` over the sets tried."""
    demand, _ = _demand(collective)
    everyone = frozenset(topology.ranks)
    rank_mask = cuts.mask(everyone)
    best = float("inf")
    for ranks in set(_rank_sets(topology, reps)):
        local = _local_switches(topology, ranks)
        ranks_in, both_in = cuts.mask(ranks), cuts.mask([*ranks, *local])
        for need, masks in (
            (demand(ranks), (ranks_in, both_in)),  # the ranks, alone and with their switches
            (demand(everyone - ranks), (rank_mask & ~ranks_in, ~both_in)),  # the complements
        ):
            if need > 0:
                best = min(best, *(cuts.capacity_into(m) / need for m in masks))
    return best


def scaled_rate(topology: Topology, collective: Collective, cuts: Capacities) -> tuple[float, str]:
    """An upper bound on the exact LP's rate and the words saying how it was found."""
    _, multicast = _demand(collective)
    reps = representatives(topology, avoid=collective.root)
    rate = _cut_rate(topology, collective, cuts, reps)
    how = f"cuts around {len(reps)} representative rank(s), their machines and halves"
    n_arcs = len(cuts.caps)
    if multicast and n_arcs <= LP_ARCS and len(reps) * n_arcs <= 2 * LP_COLUMNS:
        arcs = flow_network(topology, cuts.as_dict())
        n, c, root = collective.num_ranks, collective.chunks_per_rank, collective.root
        for d in reps:
            sources = [root] if root is not None else [s for s in range(n) if s != d]
            supply = {s: float(c) for s in sources}
            supply[d] = -float(c) * len(sources)
            rate = min(rate, max_rate(arcs, [supply], shared=False))
        how = f"flow LP per class of alike ranks ({len(reps)} destination(s)) and cuts"
    return rate, how

"""Cuts: sets of ranks whose incoming links an algorithm must (nearly) fill.

For a set ``T`` of ranks, every chunk that no rank of ``T`` holds initially but some rank of ``T``
needs must cross into ``T`` at least once (``need`` crossings). Over R rounds the capacity
constraints that carry those crossings (the *cover*) move at most ``capacity * R`` chunks, so the
*slack* ``capacity * R - need`` bounds the capacity an algorithm may leave unused on the cover over
the whole run. Two consequences are implied constraints (true of every algorithm, so adding them
loses nothing) that the SAT solver would otherwise have to rediscover by counting:

- in each step, each cover constraint carries at least ``its capacity * that step's rounds - slack``;
- at zero slack no chunk crosses needlessly: each needed chunk enters ``T`` exactly once, no other
  chunk enters it, and the cover carries nothing else.

Examples: on DGX-1 allgather with R/C = 7/6 every single rank is a zero-slack cut (each link full in
every round); on DGX-1 alltoall with R/C = 8/3 the two sockets are.
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.collectives import Collective
from topologies.logical import CapacityConstraint, ChunkCapacity

__all__ = ["ALL_SUBSETS_UP_TO", "Cut", "find_cuts"]

ALL_SUBSETS_UP_TO = 10
"""Up to this many ranks every subset is a candidate; above it, single ranks and their complements."""


@dataclass(frozen=True)
class Cut:
    ranks: frozenset[int]
    crossing: frozenset[tuple[int, int]]
    """Logical links from outside ``ranks`` into it."""
    needing: frozenset[int]
    """Chunks that must cross into ``ranks`` (no source inside, some destination inside)."""
    cover: tuple[CapacityConstraint, ...]
    """Capacity constraints that carry some crossing link."""

    @property
    def need(self) -> int:
        return len(self.needing)

    @property
    def capacity(self) -> int:
        return sum(c.capacity for c in self.cover)

    def slack(self, rounds: int) -> int:
        return self.capacity * rounds - self.need


def _candidates(n: int) -> list[frozenset[int]]:
    if n <= ALL_SUBSETS_UP_TO:
        return [frozenset(r for r in range(n) if mask >> r & 1) for mask in range(1, (1 << n) - 1)]
    singles = [frozenset({r}) for r in range(n)]
    return singles + [frozenset(range(n)) - s for s in singles]


def find_cuts(capacity: ChunkCapacity, collective: Collective) -> list[Cut]:
    """Candidate cuts that some chunk must cross (their slack depends on the rounds)."""
    n = collective.num_ranks
    pairs = [(int(u), int(v)) for u, v in zip(*capacity.links.nonzero(), strict=True)]
    cuts = []
    for ranks in _candidates(n):
        needing = frozenset(
            cid for cid, ch in enumerate(collective.chunks) if not (ch.pre & ranks) and (ch.post & ranks)
        )
        if not needing:
            continue
        crossing = frozenset((u, v) for u, v in pairs if u not in ranks and v in ranks)
        cover = tuple(c for c in capacity.constraints if c.pairs & crossing)
        cuts.append(Cut(ranks, crossing, needing, cover))
    return cuts

"""Classes of alike ranks, by colour refinement of the physical graph: cheap stand-ins for orbits.

Two ranks in different classes are never exchanged by a symmetry of the topology; two ranks in
one class usually are (always on rings, tori, hypercubes, switches and identical machines wired
alike), but colour refinement cannot prove it. What uses the classes must therefore stay right
when they are coarser than the orbits: the bounds take the maximum of a lower bound over one rank
per class, which is a lower bound whatever the classes are, and exact where they are orbits.

Each round gives a vertex a new colour from its old one and the multisets of (link, colour) of
its successors and of its predecessors (sorted per vertex as arrays, compared as bytes): time
linear in the links per round, and at most
:data:`MAX_ROUNDS` rounds (a long line would take one round per hop; stopping early only leaves
the classes coarser).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["MAX_ROUNDS", "rank_classes"]

MAX_ROUNDS = 64
"""Refinement rounds at most (each costs one pass over the links)."""


def rank_classes(topo: Topology) -> tuple[tuple[int, ...], ...]:
    """The ranks split into classes of alike ranks, each ascending, ordered by their least rank."""
    arrays = topo.arrays
    label = arrays.alike[arrays.which]  # equal links share a label
    into, into_offsets = arrays.into
    colour = np.array(
        _compress([("rank",)] * topo.num_ranks + [("switch", k) for k in arrays.switches.values()])
    )
    for _ in range(MAX_ROUNDS):
        k = int(colour.max(initial=0)) + 1
        out = _rows(arrays.tails, label * k + colour[arrays.heads], arrays.offsets)
        back = _rows(arrays.heads[into], (label * k + colour[arrays.tails])[into], into_offsets)
        refined = np.array(_compress(list(zip(colour.tolist(), out, back, strict=True))))
        if refined.max(initial=0) == colour.max(initial=0):
            break  # no class split: stable
        colour = refined
    groups: dict[int, list[int]] = {}
    for r, c in enumerate(colour[: topo.num_ranks].tolist()):
        groups.setdefault(c, []).append(r)
    return tuple(sorted(tuple(g) for g in groups.values()))


def _rows(owners: np.ndarray, keys: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Each vertex's multiset of ``keys`` (``owners`` ascending, vertex ``v``'s entries at
    ``offsets[v]:offsets[v + 1]``) as the bytes of its sorted keys: equal multisets, equal bytes."""
    order = np.lexsort((keys, owners))
    data = keys[order].astype(np.int64).tobytes()
    at = (offsets * 8).tolist()
    return [data[at[v] : at[v + 1]] for v in range(len(at) - 1)]


def _compress(keys: list) -> list[int]:
    """Each key's index among the distinct keys in first-seen order (refines the old colours)."""
    index: dict = {}
    return [index.setdefault(k, len(index)) for k in keys]

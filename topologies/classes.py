"""Classes of alike ranks, by colour refinement of the physical graph: cheap stand-ins for orbits.

Two ranks in different classes are never exchanged by a symmetry of the topology; two ranks in
one class usually are (always on rings, tori, hypercubes, switches and identical machines wired
alike), but colour refinement cannot prove it. What uses the classes must therefore stay right
when they are coarser than the orbits: the bounds take the maximum of a lower bound over one rank
per class, which is a lower bound whatever the classes are, and exact where they are orbits.

Each round gives a vertex a new colour from its old one and the multisets of (link, colour) of
its successors and of its predecessors: time linear in the links per round, and at most
:data:`MAX_ROUNDS` rounds (a long line would take one round per hop; stopping early only leaves
the classes coarser).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["MAX_ROUNDS", "rank_classes"]

MAX_ROUNDS = 64
"""Refinement rounds at most (each costs one pass over the links)."""


def rank_classes(topo: Topology) -> tuple[tuple[int, ...], ...]:
    """The ranks split into classes of alike ranks, each ascending, ordered by their least rank."""
    names = [*topo.ranks, *topo.switches]
    ids = {v: i for i, v in enumerate(names)}
    kinds = topo.switches
    succ: list[list[tuple[int, int]]] = [[] for _ in names]
    pred: list[list[tuple[int, int]]] = [[] for _ in names]
    labels: dict = {}
    for u, v, link in topo.links():
        label = labels.setdefault(link, len(labels))
        succ[ids[u]].append((label, ids[v]))
        pred[ids[v]].append((label, ids[u]))
    colour = _compress([("rank",) if isinstance(v, int) else ("switch", kinds[v]) for v in names])
    for _ in range(MAX_ROUNDS):
        refined = _compress(
            [
                (
                    colour[i],
                    tuple(sorted((lab, colour[j]) for lab, j in succ[i])),
                    tuple(sorted((lab, colour[j]) for lab, j in pred[i])),
                )
                for i in range(len(names))
            ]
        )
        if max(refined, default=0) == max(colour, default=0):
            break  # no class split: stable
        colour = refined
    groups: dict[int, list[int]] = {}
    for r in topo.ranks:
        groups.setdefault(colour[r], []).append(r)
    return tuple(sorted(tuple(g) for g in groups.values()))


def _compress(keys: list) -> list[int]:
    """Each key's index among the distinct keys in first-seen order (refines the old colours)."""
    index: dict = {}
    return [index.setdefault(k, len(index)) for k in keys]

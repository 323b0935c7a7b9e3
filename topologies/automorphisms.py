"""Symmetries of a topology: rank permutations that map every link onto an equal link.

SMT and MILP synthesis use them to break symmetry (fix or tie variables of equivalent ranks).
Switch vertices may be permuted too, but only the rank permutation is reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # both load networkx; the package imports this module eagerly (see topologies/__init__.py)
    from networkx.algorithms.isomorphism import DiGraphMatcher

    from topologies.model import Topology

__all__ = ["automorphisms", "isomorphisms"]

Permutation = tuple[int, ...]


def _matcher(a: Topology, b: Topology) -> DiGraphMatcher:
    from networkx.algorithms.isomorphism import DiGraphMatcher

    def node_match(x: dict, y: dict) -> bool:
        return x["kind"] == y["kind"]

    def edge_match(x: dict, y: dict) -> bool:
        return x["link"] == y["link"]

    return DiGraphMatcher(a.graph, b.graph, node_match=node_match, edge_match=edge_match)


def isomorphisms(a: Topology, b: Topology, limit: int | None = None) -> Iterator[Permutation]:
    """Rank maps ``perm`` with ``perm[rank of a] = rank of b`` that carry ``a``'s links onto ``b``'s.

    Machines are preserved: ranks of one machine of ``a`` land on one machine of ``b``.
    Yields each distinct rank permutation once, at most ``limit`` of them.
    """
    if a.num_ranks != b.num_ranks:
        return
    seen: set[Permutation] = set()
    for mapping in _matcher(a, b).isomorphisms_iter():
        perm = tuple(mapping[r] for r in a.ranks)
        if perm in seen:
            continue
        machine_map: dict[int, int] = {}
        if any(
            machine_map.setdefault(a.node_of[r], b.node_of[perm[r]]) != b.node_of[perm[r]] for r in a.ranks
        ):
            continue
        seen.add(perm)
        yield perm
        if limit is not None and len(seen) >= limit:
            return


def automorphisms(topo: Topology, limit: int | None = None) -> Iterator[Permutation]:
    """The topology's symmetries (identity first); switch topologies have many, so pass ``limit``."""
    yield tuple(topo.ranks)
    count = 1
    for perm in isomorphisms(topo, topo):
        if perm == tuple(topo.ranks):
            continue
        if limit is not None and count >= limit:
            return
        count += 1
        yield perm

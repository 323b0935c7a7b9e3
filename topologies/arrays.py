"""The physical links as arrays: what a :class:`~topologies.model.Topology` holds.

A vertex has an integer id: a rank keeps its number, the switches follow in the order they were
declared. The links are three arrays in the topology's link order (by source id, then in the
order they were added: networkx's order, which the routes' tie-breaking and every writer follow)
and a table of the distinct :class:`Link` values, so a 2.2 M-link hypercube holds a few arrays
instead of 2.2 M networkx edge dicts (hypercube:17 took 30 s and most of a GB to load that way).
The networkx graph, the per-pair lookups and the reverse index are made when first asked for.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from topologies.errors import TopologyError

if TYPE_CHECKING:
    import networkx as nx

    from topologies.model import Link, Vertex

__all__ = ["LinkArrays", "reached"]


@dataclass(frozen=True, eq=False)
class LinkArrays:
    """Directed links ``tails[i] -> heads[i]`` of value ``values[which[i]]``, in link order;
    ``added[j]`` is the link-order position of the ``j``-th link as added."""

    num_ranks: int
    switches: Mapping[str, str]
    tails: np.ndarray
    heads: np.ndarray
    which: np.ndarray
    values: tuple[Link, ...]
    added: np.ndarray

    @classmethod
    def from_ids(
        cls,
        num_ranks: int,
        switches: Mapping[str, str],
        tails: np.ndarray,
        heads: np.ndarray,
        which: np.ndarray,
        values: tuple[Link, ...],
    ) -> LinkArrays:
        """From id arrays in the order the links were added (no pair twice: the caller's)."""
        order = np.argsort(tails, kind="stable")
        added = np.empty_like(order)
        added[order] = np.arange(len(order))
        return cls(num_ranks, dict(switches), tails[order], heads[order], which[order], values, added)

    @classmethod
    def from_dict(
        cls,
        num_ranks: int,
        switches: Mapping[str, str],
        links: Mapping[tuple[Vertex, Vertex], Link],
        where: str,
    ) -> LinkArrays:
        """From ``{(src, dst): Link}``; a vertex that is neither a rank nor a declared switch is refused."""
        ids: dict = {r: r for r in range(num_ranks)}
        ids.update((name, num_ranks + i) for i, name in enumerate(switches))
        try:
            tails = np.fromiter((ids[u] for u, _ in links), dtype=np.int64, count=len(links))
            heads = np.fromiter((ids[v] for _, v in links), dtype=np.int64, count=len(links))
        except (KeyError, TypeError):
            bad = next(v for pair in links for v in pair if not (isinstance(v, Hashable) and v in ids))
            raise TopologyError(
                f"{where}: links: {bad!r} is neither a rank 0..{num_ranks - 1} nor a declared switch"
            ) from None
        values: list[Link] = []
        by_id: dict[int, int] = {}  # builders share one Link object over many links
        by_value: dict[tuple[Link, str], int] = {}  # 25 and 25.0 are equal but print apart

        def index(link: Link) -> int:
            k = by_id.get(id(link))
            if k is None:
                k = by_id[id(link)] = by_value.setdefault((link, repr(link)), len(values))
                if k == len(values):
                    values.append(link)
            return k

        which = np.fromiter((index(link) for link in links.values()), dtype=np.int64, count=len(links))
        return cls.from_ids(num_ranks, switches, tails, heads, which, tuple(values))

    @classmethod
    def of_family(cls, num_ranks: int, tails: np.ndarray, heads: np.ndarray, link: Link) -> LinkArrays:
        """Links between ranks that all share ``link``, in the order given; a pair listed again
        keeps its first place (as a dict of pairs would)."""
        keys = tails * num_ranks + heads
        _, first = np.unique(keys, return_index=True)
        keep = np.sort(first)
        which = np.zeros(len(keep), dtype=np.int64)
        return cls.from_ids(num_ranks, {}, tails[keep], heads[keep], which, (link,))

    # -- reading ---------------------------------------------------------------------------
    @cached_property
    def names(self) -> tuple[Vertex, ...]:
        """Vertex id -> vertex: the ranks, then the switches."""
        return (*range(self.num_ranks), *self.switches)

    @cached_property
    def ids(self) -> dict[Vertex, int]:
        return {v: i for i, v in enumerate(self.names)}

    @cached_property
    def alike(self) -> np.ndarray:
        """Each value's class of equal values (``values`` keeps 25 and 25.0 apart; they are equal)."""
        index: dict[Link, int] = {}
        return np.array([index.setdefault(link, len(index)) for link in self.values], dtype=np.int64)

    @property
    def num_vertices(self) -> int:
        return self.num_ranks + len(self.switches)

    def __len__(self) -> int:
        return len(self.tails)

    @cached_property
    def offsets(self) -> np.ndarray:
        """The links out of vertex ``v`` are ``offsets[v]:offsets[v + 1]``."""
        return np.searchsorted(self.tails, np.arange(self.num_vertices + 1))

    @cached_property
    def into(self) -> tuple[np.ndarray, np.ndarray]:
        """``(order, offsets)``: link positions sorted by head (then tail), and where each head's start."""
        order = np.argsort(self.heads, kind="stable")  # tails ascend within a head: link order is by tail
        return order, np.searchsorted(self.heads[order], np.arange(self.num_vertices + 1))

    def links(self) -> Iterator[tuple[Vertex, Vertex, Link]]:
        names, values = self.names, self.values
        for t, h, w in zip(self.tails.tolist(), self.heads.tolist(), self.which.tolist(), strict=True):
            yield names[t], names[h], values[w]

    @cached_property
    def _keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Every link's ``tail * vertices + head``, sorted, and the link positions in that order."""
        keys = self.tails * self.num_vertices + self.heads
        order = np.argsort(keys)
        return keys[order], order

    def position(self, src: Vertex, dst: Vertex) -> int | None:
        """Where the link ``src -> dst`` is in link order (None where there is none)."""
        a, b = self.ids.get(src), self.ids.get(dst)
        if a is None or b is None:
            return None
        keys, order = self._keys
        key = a * self.num_vertices + b
        i = int(np.searchsorted(keys, key))
        return int(order[i]) if i < len(keys) and int(keys[i]) == key else None

    def reverse_positions(self) -> np.ndarray:
        """Each link's opposite link's position (-1 where there is none)."""
        keys, order = self._keys
        wanted = self.heads * self.num_vertices + self.tails
        i = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
        found = keys[i] == wanted if len(keys) else np.zeros(0, dtype=bool)
        return np.where(found, order[i] if len(keys) else i, -1)

    def graph(self) -> nx.DiGraph:
        """The frozen networkx graph, its links added in bulk in the order they were first added
        (so every vertex's predecessors come in the same order as before)."""
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(range(self.num_ranks), kind="rank")
        for sw, kind in self.switches.items():
            graph.add_node(sw, kind=kind)
        names, values = self.names, self.values
        pos = self.added
        graph.add_edges_from(
            (names[t], names[h], {"link": values[w]})
            for t, h, w in zip(
                self.tails[pos].tolist(), self.heads[pos].tolist(), self.which[pos].tolist(), strict=True
            )
        )
        return nx.freeze(graph)

    def reversed(self) -> LinkArrays:
        """Every link turned around, added in this link order (what ``Topology.reverse`` built)."""
        return LinkArrays.from_ids(
            self.num_ranks, self.switches, self.heads, self.tails, self.which, self.values
        )


def reached(offsets: np.ndarray, targets: np.ndarray, start: int) -> list[bool]:
    """Which vertices ``start`` reaches over the rows ``targets[offsets[v]:offsets[v + 1]]``
    (a depth-first search: only the set is wanted; a ring of 100,000 ranks has 50,000 levels,
    too many for one NumPy step each)."""
    bounds = offsets.tolist()
    seen = [False] * (len(bounds) - 1)
    seen[start] = True
    stack = [start]
    while stack:
        v = stack.pop()
        for w in targets[bounds[v] : bounds[v + 1]].tolist():
            if not seen[w]:
                seen[w] = True
                stack.append(w)
    return seen

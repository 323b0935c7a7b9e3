"""Derived views of a topology: SCCL's rank-to-rank links and its integer capacity model.

A logical link ``src -> dst`` exists where the two ranks are wired directly or joined by a path
through switches only. Every physical edge on such a path is a shared *resource*: all logical
links through a switch port share that port's capacity. Paths obey two rules of real hardware:
a NIC does not forward from one local rank to another (it only bridges ranks and the network),
and a path through a network switch joins ranks of different machines.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from itertools import pairwise
from math import gcd
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from topologies.model import Link, Topology, Vertex

__all__ = [
    "CapacityConstraint",
    "ChunkCapacity",
    "LogicalLink",
    "LogicalTopology",
    "Resource",
    "derive_chunk_capacity",
    "derive_logical",
]

Edge = tuple["Vertex", "Vertex"]

MAX_CHUNKS_PER_ROUND = 64
"""Above this many chunks per round the gcd unit is useless for SMT; fall back to the slowest link."""


@dataclass(frozen=True)
class Resource:
    """A physical edge as a shared resource: ``count`` servers of ``bandwidth_GBps`` each."""

    edge: Edge
    bandwidth_GBps: float
    count: int
    alpha_us: float

    @property
    def name(self) -> str:
        return f"{self.edge[0]}->{self.edge[1]}"


@dataclass(frozen=True)
class LogicalLink:
    """A rank-to-rank route: the physical path, its latency and its per-transfer bandwidth."""

    src: int
    dst: int
    path: tuple[Vertex, ...]
    alpha_us: float
    bandwidth_GBps: float

    @property
    def edges(self) -> tuple[Edge, ...]:
        return tuple(zip(self.path, self.path[1:], strict=False))

    @property
    def direct(self) -> bool:
        return len(self.path) == 2


@dataclass(frozen=True, eq=False)
class LogicalTopology:
    """Rank-to-rank links ``{(src, dst): LogicalLink}`` and the resources ``{edge: Resource}``."""

    num_ranks: int
    links: dict[tuple[int, int], LogicalLink]
    resources: dict[Edge, Resource]

    @cached_property
    def users(self) -> dict[Edge, tuple[tuple[int, int], ...]]:
        """For every resource, the logical links that pass through it."""
        out: dict[Edge, list[tuple[int, int]]] = {edge: [] for edge in self.resources}
        for pair, link in self.links.items():
            for edge in link.edges:
                out[edge].append(pair)
        return {edge: tuple(pairs) for edge, pairs in out.items() if pairs}

    @cached_property
    def _neighbours(self) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
        """``(successors, predecessors)`` of every rank, each sorted."""
        out: dict[int, list[int]] = {r: [] for r in range(self.num_ranks)}
        inn: dict[int, list[int]] = {r: [] for r in range(self.num_ranks)}
        for src, dst in self.links:
            out[src].append(dst)
            inn[dst].append(src)
        return _sorted_values(out), _sorted_values(inn)

    def successors(self, rank: int) -> tuple[int, ...]:
        return self._neighbours[0][rank]

    def predecessors(self, rank: int) -> tuple[int, ...]:
        return self._neighbours[1][rank]

    @cached_property
    def hops(self) -> np.ndarray:
        """``hops[src, dst]``: fewest logical links from src to dst (-1 where unreachable)."""
        n = self.num_ranks
        dist = np.full((n, n), -1, dtype=np.int64)
        for src in range(n):
            dist[src, src] = 0
            queue = deque([src])
            while queue:
                u = queue.popleft()
                for v in self.successors(u):
                    if dist[src, v] < 0:
                        dist[src, v] = dist[src, u] + 1
                        queue.append(v)
        return dist


@dataclass(frozen=True)
class CapacityConstraint:
    """At most ``capacity`` chunks per round in total over the logical links in ``pairs``."""

    name: str
    pairs: frozenset[tuple[int, int]]
    capacity: int


@dataclass(frozen=True, eq=False)
class ChunkCapacity:
    """SCCL's integer model: one round moves one chunk over ``unit_GBps`` of bandwidth.

    ``links[src, dst]`` is the chunks per round of the logical link (0 where there is none);
    ``constraints`` has one entry per physical edge, listing the logical links that share it.
    """

    num_ranks: int
    unit_GBps: float
    links: np.ndarray
    constraints: tuple[CapacityConstraint, ...]
    edge_capacity: dict[Edge, int]

    def rounds_needed(self, pairs: Iterable[tuple[int, int]]) -> int:
        """Fewest rounds in which one chunk per listed pair (repeats allowed) fits every constraint."""
        load: dict[tuple[int, int], int] = {}
        for pair in pairs:
            load[pair] = load.get(pair, 0) + 1
        rounds = 1 if load else 0
        for c in self.constraints:
            used = sum(load.get(p, 0) for p in c.pairs)
            if used:
                rounds = max(rounds, -(-used // c.capacity))
        return rounds

    def overloaded(
        self, pairs: Iterable[tuple[int, int]], rounds: int
    ) -> list[tuple[CapacityConstraint, int]]:
        """The constraints that ``pairs`` exceed in ``rounds`` rounds, with their load."""
        load: dict[tuple[int, int], int] = {}
        for pair in pairs:
            load[pair] = load.get(pair, 0) + 1
        over = []
        for c in self.constraints:
            used = sum(load.get(p, 0) for p in c.pairs)
            if used > c.capacity * rounds:
                over.append((c, used))
        return over


def _path_rules_ok(topo: Topology, path: list[Vertex], nxt: Vertex) -> bool:
    kinds = topo.switches
    if isinstance(nxt, int):
        # a NIC reached straight from a rank may not hand data to another rank
        if len(path) >= 2 and kinds.get(path[-1]) == "nic" and isinstance(path[-2], int):
            return False
        # a path through the network joins different machines
        if any(kinds.get(v) == "network" for v in path[1:]):
            return topo.node_of[path[0]] != topo.node_of[nxt]
    return True


def _sorted_values(lists: dict[int, list[int]]) -> dict[int, tuple[int, ...]]:
    return {key: tuple(sorted(values)) for key, values in lists.items()}


def _shortest_routes(topo: Topology, src: int) -> dict[int, list[Vertex]]:
    """Fewest-hop path from ``src`` to every rank it reaches directly or through switches only."""
    routes: dict[int, list[Vertex]] = {}
    graph = topo.graph
    for nbr in graph.successors(src):
        if isinstance(nbr, int) and nbr != src:
            routes[nbr] = [src, nbr]
    queue: deque[list[Vertex]] = deque(
        [src, nbr] for nbr in graph.successors(src) if not isinstance(nbr, int)
    )
    while queue:
        path = queue.popleft()
        for nxt in graph.successors(path[-1]):
            if nxt in path or not _path_rules_ok(topo, path, nxt):
                continue
            if isinstance(nxt, int):
                if nxt not in routes:
                    routes[nxt] = [*path, nxt]
            else:
                queue.append([*path, nxt])
    return routes


def derive_logical(topo: Topology) -> LogicalTopology:
    resources: dict[Edge, Resource] = {}
    for u, v, link in topo.links():
        resources[(u, v)] = Resource((u, v), link.bandwidth_GBps, link.count, link.alpha_us)
    links: dict[tuple[int, int], LogicalLink] = {}
    for src in topo.ranks:
        for dst, path in sorted(_shortest_routes(topo, src).items()):
            edges: list[Link] = [topo.graph.edges[u, v]["link"] for u, v in pairwise(path)]
            links[(src, dst)] = LogicalLink(
                src=src,
                dst=dst,
                path=tuple(path),
                alpha_us=sum(e.alpha_us for e in edges),
                bandwidth_GBps=min(e.bandwidth_GBps for e in edges),
            )
    return LogicalTopology(topo.num_ranks, links, resources)


def _unit(bandwidths: list[float]) -> float:
    fracs = [Fraction(b).limit_denominator(1000) for b in bandwidths]
    num = 0
    den = 1
    for f in fracs:
        den = den * f.denominator // gcd(den, f.denominator)
    for f in fracs:
        num = gcd(num, f.numerator * (den // f.denominator))
    unit = num / den
    if max(bandwidths) / unit > MAX_CHUNKS_PER_ROUND:
        return min(bandwidths)
    return unit


def derive_chunk_capacity(topo: Topology, unit_GBps: float | None = None) -> ChunkCapacity:
    logical = topo.logical()
    if unit_GBps is None:
        used = {edge for link in logical.links.values() for edge in link.edges}
        unit_GBps = _unit([logical.resources[e].bandwidth_GBps for e in sorted(used, key=repr)] or [1.0])
    if unit_GBps <= 0:
        raise ValueError("unit_GBps must be positive")
    edge_capacity = {
        edge: res.count * max(1, int(res.bandwidth_GBps / unit_GBps + 1e-9))
        for edge, res in logical.resources.items()
    }
    n = topo.num_ranks
    matrix = np.zeros((n, n), dtype=np.int64)
    for (src, dst), link in logical.links.items():
        matrix[src, dst] = min(edge_capacity[e] for e in link.edges)
    constraints = tuple(
        CapacityConstraint(logical.resources[edge].name, frozenset(pairs), edge_capacity[edge])
        for edge, pairs in logical.users.items()
    )
    return ChunkCapacity(n, unit_GBps, matrix, constraints, edge_capacity)

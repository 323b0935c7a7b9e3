"""Derived views of a topology: SCCL's rank-to-rank links and its integer capacity model.

A logical link ``src -> dst`` exists where the two ranks are wired directly or joined by a path
through switches only (:mod:`topologies.routes` finds it). Every physical edge on such a path is a
shared *resource*: all logical links through a switch port share that port's capacity.

Both views are lazy: a link is routed when it is first asked for, a rank's neighbours when they
are, so what needs a few pairs (the timing engine, the verifier, a ring baseline) never builds the
n x (n - 1) links of a switched cluster. Whatever iterates over every link (``links`` as a whole,
``users``, ``hops``, :attr:`ChunkCapacity.links`, ``constraints``: the SMT encodings, ``xccl topo
show``) builds them then, once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from itertools import pairwise
from math import gcd
from typing import TYPE_CHECKING

import numpy as np

from topologies.routes import RouteGraph, Table

if TYPE_CHECKING:
    from topologies.model import Topology, Vertex

__all__ = [
    "CapacityConstraint",
    "ChunkCapacity",
    "LogicalLink",
    "LogicalTopology",
    "Overload",
    "Resource",
    "chunks_per_round",
    "derive_chunk_capacity",
    "derive_logical",
]

Edge = tuple["Vertex", "Vertex"]

MAX_CHUNKS_PER_ROUND = 64
"""Above this many chunks per round the gcd unit is useless for SMT; fall back to the slowest link."""

TABLES_KEPT = 64
"""Sources whose whole route tables are kept (a table holds one route per reachable rank)."""

ROUTES_KEPT = 1 << 18
"""Routes found but not yet asked for that :meth:`LogicalTopology.link` keeps, over all sources (a
512-GPU cluster has 261,632 routes), and :data:`WALKS_KEPT` the searches it keeps to resume: past
either, the sources asked longest ago are dropped, and a lookup from one of them searches again.
Together at most about 120 MB (1,024 GPUs, a far pair asked from every rank)."""
WALKS_KEPT = 1024


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


class LogicalLinks(Mapping[tuple[int, int], LogicalLink]):
    """``{(src, dst): LogicalLink}`` of a :class:`LogicalTopology`, routed on demand: a lookup
    routes one pair; iterating or ``len`` routes every pair (sources in order, destinations
    ascending)."""

    def __init__(self, view: LogicalTopology) -> None:
        self._view = view

    def __getitem__(self, pair: tuple[int, int]) -> LogicalLink:
        link = self._view.link(*pair) if _is_pair(pair, self._view.num_ranks) else None
        if link is None:
            raise KeyError(pair)
        return link

    def __contains__(self, pair: object) -> bool:
        known = self._view._links.get(pair, _UNKNOWN) if type(pair) is tuple else _UNKNOWN
        if known is not _UNKNOWN:  # asked before: the verifier asks once per send
            return known is not None
        return _is_pair(pair, self._view.num_ranks) and self._view.link(*pair) is not None  # type: ignore[misc]

    def get(self, pair: tuple[int, int], default=None):  # type: ignore[override]
        link = self._view.link(*pair) if _is_pair(pair, self._view.num_ranks) else None
        return default if link is None else link

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for src in range(self._view.num_ranks):
            for dst in self._view.successors(src):
                yield (src, dst)

    def items(self) -> ItemsView[tuple[int, int], LogicalLink]:
        return _Items(self)

    def values(self) -> ValuesView[LogicalLink]:
        return _Values(self)

    def _pairs(self) -> Iterator[tuple[int, int, LogicalLink]]:
        """Every link with its pair, in ``__iter__``'s order, without looking each pair up again
        (the Mapping mixins' ``items`` and ``values`` do: a third of a 512-GPU symmetry search)."""
        view = self._view
        for src in range(view.num_ranks):
            for dst in view.successors(src):
                yield src, dst, view.link(src, dst)  # type: ignore[misc]  # a successor has a link

    def __len__(self) -> int:
        return sum(len(self._view.successors(src)) for src in range(self._view.num_ranks))


class _Items(ItemsView):
    def __iter__(self) -> Iterator[tuple[tuple[int, int], LogicalLink]]:
        return (((src, dst), link) for src, dst, link in self._mapping._pairs())


class _Values(ValuesView):
    def __iter__(self) -> Iterator[LogicalLink]:
        return (link for _, _, link in self._mapping._pairs())


_UNKNOWN = object()


def _is_pair(pair: object, n: int) -> bool:
    return (
        isinstance(pair, tuple)
        and len(pair) == 2
        and all(isinstance(r, int) and 0 <= r < n for r in pair)
        and pair[0] != pair[1]
    )


class LogicalTopology:
    """Rank-to-rank links (``links``, ``link``), each rank's neighbours, hop and latency distances,
    and the resources ``{edge: Resource}`` (every physical edge)."""

    def __init__(self, topo: Topology) -> None:
        self.num_ranks = topo.num_ranks
        self.graph = RouteGraph(topo)
        self._topo = topo
        self._links: dict[tuple[int, int], LogicalLink | None] = {}
        self._tables: OrderedDict[int, Table] = OrderedDict()
        self._walks: OrderedDict[int, tuple[Iterator[tuple[int, tuple[int, ...]]], Table]] = OrderedDict()
        """Per source, its search where the last lookup stopped it and the routes it found since
        that nobody asked for yet (:meth:`link`)."""
        self._kept = 0
        """Routes held in :attr:`_walks`."""
        self._succ: dict[int, tuple[int, ...]] = {}
        self._pred: dict[int, tuple[int, ...]] = {}
        self._direct = not topo.arrays.switches
        """No switches: the logical links are the physical ones, read from the route graph's rows
        without a route table per rank (hypercube:17's latency bound asks for all 131,072)."""

    @cached_property
    def resources(self) -> dict[Edge, Resource]:
        """Every physical edge as a :class:`Resource`, in the topology's order (made when first
        asked for: the bounds never need the 2.2 M of hypercube:17)."""
        return {
            (u, v): Resource((u, v), lk.bandwidth_GBps, lk.count, lk.alpha_us)
            for u, v, lk in self._topo.links()
        }

    @cached_property
    def links(self) -> LogicalLinks:
        return LogicalLinks(self)

    def link(self, src: int, dst: int) -> LogicalLink | None:
        """The logical link ``src -> dst``, or None where there is none.

        One search finds all of a source's routes, so asking for many pairs one search each
        costs up to n times more (a 512-GPU tree schedule's 36,000 pairs: about 100 s against
        2 s). A lookup therefore resumes its source's search where the last one stopped, keeping
        the routes it passes (:data:`ROUTES_KEPT`): a caller asking pair by pair pays one search
        per source, and one asking a pair (a ring's neighbour) no more than that pair's."""
        key = (src, dst)
        if key in self._links:
            return self._links[key]
        table = self._tables.get(src)
        ids = table.get(dst) if table is not None else self._walk_to(src, dst)
        link = None if ids is None else self._make(ids)
        self._links[key] = link
        return link

    def _walk_to(self, src: int, dst: int) -> tuple[int, ...] | None:
        """``dst``'s route from ``src``'s search, resumed (and kept) where it stopped."""
        walks = self._walks
        if src in walks:
            walk, found = walks[src]
            walks.move_to_end(src)
        else:
            walk, found = walks[src] = (self.graph.walk(src), {})
        ids = found.pop(dst, None)
        if ids is not None:
            self._kept -= 1
            return ids
        for w, path in walk:
            if w == dst:
                ids = path
                break
            found[w] = path
            self._kept += 1
        while (self._kept > ROUTES_KEPT or len(walks) > WALKS_KEPT) and len(walks) > 1:
            self._kept -= len(walks.popitem(last=False)[1][1])
        return ids

    def route(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Route every listed pair now, one search per source, for callers about to look many
        links up (the verifier); :meth:`link` alone costs no more, searching each source once
        as its pairs are asked, but keeps what it passes meanwhile. Pairs that are not two ranks
        are skipped."""
        n = self.num_ranks
        by_source: dict[int, set[int]] = {}
        for src, dst in pairs:
            if (src, dst) not in self._links and 0 <= src < n and 0 <= dst < n and src != dst:
                by_source.setdefault(src, set()).add(dst)
        for src in sorted(by_source):
            self.table(src)  # the newest table: every lookup below reads it
            for dst in sorted(by_source[src]):
                self.link(src, dst)

    def _make(self, ids: tuple[int, ...]) -> LogicalLink:
        g = self.graph
        hops = [g.link(a, b) for a, b in pairwise(ids)]
        return LogicalLink(
            src=ids[0],
            dst=ids[-1],
            path=tuple(g.names[i] for i in ids),
            alpha_us=sum(e.alpha_us for e in hops),
            bandwidth_GBps=min(e.bandwidth_GBps for e in hops),
        )

    def table(self, src: int) -> Table:
        """Every route from ``src`` (the last :data:`TABLES_KEPT` sources asked are kept)."""
        table = self._tables.get(src)
        if table is None:
            table = self.graph.routes(src)
            self._tables[src] = table
            if len(self._tables) > TABLES_KEPT:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(src)
        return table

    def alphas_from(self, src: int) -> Iterator[tuple[int, float]]:
        """``(dst, link(src, dst).alpha_us)`` of every logical link out of ``src``, read from its
        route table: no :class:`LogicalLink` is made or kept (a latency bound on hypercube:17 asks
        for all 2.2 M links once; keeping them held 0.6 GB)."""
        if self._direct:
            yield from zip(self.graph.succ[src], [lk.alpha_us for lk in self.graph.succ_links[src]], strict=True)
            return
        link = self.graph.link
        for dst, ids in self.table(src).items():  # the routes link() takes; summed as _make sums
            yield dst, sum(link(a, b).alpha_us for a, b in pairwise(ids))

    def successors(self, rank: int) -> tuple[int, ...]:
        """The ranks ``rank`` has a logical link to, ascending."""
        if self._direct:
            return tuple(sorted(self.graph.succ[rank]))
        out = self._succ.get(rank)
        if out is None:
            out = self._succ[rank] = tuple(sorted(self.table(rank)))
        return out

    def predecessors(self, rank: int) -> tuple[int, ...]:
        """The ranks with a logical link to ``rank``, ascending."""
        if self._direct:
            return tuple(self.graph.pred[rank])  # ascending
        out = self._pred.get(rank)
        if out is None:
            out = self._pred[rank] = tuple(sorted(self.graph.routes(rank, reverse=True)))
        return out

    def hops_from(self, src: int) -> list[int]:
        """Fewest logical links from ``src`` to every rank (-1 where unreachable)."""
        return self.graph.hop_distances(src, self.successors)

    def alpha_from(self, src: int) -> list[float]:
        """Least summed latency from ``src`` to every rank (see :meth:`RouteGraph.alpha_distances`)."""
        return self.graph.alpha_distances(src)

    @cached_property
    def hops(self) -> np.ndarray:
        """``hops[src, dst]`` for every pair (all pairs: small topologies; else :meth:`hops_from`)."""
        return np.array([self.hops_from(src) for src in range(self.num_ranks)], dtype=np.int64).reshape(
            self.num_ranks, self.num_ranks
        )

    @cached_property
    def users(self) -> dict[Edge, tuple[tuple[int, int], ...]]:
        """For every resource, the logical links that pass through it (all pairs)."""
        out: dict[Edge, list[tuple[int, int]]] = {edge: [] for edge in self.resources}
        for pair, link in self.links.items():
            for edge in link.edges:
                out[edge].append(pair)
        return {edge: tuple(pairs) for edge, pairs in out.items() if pairs}


@dataclass(frozen=True)
class CapacityConstraint:
    """At most ``capacity`` chunks per round in total over the logical links in ``pairs``."""

    name: str
    pairs: frozenset[tuple[int, int]]
    capacity: int


@dataclass(frozen=True)
class Overload:
    """A physical edge carrying ``used`` chunks where ``capacity`` per round x rounds fit."""

    name: str
    capacity: int
    used: int


class ChunkCapacity:
    """SCCL's integer model: one round moves one chunk over ``unit_GBps`` of bandwidth.

    ``edge_capacity[edge]`` is the chunks per round of a physical edge; a logical link carries
    the least over its path (:meth:`pair`); the loads of a set of sends are counted per edge
    (:meth:`rounds_needed`, :meth:`overloaded`). ``links`` (the n x n matrix) and
    ``constraints`` (one per edge, with every pair through it) are built on first use.
    """

    def __init__(self, logical: LogicalTopology, unit_GBps: float) -> None:
        self.num_ranks = logical.num_ranks
        self.unit_GBps = unit_GBps
        self._logical = logical

    @cached_property
    def edge_capacity(self) -> dict[Edge, int]:
        """Chunks per round of every physical edge (made when first asked for)."""
        unit = self.unit_GBps
        return {
            edge: chunks_per_round(res.bandwidth_GBps, res.count, unit)
            for edge, res in self._logical.resources.items()
        }

    def pair(self, src: int, dst: int) -> int:
        """Chunks per round of the logical link ``src -> dst`` (0 where there is none)."""
        link = self._logical.link(src, dst)
        return 0 if link is None else min(self.edge_capacity[e] for e in link.edges)

    @cached_property
    def links(self) -> np.ndarray:
        """``links[src, dst]``: :meth:`pair` of every pair."""
        n = self.num_ranks
        matrix = np.zeros((n, n), dtype=np.int64)
        for src, dst in self._logical.links:
            matrix[src, dst] = self.pair(src, dst)
        return matrix

    @cached_property
    def constraints(self) -> tuple[CapacityConstraint, ...]:
        """One per physical edge some link uses: the pairs through it and its capacity."""
        resources = self._logical.resources
        return tuple(
            CapacityConstraint(resources[edge].name, frozenset(pairs), self.edge_capacity[edge])
            for edge, pairs in self._logical.users.items()
        )

    def _loads(self, pairs: Iterable[tuple[int, int]]) -> dict[Edge, int]:
        count: dict[tuple[int, int], int] = {}
        for pair in pairs:
            count[pair] = count.get(pair, 0) + 1
        load: dict[Edge, int] = {}
        for (src, dst), k in count.items():
            link = self._logical.link(src, dst)
            for edge in link.edges if link is not None else ():  # a missing link is the caller's to report
                load[edge] = load.get(edge, 0) + k
        return load

    def rounds_needed(self, pairs: Iterable[tuple[int, int]]) -> int:
        """Fewest rounds in which one chunk per listed pair (repeats allowed) fits every edge."""
        load = self._loads(pairs)
        rounds = 1 if load else 0
        for edge, used in load.items():
            rounds = max(rounds, -(-used // self.edge_capacity[edge]))
        return rounds

    def overloaded(self, pairs: Iterable[tuple[int, int]], rounds: int) -> list[Overload]:
        """The edges that ``pairs`` load past ``rounds`` rounds, in the resources' order."""
        load = self._loads(pairs)
        order = self._logical.resources
        over = [(edge, used) for edge, used in load.items() if used > self.edge_capacity[edge] * rounds]
        index = {edge: i for i, edge in enumerate(order)} if over else {}
        over.sort(key=lambda item: index[item[0]])
        return [Overload(order[e].name, self.edge_capacity[e], used) for e, used in over]


def derive_logical(topo: Topology) -> LogicalTopology:
    return LogicalTopology(topo)


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


def chunks_per_round(bandwidth_GBps: float, count: int, unit_GBps: float) -> int:
    """Chunks per round of ``count`` links of ``bandwidth_GBps`` (at least one per link)."""
    return count * max(1, int(bandwidth_GBps / unit_GBps + 1e-9))


def derive_chunk_capacity(topo: Topology, unit_GBps: float | None = None) -> ChunkCapacity:
    """The integer model; its unit is the gcd of the bandwidths of the edges (every physical edge
    can carry some route in a topology worth synthesizing for) unless given."""
    logical = topo.logical()
    if unit_GBps is None:
        bandwidths = {link.bandwidth_GBps for link in topo.arrays.values}
        unit_GBps = _unit(sorted(bandwidths) or [1.0])
    if unit_GBps <= 0:
        raise ValueError("unit_GBps must be positive")
    return ChunkCapacity(logical, unit_GBps)

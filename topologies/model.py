"""The physical topology: ranks (GPUs) and switches joined by directed links.

Users describe hardware as it is: GPUs wired to each other or to a switch, NICs to a network
switch. The graph stays sparse (a switch is one vertex, not a clique of links); views that
synthesizers want (rank-to-rank links with shared capacities) are derived in :mod:`topologies.logical`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from topologies import limits
from topologies.arrays import LinkArrays, reached
from topologies.errors import TopologyError

if TYPE_CHECKING:
    import networkx as nx

    from topologies.logical import ChunkCapacity, LogicalTopology

__all__ = ["SWITCH_KINDS", "Link", "Nic", "Topology", "Vertex"]

Vertex = int | str
"""A rank is an ``int`` in ``0..num_ranks-1``; a switch is named by a ``str``."""

SWITCH_KINDS = ("nvswitch", "nvls", "pcie", "nic", "network")
"""``nic`` switches forward only between their machine's ranks and a network switch; ``nvls`` is an
NVSwitch that can also reduce and multicast (NVLink SHARP, NVSwitch gen3 and later: H100 and on),
which NCCL's NVLS algorithms use."""


@dataclass(frozen=True)
class Link:
    """One directed edge: ``count`` parallel links of ``bandwidth_GBps`` each, ``alpha_us`` latency."""

    bandwidth_GBps: float
    alpha_us: float
    count: int = 1

    @property
    def total_GBps(self) -> float:
        return self.bandwidth_GBps * self.count


@dataclass(frozen=True)
class Nic:
    """A machine's network interface: the ranks it serves; used when machines are composed."""

    name: str
    ranks: tuple[int, ...]
    bandwidth_GBps: float
    alpha_us: float


@dataclass(frozen=True, eq=False)
class Topology:
    """A directed graph of ranks and switches (see DESIGN.md, core types).

    The links are held as arrays (:class:`topologies.arrays.LinkArrays`, ``arrays``); ``graph``
    is the same graph as a frozen :class:`networkx.DiGraph`, made when first asked for: each edge
    carries a :class:`Link` under the key ``"link"`` and switch vertices carry their ``kind``.
    ``node_of[rank]`` is the machine index. Build one with :meth:`build` (validating) or a builder
    in :mod:`topologies.builders`.
    """

    name: str
    num_ranks: int
    arrays: LinkArrays = dataclasses.field(repr=False)
    node_of: tuple[int, ...]
    nics: tuple[Nic, ...] = ()
    description: str = ""
    source: str = ""

    @classmethod
    def build(
        cls,
        name: str,
        num_ranks: int,
        links: dict[tuple[Vertex, Vertex], Link],
        switches: dict[str, str] | None = None,
        node_of: tuple[int, ...] | None = None,
        nics: tuple[Nic, ...] = (),
        description: str = "",
        source: str = "",
        where: str = "",
    ) -> Topology:
        """Make a topology from directed links ``{(src, dst): Link}`` and ``{switch: kind}``.

        ``where`` (a file name) prefixes any validation error. Sizes past :mod:`topologies.limits`
        are refused before the graph is built.
        """
        limits.check_ranks(where or name, num_ranks)
        limits.check_links(where or name, len(links))
        arrays = LinkArrays.from_dict(num_ranks, switches or {}, links, where or name)
        return cls.from_arrays(name, arrays, node_of, nics, description, source, where)

    @classmethod
    def from_arrays(
        cls,
        name: str,
        arrays: LinkArrays,
        node_of: tuple[int, ...] | None = None,
        nics: tuple[Nic, ...] = (),
        description: str = "",
        source: str = "",
        where: str = "",
    ) -> Topology:
        """:meth:`build` from links already held as arrays (the family builders': no dict of
        2.2 M pairs for hypercube:17)."""
        n = arrays.num_ranks
        limits.check_ranks(where or name, n)
        limits.check_links(where or name, len(arrays))
        pairs = limits.logical_links_bound(n, arrays.tails, arrays.heads)
        limits.check_links(where or name, pairs, "rank-to-rank links (at most)")
        topo = cls(
            name=name,
            num_ranks=n,
            arrays=arrays,
            node_of=tuple(node_of) if node_of is not None else (0,) * n,
            nics=tuple(nics),
            description=description,
            source=source,
        )
        topo.check(where)
        return topo

    # -- structure -------------------------------------------------------------------------
    @property
    def ranks(self) -> range:
        return range(self.num_ranks)

    @property
    def switches(self) -> dict[str, str]:
        """``{name: kind}`` of every switch vertex, in insertion order."""
        return dict(self.arrays.switches)

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The topology as a frozen networkx graph (made on first use, from the arrays)."""
        return self.arrays.graph()

    @property
    def num_links(self) -> int:
        """Directed physical links (``graph.number_of_edges()`` without making the graph)."""
        return len(self.arrays)

    @property
    def num_machines(self) -> int:
        return max(self.node_of) + 1 if self.node_of else 0

    def machine_ranks(self, machine: int) -> tuple[int, ...]:
        return tuple(r for r in self.ranks if self.node_of[r] == machine)

    def links(self) -> Iterator[tuple[Vertex, Vertex, Link]]:
        """Every directed edge with its :class:`Link`, in a deterministic order."""
        return self.arrays.links()

    def link(self, src: Vertex, dst: Vertex) -> Link | None:
        i = self.arrays.position(src, dst)
        return None if i is None else self.arrays.values[int(self.arrays.which[i])]

    def neighbours(self, v: Vertex) -> tuple[Vertex, ...]:
        """The vertices ``v`` has a link to or from (``graph.successors`` then ``predecessors``,
        without making the graph; predecessors by id, not in the order they were added)."""
        a = self.arrays
        i = a.ids[v]
        order, into = a.into
        ids = [*a.heads[a.offsets[i] : a.offsets[i + 1]].tolist(), *a.tails[order[into[i] : into[i + 1]]].tolist()]
        return tuple(a.names[j] for j in ids)

    # -- derived views ---------------------------------------------------------------------
    @cached_property
    def _logical(self) -> LogicalTopology:
        from topologies.logical import derive_logical

        return derive_logical(self)

    def logical(self) -> LogicalTopology:
        """SCCL's view: rank-to-rank links and the shared resources (edges) each one uses, routed
        on demand (:mod:`topologies.logical`)."""
        return self._logical

    @cached_property
    def _chunk_capacity(self) -> ChunkCapacity:
        from topologies.logical import derive_chunk_capacity

        return derive_chunk_capacity(self)

    def chunk_capacity(self, unit_GBps: float | None = None) -> ChunkCapacity:
        """SCCL's integer model: chunks per round of every link and shared resource."""
        if unit_GBps is None:
            return self._chunk_capacity
        from topologies.logical import derive_chunk_capacity

        return derive_chunk_capacity(self, unit_GBps)

    @cached_property
    def _rank_classes(self) -> tuple[tuple[int, ...], ...]:
        from topologies.classes import rank_classes

        return rank_classes(self)

    def rank_classes(self) -> tuple[tuple[int, ...], ...]:
        """Classes of alike ranks (:mod:`topologies.classes`): never split an orbit."""
        return self._rank_classes

    def reverse(self) -> Topology:
        """Every link turned around (used to synthesize a combining collective through its dual)."""
        fields = (self.node_of, self.nics, self.description, self.source)
        return Topology.from_arrays(self.name, self.arrays.reversed(), *fields)

    def is_symmetric(self) -> bool:
        """True when every link has an equal link in the opposite direction (checked once)."""
        return self._symmetric

    @cached_property
    def _symmetric(self) -> bool:
        opposite = self.arrays.reverse_positions()
        if (opposite < 0).any():
            return False
        alike = self.arrays.alike[self.arrays.which]
        return bool((alike[opposite] == alike).all())

    # -- validation ------------------------------------------------------------------------
    def check(self, where: str = "") -> None:
        """Raise :class:`TopologyError` unless every link value is in range and every rank can
        reach every other rank."""
        prefix = f"{where or self.name}: "
        if self.num_ranks < 1:
            raise TopologyError(f"{prefix}ranks: expected at least 1 rank")
        if len(self.node_of) != self.num_ranks:
            raise TopologyError(
                f"{prefix}node_of: expected {self.num_ranks} entries, got {len(self.node_of)}"
            )
        self._check_values(prefix)
        self._check_reach(prefix)

    def _check_reach(self, prefix: str) -> None:
        """Rank 0 reaches every rank and every rank reaches rank 0, each way breadth-first.

        Without NICs and network switches (whose routing rules forbid some paths) a chain of
        logical links is any path of the physical graph, so the search runs on its arrays;
        otherwise over the logical links (on a switch fabric the first rank's routes usually
        reach them all)."""
        for seen, words in self._reach():
            unreached = next((r for r, ok in enumerate(seen) if not ok), None)
            if unreached is not None:
                raise TopologyError(f"{prefix}links: {words.format(unreached)}; every rank must reach every other")

    def _reach(self) -> Iterator[tuple[list[bool], str]]:
        """Whether each rank is reached from rank 0, then whether it reaches rank 0, each with
        the words of its error."""
        words = ("rank 0 cannot reach rank {}", "rank {} cannot reach rank 0")
        if any(kind in ("nic", "network") for kind in self.arrays.switches.values()):
            logical = self.logical()
            yield [d >= 0 for d in logical.hops_from(0)], words[0]
            yield [d >= 0 for d in logical.graph.hop_distances(0, logical.predecessors)], words[1]
            return
        a, n = self.arrays, self.num_ranks
        forward = reached(a.offsets, a.heads, 0)[:n]
        yield forward, words[0]
        if not self.is_symmetric():  # else what reaches rank 0 is what rank 0 reaches
            order, into = a.into
            forward = reached(into, a.tails[order], 0)[:n]
        yield forward, words[1]

    def _check_values(self, prefix: str) -> None:
        """Values computed by builders and callers obey the same ranges as the file format's.

        Each distinct link value is checked once (a family has one), so that this stays cheap
        for millions of links."""
        which = self.arrays.which
        _, first = np.unique(which, return_index=True)
        distinct = {self.arrays.values[int(which[i])] for i in np.sort(first)}  # as the links come
        for item in [*distinct, *self.nics]:
            checks = [
                ("bandwidth_GBps", item.bandwidth_GBps, limits.bandwidth_problem),
                ("alpha_us", item.alpha_us, limits.alpha_problem),
            ]
            if isinstance(item, Link):
                checks.append(("count", item.count, limits.count_problem))
            for field, value, problem in checks:
                expected = problem(value)
                if expected:
                    raise TopologyError(
                        f"{prefix}{self._name_of(item)}: {field}: expected {expected}, got {value!r}"
                    )

    def _name_of(self, item: Link | Nic) -> str:
        if isinstance(item, Nic):
            return f"nics: {item.name}"
        a = self.arrays
        alike = [i for i, link in enumerate(a.values) if link == item]
        first = int(np.flatnonzero(np.isin(a.which, alike))[0])
        return f"links: {a.names[int(a.tails[first])]} -> {a.names[int(a.heads[first])]}"

    # -- identity --------------------------------------------------------------------------
    @cached_property
    def _hash(self) -> int:
        """A hash of what equal topologies share, without listing the links (an edge list of a
        2.2 M-link hypercube, sorted, held half a GB): the graph is not changed after it is built."""
        summary = (self.name, self.num_ranks, self.num_links, frozenset(self.arrays.switches.items()))
        return hash((summary, self.node_of, self.nics))

    def __eq__(self, other: object) -> bool:
        """Same name, ranks, switches, machines, NICs and links (compared one link at a time)."""
        if self is other:
            return True
        if not isinstance(other, Topology) or hash(self) != hash(other):
            return False
        fields = ("name", "num_ranks", "switches", "node_of", "nics")
        if any(getattr(self, f) != getattr(other, f) for f in fields):
            return False
        if self.num_links != other.num_links:
            return False
        return all(other.link(u, v) == link for u, v, link in self.links())

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return (
            f"Topology({self.name!r}, ranks={self.num_ranks}, switches={len(self.switches)}, "
            f"links={self.num_links}, machines={self.num_machines})"
        )

"""The physical topology: ranks (GPUs) and switches joined by directed links.

Users describe hardware as it is: GPUs wired to each other or to a switch, NICs to a network
switch. The graph stays sparse (a switch is one vertex, not a clique of links); views that
synthesizers want (rank-to-rank links with shared capacities) are derived in :mod:`topologies.logical`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import networkx as nx

from topologies import limits
from topologies.errors import TopologyError

if TYPE_CHECKING:
    from topologies.logical import ChunkCapacity, LogicalTopology

__all__ = ["SWITCH_KINDS", "Link", "Nic", "Topology", "Vertex"]

_NO_EDGE: dict = {}

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

    ``graph`` is a frozen :class:`networkx.DiGraph`; each edge carries a :class:`Link` under the
    key ``"link"`` and switch vertices carry their ``kind``. ``node_of[rank]`` is the machine index.
    Build one with :meth:`build` (validating) or a builder in :mod:`topologies.builders`.
    """

    name: str
    num_ranks: int
    graph: nx.DiGraph
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
        pairs = limits.logical_links_bound(num_ranks, links)
        limits.check_links(where or name, pairs, "rank-to-rank links (at most)")
        switches = switches or {}
        graph = nx.DiGraph()
        graph.add_nodes_from(range(num_ranks), kind="rank")
        for sw, kind in switches.items():
            graph.add_node(sw, kind=kind)
        for (src, dst), link in links.items():
            graph.add_edge(src, dst, link=link)
        topo = cls(
            name=name,
            num_ranks=num_ranks,
            graph=nx.freeze(graph),
            node_of=tuple(node_of) if node_of is not None else (0,) * num_ranks,
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
        return {v: d["kind"] for v, d in self.graph.nodes(data=True) if not isinstance(v, int)}

    @property
    def num_machines(self) -> int:
        return max(self.node_of) + 1 if self.node_of else 0

    def machine_ranks(self, machine: int) -> tuple[int, ...]:
        return tuple(r for r in self.ranks if self.node_of[r] == machine)

    def links(self) -> Iterator[tuple[Vertex, Vertex, Link]]:
        """Every directed edge with its :class:`Link`, in a deterministic order."""
        for src, dst, data in self.graph.edges(data=True):
            yield src, dst, data["link"]

    def link(self, src: Vertex, dst: Vertex) -> Link | None:
        data = self.graph.get_edge_data(src, dst)
        return data["link"] if data else None

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
        links = {(dst, src): link for src, dst, link in self.links()}
        fields = (self.switches, self.node_of, self.nics, self.description, self.source)
        return Topology.build(self.name, self.num_ranks, links, *fields)

    def is_symmetric(self) -> bool:
        """True when every link has an equal link in the opposite direction (checked once)."""
        return self._symmetric

    @cached_property
    def _symmetric(self) -> bool:
        succ = self.graph.succ
        return all(succ[dst].get(src, _NO_EDGE).get("link") == link for src, dst, link in self.links())

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
        """Rank 0 reaches every rank and every rank reaches rank 0 (breadth-first over the logical
        links, each way; on a switch fabric the first rank's routes usually reach them all)."""
        logical = self.logical()
        for dist, words in (
            (logical.hops_from(0), "rank 0 cannot reach rank {}"),
            (logical.graph.hop_distances(0, logical.predecessors), "rank {} cannot reach rank 0"),
        ):
            unreached = next((r for r, d in enumerate(dist) if d < 0), None)
            if unreached is not None:
                raise TopologyError(f"{prefix}links: {words.format(unreached)}; every rank must reach every other")

    def _check_values(self, prefix: str) -> None:
        """Values computed by builders and callers obey the same ranges as the file format's.

        Each distinct link value is checked once (a family has one), so that this stays cheap
        for millions of links."""
        distinct = {link for _, _, link in self.graph.edges(data="link")}
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
        src, dst = next((s, d) for s, d, link in self.links() if link == item)
        return f"links: {src} -> {dst}"

    # -- identity --------------------------------------------------------------------------
    @cached_property
    def _hash(self) -> int:
        """A hash of what equal topologies share, without listing the links (an edge list of a
        2.2 M-link hypercube, sorted, held half a GB): the graph is not changed after it is built."""
        summary = (self.name, self.num_ranks, self.graph.number_of_edges(), frozenset(self.switches.items()))
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
        if self.graph.number_of_edges() != other.graph.number_of_edges():
            return False
        return all(other.link(u, v) == link for u, v, link in self.links())

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return (
            f"Topology({self.name!r}, ranks={self.num_ranks}, switches={len(self.switches)}, "
            f"links={self.graph.number_of_edges()}, machines={self.num_machines})"
        )

"""The engine's physics: what one transfer costs on a topology (see :mod:`synth.timing`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.memo import SameObjects
from common.units import BYTES_PER_US_PER_GBPS

if TYPE_CHECKING:
    from topologies.logical import Edge, LogicalLink
    from topologies.model import Topology

__all__ = ["CONNECTION", "Network", "Params", "Transfer"]

CONNECTION = "connection"
"""First item of a connection's resource key: ``("connection", src, dst, channel)`` where the feeder
knows the channel (the IR simulator), ``("connection", src, dst)`` where it does not (an Algorithm);
physical edges are pairs."""


@dataclass(frozen=True)
class Params:
    """The timing model's parameters besides the topology's ``alpha_us``, ``bandwidth_GBps`` and
    ``count``. Named sets of them (``ideal``, ``calibrated`` per protocol, with their sources) are
    in :mod:`synth.timing.calibration`; these defaults are the ideal model (line rate, no costs)."""

    model: str = "ideal"
    """The name of the set these values come from (printed with every modeled time)."""
    protocol: str = "Simple"
    """The NCCL protocol whose efficiency and per-send cost are in the values below."""
    launch_us: float = 0.0
    """Paid once per collective call, before anything moves (kernel launch and set-up)."""
    send_us: float = 0.0
    """Paid by every send (a primitive call of the runtime) before its bytes move; it occupies the
    connection (sender to receiver, on the send's channel where known) and the sender, not the
    physical edges."""
    rate_fraction: float = 1.0
    """The fraction of a link's line rate a transfer gets (achievable rate x protocol efficiency)."""
    tolerance_us: float = 1e-9
    """Two instants closer than this are the same: a transfer whose edges free within it of its
    turn starts then."""
    changed: str = ""
    """What was set apart from the named model (e.g. ``send 2 us``), for :attr:`label`."""

    def hold_us(self, bandwidth_GBps: float, nbytes: float) -> float:
        """How long ``nbytes`` hold one server of an edge of ``bandwidth_GBps``."""
        return nbytes / (bandwidth_GBps * self.rate_fraction * BYTES_PER_US_PER_GBPS)

    def occupy_us(self, link: LogicalLink, nbytes: float, send: bool = True) -> float:
        """How long a transfer over ``link`` keeps its connection and its sender busy: the send's
        cost (``send``: whether this transfer pays it) and the bytes at the link's rate."""
        return (self.send_us if send else 0.0) + self.hold_us(link.bandwidth_GBps, nbytes)

    def delay_us(self, link: LogicalLink, nbytes: float, send: bool = True) -> float:
        """From a transfer's start to its arrival: ``send cost + alpha + nbytes / rate``."""
        return link.alpha_us + self.occupy_us(link, nbytes, send)

    @property
    def label(self) -> str:
        """How printed times name this model: ``calibrated, Simple`` or ``ideal``."""
        name = self.model if self.model == "ideal" else f"{self.model}, {self.protocol}"
        return f"{name}, {self.changed}" if self.changed else name


@dataclass(frozen=True)
class Transfer:
    """One transfer over a logical link: it holds one server of each resource of ``path`` (engine
    resource id, microseconds), keeps its sender busy ``busy_us`` and arrives ``delay_us`` after
    its start."""

    path: tuple[tuple[int, float], ...]
    busy_us: float
    delay_us: float


@dataclass
class Network:
    """A topology's physical edges (and, when sends cost time, its connections) as the engine's
    resources, and the transfers over its logical links (each ``(src, dst, bytes)`` worked out once).

    A connection is made the first time a transfer uses it. On a known channel it is the runtime's
    (NCCL's ``ncclChannel.peers[peer]->send[0]``: one FIFO per channel and peer, driven by one
    threadblock in MSCCL) and carries one call at a time: two channels to one peer pay their
    per-send costs at once and share only the physical edges. Without a channel (an Algorithm,
    which has none) the connection ``src -> dst`` stands for the calls a compile puts on one
    channel per parallel link: it has as many servers as the fewest parallel links on its path (two
    NVLinks carry two sends at once). Sources: docs/nccl.md, "Calibration"."""

    topology: Topology
    params: Params = field(default_factory=lambda: _default())
    edges: list[Edge | tuple[str, int, int]] = field(init=False)
    """Engine resource id -> the physical edge, or a connection's key (:data:`CONNECTION`)."""
    servers: list[int] = field(init=False)
    """Engine resource id -> its number of servers."""
    _ids: dict[object, int] = field(init=False, repr=False)
    _cache: dict[tuple[int, int, float, bool, int | None], Transfer] = field(init=False, repr=False)
    _physicals: dict[tuple[int, int, float, bool], tuple] = field(init=False, repr=False)
    _links: dict[tuple[int, int], _Link] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        resources = self.topology.logical().resources
        self.edges = list(resources)
        self.servers = [resources[e].count for e in self.edges]
        self._ids = {e: i for i, e in enumerate(self.edges)}
        self._cache = {}
        self._physicals = _shared_physicals(self.topology, self.params)
        self._links = _PHYSICALS.get((self.topology,), "links", dict)

    def connection_servers(self, src: int, dst: int) -> int:
        """How many sends the connection ``src -> dst`` carries at once: its path's fewest parallel links."""
        return min(count for _, _, count in self._link(src, dst)[2])

    def _link(self, src: int, dst: int) -> _Link:
        """The logical link ``src -> dst`` as numbers, shared by every network of the topology
        (each model's asks it of every (src, dst) of a schedule: 261,632 at the 512-rank alltoall)."""
        out = self._links.get((src, dst))
        if out is None:
            logical = self.topology.logical()
            link = logical.links[(src, dst)]
            edges = tuple(
                (self._ids[e], logical.resources[e].bandwidth_GBps, logical.resources[e].count)
                for e in link.edges
            )
            out = self._links[(src, dst)] = (link.alpha_us, link.bandwidth_GBps, edges)
        return out

    def resource(self, key: object) -> int:
        """The engine id of a resource key (an edge or a connection), made on first use."""
        rid = self._ids.get(key)
        if rid is None:
            _, src, dst, *channel = key  # only connections are made late
            rid = len(self.edges)
            self.edges.append(key)
            self.servers.append(1 if channel else self.connection_servers(src, dst))
            self._ids[key] = rid
        return rid

    def transfer(
        self, src: int, dst: int, nbytes: float, send: bool = True, channel: int | None = None
    ) -> Transfer:
        """``nbytes`` from rank ``src`` to rank ``dst`` (the logical link must exist); ``send``: the
        transfer pays the per-send cost (a tile after a call's first does not); ``channel``: the
        runtime channel it goes on, where known (its connection is that channel's)."""
        key = (src, dst, nbytes, send, channel)
        out = self._cache.get(key)
        if out is None:
            p = self.params
            edges, occupy, delay = self._physical(src, dst, nbytes, send)
            path = edges
            if p.send_us > 0:
                conn = (CONNECTION, src, dst) if channel is None else (CONNECTION, src, dst, channel)
                path = (*edges, (self.resource(conn), occupy))
            out = self._cache[key] = Transfer(path, occupy, delay)
        return out

    def _physical(
        self, src: int, dst: int, nbytes: float, send: bool
    ) -> tuple[tuple[tuple[int, float], ...], float, float]:
        """A transfer's physical edges with their holds, its occupancy and its delay: the same on
        every channel (the IR simulator asks once per connection, three channels to a peer)."""
        key = (src, dst, nbytes, send)
        out = self._physicals.get(key)
        if out is None:
            alpha_us, bandwidth_GBps, link = self._link(src, dst)
            p = self.params
            edges = tuple((e, p.hold_us(bandwidth, nbytes)) for e, bandwidth, _ in link)
            if len(self._physicals) >= _KEPT_PHYSICALS:
                self._physicals.clear()  # a sweep over sizes asks new ones at each size
            occupy = (p.send_us if send else 0.0) + p.hold_us(bandwidth_GBps, nbytes)  # Params.occupy_us
            out = self._physicals[key] = (edges, occupy, alpha_us + occupy)  # Params.delay_us
        return out


_PHYSICALS = SameObjects()
"""Per model (:class:`Params`), the physical part of the transfers asked on the last topology: every
network of a topology numbers its physical edges alike (connections come after them), and a compile
asks the same ``(src, dst, bytes)`` of the Algorithm model and of the IR simulator in each model
(the 512-rank trees: 131,072 of them); and, for every model, its logical links as numbers
(:data:`_Link`), which hold nothing of the topology."""
_Link = tuple[float, float, tuple[tuple[int, float, int], ...]]
"""A logical link: its ``alpha_us``, its ``bandwidth_GBps`` and per physical edge of its path the
edge's engine id, bandwidth and count."""
_KEPT_PHYSICALS = 262_144
"""Transfers kept per model (about 450 bytes each), for the latest two models (a compile's
calibrated and ideal ones)."""


def _shared_physicals(topology: Topology, params: Params) -> dict[tuple[int, int, float, bool], tuple]:
    """The physical part of the transfers of ``params`` on ``topology`` (:data:`_PHYSICALS`)."""
    held: dict[Params, dict] = _PHYSICALS.get((topology,), "physicals", dict)
    if params not in held:
        if len(held) >= 2:
            del held[next(iter(held))]
        held[params] = {}
    return held[params]


def _default() -> Params:
    from synth.timing.calibration import DEFAULT

    return DEFAULT

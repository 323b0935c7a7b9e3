"""The engine's physics: what one transfer costs on a topology (see :mod:`synth.timing`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.units import BYTES_PER_US_PER_GBPS

if TYPE_CHECKING:
    from topologies.logical import Edge, LogicalLink
    from topologies.model import Topology

__all__ = ["DEFAULT", "Network", "Params", "Transfer"]



@dataclass(frozen=True)
class Params:
    """The timing model's parameters besides the topology's ``alpha_us``, ``bandwidth_GBps`` and
    ``count``. The calibration of issue 15 (a per-call launch cost, a per-send cost that occupies the
    connection, protocol efficiency, the achievable fraction of line rate) adds its fields here, with
    defaults that keep the uncalibrated model; every timing of the project reads them from here."""

    tolerance_us: float = 1e-9
    """Two instants closer than this are the same: a transfer whose edges free within it of its
    turn starts then."""

    def hold_us(self, bandwidth_GBps: float, nbytes: float) -> float:
        """How long ``nbytes`` hold one server of an edge of ``bandwidth_GBps`` (or its sender)."""
        return nbytes / (bandwidth_GBps * BYTES_PER_US_PER_GBPS)

    def delay_us(self, link: LogicalLink, nbytes: float) -> float:
        """From a transfer's start to its arrival over ``link``: ``alpha + nbytes / bandwidth``."""
        return link.alpha_us + self.hold_us(link.bandwidth_GBps, nbytes)


DEFAULT = Params()
"""The parameters every timing uses unless told otherwise."""


@dataclass(frozen=True)
class Transfer:
    """One transfer over a logical link: it holds one server of each edge of ``path`` (engine edge
    id, microseconds), keeps its sender busy ``busy_us`` and arrives ``delay_us`` after its start."""

    path: tuple[tuple[int, float], ...]
    busy_us: float
    delay_us: float


@dataclass
class Network:
    """A topology's physical edges as the engine's resources, and the transfers over its logical
    links (each ``(src, dst, bytes)`` worked out once)."""

    topology: Topology
    params: Params = DEFAULT
    edges: list[Edge] = field(init=False)
    """Engine edge id -> the physical edge."""
    servers: list[int] = field(init=False)
    """Engine edge id -> its ``count``."""
    _ids: dict[Edge, int] = field(init=False, repr=False)
    _cache: dict[tuple[int, int, float], Transfer] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        resources = self.topology.logical().resources
        self.edges = list(resources)
        self.servers = [resources[e].count for e in self.edges]
        self._ids = {e: i for i, e in enumerate(self.edges)}
        self._cache = {}

    def transfer(self, src: int, dst: int, nbytes: float) -> Transfer:
        """``nbytes`` from rank ``src`` to rank ``dst`` (the logical link must exist)."""
        key = (src, dst, nbytes)
        out = self._cache.get(key)
        if out is None:
            logical = self.topology.logical()
            link = logical.links[(src, dst)]
            hold = self.params.hold_us
            path = tuple(
                (self._ids[e], hold(logical.resources[e].bandwidth_GBps, nbytes)) for e in link.edges
            )
            out = Transfer(path, hold(link.bandwidth_GBps, nbytes), self.params.delay_us(link, nbytes))
            self._cache[key] = out
        return out

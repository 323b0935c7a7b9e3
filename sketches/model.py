"""The communication sketch (TACCL, NSDI'23): a human's hint that narrows the MILP's search.

A sketch does not define links: our topologies are physical graphs. It *restricts* which logical
links a synthesizer may use (which GPUs of a machine talk to each other, which GPU pairs of two
machines may relay data over the network), names the rotational symmetry the algorithm must have,
and how finely each rank's buffer is split (``chunkup``). The JSON format is in docs/sketch-format.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import XcclError

__all__ = [
    "CONNECTION_KINDS",
    "HYPEREDGE_POLICIES",
    "INTRANODE_STRATEGIES",
    "InterNode",
    "IntraNode",
    "Sketch",
    "SketchError",
    "rotation",
]

INTRANODE_STRATEGIES = ("none", "switch")
HYPEREDGE_POLICIES = ("uc-max", "uc-min")
CONNECTION_KINDS = ("direct-map", "fully-connected")
"""Named connection maps; an explicit map is ``{"sender": [receivers]}`` in machine-local GPU indices."""


class SketchError(XcclError):
    """A sketch is malformed or contradicts the topology it is used with (names file and field)."""


@dataclass(frozen=True)
class IntraNode:
    """How GPUs of one machine talk: ``none`` (any link of the topology) or ``switch``.

    With ``switch``, only GPUs of a common group (each group joined by a switch in the topology)
    exchange data, and ``hyperedge`` asks for as many (``uc-max``) or as few (``uc-min``) distinct
    GPU-to-GPU connections through the switch as possible, as a secondary objective.
    """

    strategy: str = "none"
    switches: tuple[tuple[int, ...], ...] = ()
    hyperedge: str | None = None


@dataclass(frozen=True)
class InterNode:
    """Which GPUs relay data between machines (TACCL's ``relay`` strategy).

    ``connections`` is ``"direct-map"`` (local GPU i to local GPU i of every other machine),
    ``"fully-connected"`` (every local GPU to every one), or explicit ``((sender, receivers), ...)``.
    ``senders`` optionally says through which sender each local GPU's chunks leave their machine:
    ``((sender, local GPUs), ...)``; GPUs not listed may leave through any sender.
    """

    strategy: str
    connections: str | tuple[tuple[int, tuple[int, ...]], ...]
    senders: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def pairs(self, gpus_per_machine: int) -> tuple[tuple[int, int], ...]:
        """(sender, receiver) local GPU pairs the map allows, in a deterministic order."""
        g = gpus_per_machine
        if self.connections == "direct-map":
            return tuple((i, i) for i in range(g))
        if isinstance(self.connections, str):  # fully-connected
            return tuple((i, j) for i in range(g) for j in range(g))
        return tuple(sorted((s, r) for s, receivers in self.connections for r in receivers))


@dataclass(frozen=True)
class Sketch:
    """A communication sketch (see module docstring); ``chunkup=None`` lets the synthesizer choose."""

    name: str
    intranode: IntraNode = IntraNode()
    internode: InterNode | None = None
    symmetry_offsets: tuple[tuple[int, int], ...] = ()
    chunkup: int | None = None
    target_size_bytes: int | None = None
    topology: str | None = None
    comment: str = ""
    source: str = ""
    """The file (or shipped name) the sketch came from; prefixes every error about it."""

    @property
    def where(self) -> str:
        return self.source or self.name

    def fail(self, field: str, expected: str) -> SketchError:
        return SketchError(f"{self.where}: {field}: {expected}")


def rotation(offset: int, size: int, num_ranks: int) -> tuple[int, ...]:
    """TACCL's symmetry ``[offset, size]``: rotate by ``offset`` inside every block of ``size`` ranks."""
    return tuple(((r % size) + offset) % size + (r // size) * size for r in range(num_ranks))

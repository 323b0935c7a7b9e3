"""Topology families: ring, line, fully connected, star, switch, torus, hypercube, multi-machine.

Every builder takes the per-link ``bandwidth_GBps`` and ``alpha_us`` (NVLink-like defaults) and
returns a validated :class:`Topology`. ``FAMILIES`` maps the command-line name to the builder.
Each builder multiplies out its ranks and links and refuses sizes past :mod:`topologies.limits`
before it builds anything.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from topologies import limits
from topologies.arrays import LinkArrays
from topologies.errors import TopologyError
from topologies.model import Link, Topology, Vertex

__all__ = [
    "FAMILIES",
    "fully_connected",
    "hypercube",
    "line",
    "multi_node",
    "ring",
    "star",
    "switch",
    "torus",
]

DEFAULT_GBPS = 25.0
DEFAULT_ALPHA_US = 0.7


def _both(links: dict, a: Vertex, b: Vertex, link: Link) -> None:
    links[(a, b)] = link
    links[(b, a)] = link


def _both_ways(n: int, tails: np.ndarray, heads: np.ndarray, link: Link) -> LinkArrays:
    """Each pair ``tails[i], heads[i]`` linked both ways, in the order :func:`_both` adds them."""
    return LinkArrays.of_family(
        n, np.stack([tails, heads], 1).ravel(), np.stack([heads, tails], 1).ravel(), link
    )


def _need(n: int, least: int, family: str, links: int) -> None:
    """At least ``least`` ranks; ``n`` ranks and ``links`` directed links within the limits."""
    if n < least:
        raise TopologyError(f"{family}: expected at least {least} ranks, got {n}")
    limits.check_ranks(f"{family}:{n}", n)
    limits.check_links(f"{family}:{n}", links)


def ring(n: int, bandwidth_GBps: float = DEFAULT_GBPS, alpha_us: float = DEFAULT_ALPHA_US) -> Topology:
    """``n`` ranks in a bidirectional cycle (two ranks: both links of the cycle join 0 and 1)."""
    _need(n, 2, "ring", 2 * n)
    link = Link(bandwidth_GBps, alpha_us, 2 if n == 2 else 1)  # one object shared by every edge
    r = np.arange(n)
    arrays = _both_ways(n, r, (r + 1) % n, link)
    return Topology.from_arrays(f"ring:{n}", arrays, description=f"bidirectional ring of {n} ranks")


def line(n: int, bandwidth_GBps: float = DEFAULT_GBPS, alpha_us: float = DEFAULT_ALPHA_US) -> Topology:
    """``n`` ranks in a bidirectional chain."""
    _need(n, 2, "line", 2 * (n - 1))
    links: dict = {}
    for r in range(n - 1):
        _both(links, r, r + 1, Link(bandwidth_GBps, alpha_us))
    return Topology.build(f"line:{n}", n, links, description=f"line of {n} ranks")


def fully_connected(
    n: int, bandwidth_GBps: float = DEFAULT_GBPS, alpha_us: float = DEFAULT_ALPHA_US
) -> Topology:
    """A dedicated link between every ordered pair of ranks."""
    _need(n, 2, "fully-connected", n * (n - 1))
    links = {(a, b): Link(bandwidth_GBps, alpha_us) for a in range(n) for b in range(n) if a != b}
    return Topology.build(f"fully-connected:{n}", n, links, description=f"{n} ranks, all pairs linked")


def star(n: int, bandwidth_GBps: float = DEFAULT_GBPS, alpha_us: float = DEFAULT_ALPHA_US) -> Topology:
    """Rank 0 is the hub, linked to every other rank."""
    _need(n, 2, "star", 2 * (n - 1))
    links: dict = {}
    for r in range(1, n):
        _both(links, 0, r, Link(bandwidth_GBps, alpha_us))
    return Topology.build(f"star:{n}", n, links, description=f"star of {n} ranks, hub 0")


def switch(n: int, bandwidth_GBps: float = DEFAULT_GBPS, alpha_us: float = DEFAULT_ALPHA_US) -> Topology:
    """Every rank on one switch port: it sends at most one and receives at most one chunk per round."""
    _need(n, 2, "switch", 2 * n)
    links: dict = {}
    half = Link(bandwidth_GBps, alpha_us / 2)
    for r in range(n):
        _both(links, r, "switch", half)
    return Topology.build(
        f"switch:{n}", n, links, {"switch": "nvswitch"}, description=f"{n} ranks on one switch"
    )


def torus(
    a: int, b: int, bandwidth_GBps: float = DEFAULT_GBPS, alpha_us: float = DEFAULT_ALPHA_US
) -> Topology:
    """An ``a x b`` 2D torus; rank ``i * b + j`` sits at row i, column j (wrap links deduplicated)."""
    if a < 2 or b < 2:
        raise TopologyError(f"torus: expected both dimensions >= 2, got {a}x{b}")
    limits.check_ranks(f"torus:{a}x{b}", a * b)
    limits.check_links(f"torus:{a}x{b}", 4 * a * b)
    i, j = np.divmod(np.arange(a * b), b)  # rank i * b + j, row by row
    down, right = ((i + 1) % a) * b + j, i * b + (j + 1) % b
    ends = np.stack([down, right], axis=1).ravel()  # per rank: its link down, then right
    arrays = _both_ways(a * b, np.repeat(i * b + j, 2), ends, Link(bandwidth_GBps, alpha_us))
    return Topology.from_arrays(f"torus:{a}x{b}", arrays, description=f"{a}x{b} torus")


def hypercube(d: int, bandwidth_GBps: float = DEFAULT_GBPS, alpha_us: float = DEFAULT_ALPHA_US) -> Topology:
    """``2**d`` ranks; ranks that differ in one bit are linked."""
    if d < 1:
        raise TopologyError(f"hypercube: expected dimension >= 1, got {d}")
    if d >= limits.max_ranks().bit_length():  # 2**d is past the limit (and may not fit in memory)
        raise TopologyError(
            f"hypercube:{d}: 2**{d} ranks, more than the limit of {limits.max_ranks()} "
            f"(set {limits.RANKS_ENV} to raise it)"
        )
    n = 1 << d
    limits.check_ranks(f"hypercube:{d}", n)
    limits.check_links(f"hypercube:{d}", n * d)
    link = Link(bandwidth_GBps, alpha_us)  # one object for 2.2 M edges on hypercube:17
    tails = np.repeat(np.arange(n, dtype=np.int64), d)  # rank by rank, bit by bit
    heads = tails ^ np.tile(1 << np.arange(d, dtype=np.int64), n)
    arrays = LinkArrays.of_family(n, tails, heads, link)
    return Topology.from_arrays(f"hypercube:{d}", arrays, description=f"{d}-dimensional hypercube, {n} ranks")


def multi_node(machine: Topology, k: int, name: str | None = None) -> Topology:
    """``k`` copies of ``machine`` whose NICs meet in one non-blocking network switch ``net``.

    Machine ``m``'s ranks are ``m * g .. m * g + g - 1``; its switches and NICs are renamed
    ``m<m>.<name>``. A NIC becomes a switch of kind ``nic`` linked to its ranks and to ``net``,
    each direction at the NIC's bandwidth; its alpha is split over the two network hops.
    """
    if k < 1:
        raise TopologyError(f"{machine.name}: expected at least 1 machine, got {k}")
    if machine.num_machines != 1:
        raise TopologyError(
            f"{machine.name}: multi_node composes single machines; this one has {machine.num_machines}"
        )
    if k > 1 and not machine.nics:
        raise TopologyError(f"{machine.name}: nics: expected at least one NIC to compose machines")
    g = machine.num_ranks
    where = name or f"{machine.name}x{k}"
    limits.check_ranks(where, g * k)
    nic_links = 2 * sum(len(nic.ranks) + 1 for nic in machine.nics) if k > 1 else 0
    limits.check_links(where, k * (machine.num_links + nic_links))
    if k > 1:  # the network joins every rank with a NIC to every such rank of the other machines
        served = k * len({r for nic in machine.nics for r in nic.ranks})
        limits.check_links(where, served * (served - 1), "rank-to-rank links (at most)")
    links: dict = {}
    switches: dict[str, str] = {}

    def rename(v: Vertex, m: int) -> Vertex:
        return v + m * g if isinstance(v, int) else f"m{m}.{v}"

    for m in range(k):
        for sw, kind in machine.switches.items():
            switches[rename(sw, m)] = kind
        for src, dst, link in machine.links():
            links[(rename(src, m), rename(dst, m))] = link
        if k > 1:
            for nic in machine.nics:
                nic_v = f"m{m}.{nic.name}"
                switches[nic_v] = "nic"
                for r in nic.ranks:
                    _both(links, r + m * g, nic_v, Link(nic.bandwidth_GBps, 0.0))
                _both(links, nic_v, "net", Link(nic.bandwidth_GBps, nic.alpha_us / 2))
    if k > 1:
        switches["net"] = "network"
    node_of = tuple(m for m in range(k) for _ in range(g))
    return Topology.build(
        name or (machine.name if k == 1 else f"{machine.name}x{k}"),
        g * k,
        links,
        switches,
        node_of,
        nics=machine.nics if k == 1 else (),
        description=f"{k} x {machine.name}" + (f" ({machine.description})" if machine.description else ""),
        source=machine.source,
    )


FAMILIES: dict[str, Callable[..., Topology]] = {
    "ring": ring,
    "line": line,
    "fully-connected": fully_connected,
    "star": star,
    "switch": switch,
    "torus": torus,
    "hypercube": hypercube,
}
"""Sized families by command-line name (``ring:8``, ``torus:4x4``); ``multi_node`` is reached by ``<machine>x<k>``."""

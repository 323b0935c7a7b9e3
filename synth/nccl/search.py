"""NCCL's channel search (``src/graph/search.cc``, ``ncclTopoCompute``), run on a topology: the
rings (and NVLS channels) NCCL would build there, with the channel count and GB/s per channel its
tuning model reads. One search serves both users: :mod:`synth.nccl.model` (NCCL's time model) reads
``channels`` and ``bw_GBps``; :mod:`synth.baselines.nccl` builds its Algorithms on the ``rings``.

NCCL packs *channels*: each ring goes through every GPU of a machine and reserves a per-channel
bandwidth ``bw`` on every link it uses. It tries the speeds of its release's array (per GPU
generation) from the fastest the topology allows (at most ``maxBw``, the best single path, and
since v2.19 at most ``totalBw``, a GPU's NVLink or PCIe total), packs as many channels as fit at
each, stops when ``channels * bw`` reaches ``totalBw`` ("perfect") or when the next speed is below
0.49 of the best found, and keeps the layout with the largest ``channels * bw``;
``ncclTopoDupChannels`` then doubles the channels of fast layouts (same rings, half the bandwidth
each) and, since v2.19, a second pass raises the speed where as many channels still fit. Across
machines a channel enters each machine through one NIC and leaves through one (the same NIC first,
another when none can: ``crossNic``), so there is one ring per NIC direction.

The same rules run here on the physical edges of a :class:`Topology`, which holds line rates, with
the bandwidth NCCL believes each edge has (:func:`synth.nccl.system.believed_GBps`: NVLinks at the release's per-link
figure, PCIe at 3/4, a NIC at its port speed within the GPU's PCIe), so a user's own topology gets a
layout too. Left out: NCCL's timeouts (a step budget here), its ``sameChannels`` first pass (it
finds the same or fewer channels), NVLSTree/CollNet and the PCI/NVB path-type relaxations.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import TYPE_CHECKING

from common.errors import XcclError
from synth.nccl.system import HOPPER_ON, NIC_BEHIND_CPU, believed_GBps, edge_class, infer_arch
from synth.nccl.versions import ARCHS, DEFAULT_VERSION, VERSIONS, Version

if TYPE_CHECKING:
    from topologies.logical import Edge
    from topologies.model import Topology, Vertex

__all__ = [
    "NVLS_KIND",
    "Layout",
    "NcclSearchError",
    "NvlsGraph",
    "RingGraph",
    "layout",
    "nvls_graph",
    "ring_graph",
]

NVLS_KIND = "nvls"
"""The switch kind of an NVSwitch that reduces and multicasts (NVLink SHARP): Hopper and later."""
DUP_BW_GBPS = 25.0
"""``ncclTopoDupChannels``: layouts of at least this GB/s per channel are doubled."""
LOWER_RATIO = 0.49
"""The search lowers its speed while the next is above this share of the best found."""
FALLBACK_GBPS = 0.1
"""NCCL's "simple order" when its search finds no ring: one channel at 0.1 GB/s."""
MAX_NVLS_CHANNELS = 32
"""``NCCL_MAX_NVLS_ARITY``: NVLS channels are one per GPU, at most this many."""
SEARCH_BUDGET = 20_000
"""Steps of the depth-first search allowed per speed before it keeps what it found (NCCL's
search has a time budget too)."""
EPS = 1e-9


class NcclSearchError(XcclError):
    """A topology NCCL's search cannot lay out (machines of different sizes, an unknown arch)."""


@dataclass(frozen=True)
class RingGraph:
    """NCCL's ring layout on a topology (pattern RING), at the GB/s NCCL believes
    (:func:`~synth.nccl.system.believed_GBps`)."""

    rings: tuple[tuple[int, ...], ...]
    """Each channel's ring over all ranks, in the direction data moves."""
    chains: tuple[tuple[int, ...], ...]
    """Each channel's order inside machine 0: the ring itself on one machine; across machines the
    path from the rank the ring enters by to the rank it leaves by (every machine has the same)."""
    bw_GBps: float
    """Per channel (``bwIntra`` = ``bwInter``)."""
    search_channels: int
    """Channels the search found, before ``ncclTopoDupChannels`` doubled them."""
    cross_nic: bool
    """Whether a ring leaves a machine by another NIC than it entered by."""
    arch: str
    """The GPU generation whose speed arrays were used."""
    intra_type: str
    """``NVL`` or ``PCI``: the slowest kind of link the rings use inside a machine (NCCL's
    ``typeIntra``, which picks the per-hop latency of its model)."""
    fallback: bool = False
    """Whether the search found no ring: NCCL then runs one at :data:`FALLBACK_GBPS` in rank order."""

    @property
    def channels(self) -> int:
        return len(self.rings)

    @property
    def nvlink(self) -> bool:
        return self.intra_type == "NVL"

    @property
    def bw_intra(self) -> float:
        """NCCL's ``bwIntra`` (GB/s per channel), as the tuning model reads it."""
        return self.bw_GBps

    @property
    def bw_inter(self) -> float:
        return self.bw_GBps

    @property
    def same_channels(self) -> bool:
        """Whether every channel is the same ring (NCCL's ``sameChannels``)."""
        return len(set(self.chains)) == 1


@dataclass(frozen=True)
class NvlsGraph:
    """NCCL's NVLS channels (pattern NVLS): one per GPU on an NVLink SHARP switch."""

    switch: str
    channels: int
    bw_intra_GBps: float
    """Per channel: each channel reserves it on every GPU's port and twice on its head GPU's."""
    bw_inter_GBps: float
    """Raised by the search's second pass up to twice ``bw_intra`` (one machine: nothing limits it)."""
    nvlink = True
    same_channels = True

    @property
    def bw_intra(self) -> float:
        """NCCL's ``bwIntra`` (GB/s per channel), as the tuning model reads it."""
        return self.bw_intra_GBps

    @property
    def bw_inter(self) -> float:
        return self.bw_inter_GBps


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self) -> bool:
        """Take one step; False once none is left."""
        self.left -= 1
        return self.left >= 0


class _View:
    """Machine 0 of a topology as NCCL's search sees it: its ranks, the bandwidth NCCL believes each
    physical edge has, and the edges each hop of a channel takes (every machine is laid out alike)."""

    def __init__(self, topology: Topology, version: Version, arch: str) -> None:
        self.topology = topology
        self.version = version
        self.arch = arch
        self.logical = topology.logical()
        self.kinds = topology.switches
        self.groups = [topology.machine_ranks(m) for m in range(topology.num_machines)]
        if len({len(g) for g in self.groups}) > 1:
            raise NcclSearchError(
                f"NCCL's search: the machines of {topology.name} hold different numbers of ranks; "
                "NCCL lays every machine out alike"
            )
        self.ranks = self.groups[0]
        self.local = {r: i for i, r in enumerate(self.ranks)}
        self.members = frozenset(self.ranks)
        self.multi = len(self.groups) > 1
        self.max_ring_channels = version.max_channels // 2
        """``MAXCHANNELS / 2``: the most channels a ring search returns."""
        self.believed = {
            edge: believed_GBps(edge_class(self.kinds, *edge), res.bandwidth_GBps, version, arch) * res.count
            for edge, res in self.logical.resources.items()
        }

    def peer(self, rank: int, machine: int) -> int:
        """The rank of ``machine`` at ``rank``'s place in machine 0."""
        return self.groups[machine][self.local[rank]]

    def edges(self, src: int, dst: int) -> tuple[Edge, ...]:
        return self.logical.links[(src, dst)].edges

    def hop_out(self, exit_: int, entry: int) -> tuple[Edge, ...]:
        """From machine 0's ``exit_`` to machine 1's ``entry``."""
        return self.edges(exit_, self.peer(entry, 1))

    def hop_in(self, exit_: int, entry: int) -> tuple[Edge, ...]:
        """From the last machine's ``exit_`` to machine 0's ``entry``."""
        return self.edges(self.peer(exit_, len(self.groups) - 1), entry)

    def _net_index(self, path: Sequence[Vertex]) -> int | None:
        return next((i for i, v in enumerate(path) if self.kinds.get(v) == "network"), None)  # type: ignore[arg-type]

    def out_side(self, rank: int) -> tuple[tuple[Edge, ...], Vertex | None]:
        """Machine 0's edges on ``rank``'s way out to the network, and the NIC it leaves by."""
        path = self.logical.links[(rank, self.peer(rank, 1))].path
        net = self._net_index(path)
        if net is None:
            return (), None
        return tuple(pairwise(path[: net + 1])), path[net - 1]

    def in_side(self, rank: int) -> tuple[tuple[Edge, ...], Vertex | None]:
        """Machine 0's edges on the network's way in to ``rank``, and the NIC it enters by."""
        path = self.logical.links[(self.peer(rank, len(self.groups) - 1), rank)].path
        net = self._net_index(path)
        if net is None:
            return (), None
        return tuple(pairwise(path[net:])), path[net + 1]

    def max_bw(self) -> float:
        """NCCL's ``maxBw``: the fastest GPU-to-GPU route (across machines: GPU-to-network)."""
        if self.multi:
            return max(min(self.believed[e] for e in self.out_side(r)[0]) for r in self.ranks)
        return max(
            self.believed[(r, x)]
            for r in self.ranks
            for x in self.topology.graph.successors(r)
            if edge_class(self.kinds, r, x) != "NET"
        )

    def total_bw(self) -> float:
        """NCCL's ``totalBw``: the largest NVLink total of a GPU, or its PCIe bandwidth."""
        best = 0.0
        for r in self.ranks:
            out = [(x, self.believed[(r, x)]) for x in self.topology.graph.successors(r)]
            nvl = sum(bw for x, bw in out if edge_class(self.kinds, r, x) == "NVL")
            pci = max((bw for x, bw in out if edge_class(self.kinds, r, x) == "PCI"), default=0.0)
            best = max(best, nvl, pci)
        return best

    def capacities(self, speed: float) -> dict[Edge, int]:
        """Channels of ``speed`` GB/s each edge carries."""
        return {e: int(bw / speed + 1e-9) for e, bw in self.believed.items()}

    def candidates(self, u: int, seen: set[int], end: int | None, close: int | None, caps: dict) -> list[int]:
        """The ranks a channel may go to after ``u``: fewest-hop links with the most room first,
        then the next rank in numbering (NCCL tries ``index + 1`` first on NVSwitch)."""
        g = len(self.ranks)
        last = len(seen) == g - 1
        out = []
        for v in self.logical.successors(u):
            if v not in self.members or v in seen or (end is not None and (v == end) != last):
                continue
            if last and close is not None and (v, close) not in self.logical.links:
                continue
            edges = self.edges(u, v)
            room = min(caps[e] for e in edges)
            if room >= 1:
                out.append((-room, len(edges), (self.local[v] - self.local[u]) % g, v))
        out.sort()
        return [v for *_, v in out]


def _fits(caps: dict[Edge, int], edges: Sequence[Edge]) -> bool:
    return all(caps[e] >= k for e, k in Counter(edges).items())


def _take(caps: dict[Edge, int], edges: Sequence[Edge], sign: int = 1) -> None:
    for e in edges:
        caps[e] -= sign


def _paths(
    view: _View, caps: dict, start: int, end: int | None, close: int | None, budget: _Budget
) -> Iterator[list[int]]:
    """Depth first, every order of machine 0's ranks from ``start`` (to ``end``) whose hops fit
    ``caps``; while a path is yielded its hops are taken from ``caps``."""
    g = len(view.ranks)
    if g == 1:
        yield [start]
        return
    path, seen, hops = [start], {start}, []
    stack = [iter(view.candidates(start, seen, end, close, caps))]
    try:
        while stack and budget.spend():
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                if len(path) > 1:
                    _take(caps, hops.pop(), -1)
                    seen.discard(path.pop())
                continue
            hop = view.edges(path[-1], nxt)
            _take(caps, hop)
            hops.append(hop)
            path.append(nxt)
            seen.add(nxt)
            if len(path) < g:
                stack.append(iter(view.candidates(nxt, seen, end, close, caps)))
                continue
            yield list(path)
            _take(caps, hops.pop(), -1)
            seen.discard(path.pop())
    finally:
        for hop in hops:
            _take(caps, hop, -1)


def _holding(caps: dict, edges: Sequence[Edge], order: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Yield ``order`` with ``edges`` taken from ``caps`` (if they fit), then give them back."""
    if _fits(caps, edges):
        _take(caps, edges)
        try:
            yield tuple(order)
        finally:
            _take(caps, edges, -1)


def _cycles(view: _View, caps: dict, index: int, budget: _Budget, cross: bool) -> Iterator[tuple[int, ...]]:
    """Rings through the ranks of one machine."""
    start = view.ranks[0]
    for path in _paths(view, caps, start, None, start, budget):
        yield from _holding(caps, view.edges(path[-1], start), path)


def _crossings(
    view: _View, caps: dict, index: int, budget: _Budget, cross: bool
) -> Iterator[tuple[int, ...]]:
    """Paths through machine 0 that enter by a NIC and leave by the same one (by any, ``cross``);
    the channel ``index`` tries entries from its own place on (NCCL rotates its NICs so)."""
    g = len(view.ranks)
    start = index % g
    for entry in view.ranks[start:] + view.ranks[:start]:
        into, nic_in = view.in_side(entry)
        if not _fits(caps, into):
            continue
        here = view.local[entry]
        exits = (
            [entry] if g == 1 else sorted(set(view.ranks) - {entry}, key=lambda e: (here - view.local[e]) % g)
        )
        for exit_ in exits:
            out, nic_out = view.out_side(exit_)
            if (not cross and nic_out != nic_in) or not _fits(caps, out):
                continue
            hops = view.hop_in(exit_, entry) + view.hop_out(exit_, entry)
            for path in _paths(view, caps, entry, exit_ if g > 1 else None, None, budget):
                yield from _holding(caps, hops, path)


Generator = Callable[[_View, dict, int, _Budget, bool], Iterator[tuple[int, ...]]]


def _bound(view: _View, caps: dict, net_edges: tuple[frozenset[Edge], ...]) -> int:
    """At most how many more channels fit: every channel leaves and enters each rank once and
    crosses the network once each way."""
    graph = view.topology.graph
    best = min(
        min(sum(caps[(r, x)] for x in graph.successors(r)), sum(caps[(x, r)] for x in graph.predecessors(r)))
        for r in view.ranks
    )
    for edges in net_edges:
        best = min(best, sum(caps[e] for e in edges))
    return best


def _pack(view: _View, speed: float, generate: Generator, cross: bool) -> list[tuple[int, ...]]:
    """As many channels of ``speed`` as the search finds within its budget (backtracking over the
    earlier channels when a later one does not fit)."""
    caps = view.capacities(speed)
    budget = _Budget(SEARCH_BUDGET)
    nets: tuple[frozenset[Edge], ...] = ()
    if view.multi:
        outs = frozenset(e for r in view.ranks for e in view.out_side(r)[0][-1:])
        ins = frozenset(e for r in view.ranks for e in view.in_side(r)[0][:1])
        nets = (outs, ins)
    best: list[tuple[int, ...]] = []
    chosen: list[tuple[int, ...]] = []

    def extend() -> bool:
        """Search on from ``chosen``; True when nothing more is worth trying."""
        nonlocal best
        if len(chosen) > len(best):
            best = list(chosen)
        if len(best) >= view.max_ring_channels or budget.left <= 0:
            return True
        if len(chosen) + _bound(view, caps, nets) <= len(best):
            return False
        channels = generate(view, caps, len(chosen), budget, cross)
        try:
            for order in channels:
                chosen.append(order)
                done = extend()
                chosen.pop()
                if done:
                    return True
                if len(chosen) + 1 + _bound(view, caps, nets) <= len(best):
                    return False  # no other choice here (whose edges are still held) can do better
        finally:
            channels.close()
        return False

    extend()
    return best


def _speeds(view: _View) -> tuple[float, ...]:
    table = view.version.speeds_inter if view.multi else view.version.speeds_intra
    return tuple(float(x) for x in table[view.arch])


def _first_speed(view: _View, speeds: tuple[float, ...], top: float) -> int:
    """The first speed the search tries: at most ``top`` (and ``totalBw`` since v2.19)."""
    total = view.total_bw() if view.version.start_needs_total else math.inf
    i = 0
    while i < len(speeds) - 1 and (speeds[i] > top + EPS or speeds[i] > total + EPS):
        i += 1
    return i


def _search(view: _View) -> tuple[list[tuple[int, ...]], float, bool]:
    """NCCL's first pass: (channels, GB/s each, crossNic) with the largest ``channels * bw``."""
    speeds = _speeds(view)
    total_bw = view.total_bw()
    i = _first_speed(view, speeds, view.max_bw())
    best: list[tuple[int, ...]] = []
    best_bw, best_cross = 0.0, False
    generate = _crossings if view.multi else _cycles
    while True:
        for cross in (False, True) if view.multi else (False,):
            found = _pack(view, speeds[i], generate, cross)
            if len(found) * speeds[i] > len(best) * best_bw + EPS:
                best, best_bw, best_cross = found, speeds[i], cross
            if best and len(best) * best_bw >= total_bw - EPS:
                return best, best_bw, best_cross  # perfect
        if i + 1 < len(speeds) and (not best or speeds[i + 1] / best_bw > LOWER_RATIO):
            i += 1
            continue
        return best, best_bw, best_cross


def _dup(view: _View, chains: list[tuple[int, ...]], bw: float) -> tuple[list[tuple[int, ...]], float]:
    """``ncclTopoDupChannels``: the same rings twice at half the speed, from 25 GB/s up (since v2.19
    not on Hopper and later below 50 GB/s with more than 4 channels)."""
    few = view.version.dup_needs_few_channels and view.arch in HOPPER_ON and bw < 50.0 and len(chains) > 4
    if bw < DUP_BW_GBPS - EPS or few:
        return chains, bw
    doubled = min(2 * len(chains), view.max_ring_channels)
    return (chains * 2)[:doubled], bw / math.ceil(doubled / len(chains))


def _climb(view: _View, chains: list[tuple[int, ...]], bw: float, cross: bool) -> tuple[list, float, bool]:
    """Pass 2 (v2.19+): higher speeds where at least as many channels still fit."""
    speeds = _speeds(view)
    generate = _crossings if view.multi else _cycles
    i = _first_speed(view, speeds, bw)
    while i > 0:
        i -= 1
        for crossing in (False, True) if view.multi else (False,):
            found = _pack(view, speeds[i], generate, crossing)
            if len(found) >= len(chains) and len(found) * speeds[i] > len(chains) * bw + EPS:
                chains, bw, cross = found, speeds[i], crossing
    return chains, bw, cross


def _intra_type(view: _View, chains: Sequence[Sequence[int]]) -> str:
    hops = ((u, v) for chain in chains for u, v in pairwise(chain))
    kinds = {edge_class(view.kinds, *e) for hop in hops for e in view.edges(*hop)}
    return "PCI" if "PCI" in kinds else "NVL"


def _arch(topology: Topology, arch: str | None) -> str:
    if arch is None:
        return infer_arch(topology)
    if arch not in ARCHS:
        raise NcclSearchError(f"GPU arch {arch!r}: expected one of {', '.join(ARCHS)}")
    return arch


@lru_cache(maxsize=64)
def ring_graph(topology: Topology, version: str = DEFAULT_VERSION, arch: str | None = None) -> RingGraph:
    """NCCL ``version``'s rings on ``topology`` (module docstring) for GPUs of ``arch`` (default: read
    from the topology, :func:`~synth.nccl.system.infer_arch`). Where the search finds none, NCCL's fallback: one ring in
    rank order at :data:`FALLBACK_GBPS` (``fallback`` set; it may use links the topology lacks)."""
    arch = _arch(topology, arch)
    view = _View(topology, VERSIONS[version], arch)
    if len(view.ranks) == 1 and not view.multi:
        return RingGraph(((view.ranks[0],),), ((view.ranks[0],),), 0.0, 1, False, arch, "NVL")
    chains, bw, cross = _search(view)
    if not chains:
        ring = tuple(range(topology.num_ranks))
        return RingGraph((ring,), (tuple(view.ranks),), FALLBACK_GBPS, 1, False, arch, "PCI", fallback=True)
    search_channels = len(chains)
    chains, bw = _dup(view, chains, bw)
    if view.version.ring_search_climbs:
        chains, bw, cross = _climb(view, chains, bw, cross)
    rings = tuple(tuple(view.peer(r, m) for m in range(len(view.groups)) for r in c) for c in chains)
    return RingGraph(rings, tuple(chains), bw, search_channels, cross, arch, _intra_type(view, chains))


def nvls_switch(topology: Topology) -> str | None:
    """The :data:`NVLS_KIND` switch every rank of a one-machine topology is wired to, if any."""
    if topology.num_machines != 1:
        return None
    graph = topology.graph
    for name, kind in topology.switches.items():
        if kind == NVLS_KIND and all(
            graph.has_edge(r, name) and graph.has_edge(name, r) for r in topology.ranks
        ):
            return name
    return None


@lru_cache(maxsize=64)
def nvls_graph(
    topology: Topology, version: str = DEFAULT_VERSION, arch: str | None = None
) -> NvlsGraph | None:
    """NCCL's NVLS channels on one machine whose GPUs all hang on an NVLink SHARP switch (Hopper and
    later, a release with NVLS), else None.

    One channel per GPU (at most 32); each reserves ``bw`` on every GPU's port and twice on its
    head's, so ``bw`` is the fastest speed of the arch with ``(channels + 1) * bw`` within the slowest
    port (DGX H100: 9 x 40 <= 370.8, NCCL's log says "nChannels 8, bw 40/60")."""
    arch = _arch(topology, arch)
    v = VERSIONS[version]
    switch = nvls_switch(topology)
    if switch is None or topology.num_ranks < 2 or "NVLS" not in v.algorithms or arch not in HOPPER_ON:
        return None
    view = _View(topology, v, arch)
    channels = min(MAX_NVLS_CHANNELS, topology.num_ranks)
    port = min(min(view.believed[(r, switch)], view.believed[(switch, r)]) for r in topology.ranks)
    speeds = _speeds(view)
    i = next((k for k, s in enumerate(speeds) if (channels + 1) * s <= port + EPS), None)
    if i is None:
        return None
    j = i
    while j > 0 and speeds[j] < 2 * speeds[i] - EPS:
        j -= 1
    return NvlsGraph(switch, channels, speeds[i], speeds[j])


@dataclass(frozen=True)
class Layout:
    """What NCCL's tuning model reads of a topology: the machines, the GPU generation, the NICs, and
    the ring and NVLS graphs of its search (all machines taken to be like machine 0)."""

    arch: str
    nodes: int
    ranks: int
    ppn: int
    nic_behind_cpu: bool
    """Whether a NIC serves more than :data:`~synth.nccl.system.NIC_BEHIND_CPU` GPUs (NCCL then
    turns LL128 off across machines)."""
    ring: RingGraph
    nvls: NvlsGraph | None


@lru_cache(maxsize=64)
def layout(topology: Topology, version: str = DEFAULT_VERSION, arch: str | None = None) -> Layout:
    """NCCL ``version``'s view and search results on ``topology`` (cached per topology object)."""
    arch = _arch(topology, arch)
    view = _View(topology, VERSIONS[version], arch)
    behind = False
    if view.multi:
        nics = Counter(view.out_side(r)[1] for r in view.ranks)
        behind = max(nics.values()) > NIC_BEHIND_CPU
    return Layout(
        arch,
        topology.num_machines,
        topology.num_ranks,
        len(view.ranks),
        behind,
        ring_graph(topology, version, arch),
        nvls_graph(topology, version, arch),
    )


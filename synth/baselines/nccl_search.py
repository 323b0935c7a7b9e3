"""NCCL's channel search, run on a topology: the rings (and NVLS channels) NCCL would build there.

NCCL (src/graph/search.cc, ``ncclTopoCompute``, v2.30.7) packs *channels*: each ring goes through
every GPU of a machine and reserves a per-channel bandwidth ``bw`` on every link it uses. It tries
the speeds of a fixed array from the fastest one the topology allows, packs as many channels as
fit at each, stops when ``channels * bw`` reaches the GPU's total NVLink (or PCIe) bandwidth
("perfect") or when the next speed is below 0.49 of the best found, and keeps the layout with the
largest ``channels * bw``; ``ncclTopoDupChannels`` then doubles the channels of fast layouts (same
rings, half the bandwidth each). Across machines a channel enters each machine through one NIC and
leaves through one (the same NIC first, another NIC when none can: ``crossNic``), so there is one
ring per NIC direction. Here the same rules run on the physical edges of a :class:`Topology`, with
the bandwidth NCCL believes each edge has (:data:`BELIEF`), so a user's own topology gets a layout
too. What is left out: NCCL's timeouts (a search budget here), its ``sameChannels`` first pass (it
finds the same or fewer channels), pass 2 (raising the speed of a found layout, which changes no
shipped machine), NVLSTree/CollNet and the PCI/NVB path-type relaxations.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from synth.baselines.common import BaselineError, hamiltonian_cycle
from topologies.logical import Edge
from topologies.model import Topology, Vertex

__all__ = [
    "BELIEF",
    "NVLS_KIND",
    "NvlsGraph",
    "RingGraph",
    "nvls_graph",
    "p2p_channels_per_peer",
    "ring_graph",
]

# fmt: off
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SM90_SPEEDS_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEEDS_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
# fmt: on
"""Per-channel GB/s NCCL tries, fastest first (search.cc ``speedArrayIntra/Inter`` and the sm90
arrays for Hopper)."""

BELIEF = {"NVL": 20.0 / 25.0, "PCI": 12.0 / 16.0, "NET": 1.0}
"""The share of a link's line rate NCCL counts on when it searches (src/graph/topo.h): 20 GB/s for
each NVLink of V100/A100/H100 (``SM70/SM80_NVLINK_BW``; ``SM90`` 20.0 until 2.27, 20.6 after, which
gives the same layouts) against 25 GB/s per direction on the datasheet; ``PCI_BW`` 12 for a Gen3 x16
link (24 for Gen4) against 16 (32); a NIC at its port speed. Topology files hold line rates."""

NVLS_KIND = "nvls"
"""The switch kind of an NVSwitch that reduces and multicasts (NVLink SHARP): Hopper and later."""

MAX_RING_CHANNELS = 32
"""``MAXCHANNELS / 2``: the most channels a ring search returns (src/include/device.h, 64)."""
MAX_NVLS_CHANNELS = 32
"""``NCCL_MAX_NVLS_ARITY``: NVLS channels are one per GPU, at most this many."""
NVLINK_NCCL_GBPS = 20.0
"""NCCL's GB/s per NVLink (``SM70/SM80_NVLINK_BW``), which p2p channel counts divide by."""
DUP_BW_GBPS = 25.0
"""``ncclTopoDupChannels``: layouts of at least this GB/s per channel are doubled (not on Hopper
when below 50 GB/s with more than 4 channels)."""
P2P_PER_CHANNEL_NET_GBPS = 14.0
"""``NCCL_P2P_PER_CHANNEL_NET_BW``: a peer across the network gets a channel per this many GB/s."""
P2P_PEERS_PER_BATCH = 8
"""``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``."""
SEARCH_BUDGET = 20_000
"""Steps of the depth-first search allowed per speed before it keeps what it found (NCCL's
search has a time budget too)."""


@dataclass(frozen=True)
class RingGraph:
    """NCCL's ring layout on a topology (pattern RING); bandwidths are NCCL's own (:data:`BELIEF`)."""

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
    hopper: bool
    """Whether the sm90 speed arrays were used (the topology has an :data:`NVLS_KIND` switch)."""
    intra_type: str
    """``NVL`` or ``PCI``: the slowest kind of link the rings use inside a machine (NCCL's
    ``typeIntra``, which picks the per-hop latency of its model)."""

    @property
    def channels(self) -> int:
        return len(self.rings)


@dataclass(frozen=True)
class NvlsGraph:
    """NCCL's NVLS channels (pattern NVLS): one per GPU on an NVLink SHARP switch."""

    switch: str
    channels: int
    bw_intra_GBps: float
    """Per channel: each channel reserves it on every GPU's port and twice on its head GPU's."""
    bw_inter_GBps: float
    """Raised by the search's second pass up to twice ``bw_intra`` (one machine: nothing limits it)."""


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self) -> bool:
        """Take one step; False once none is left."""
        self.left -= 1
        return self.left >= 0


def _edge_class(kinds: dict[str, str], u: Vertex, v: Vertex) -> str:
    ku, kv = kinds.get(u) if isinstance(u, str) else None, kinds.get(v) if isinstance(v, str) else None
    if "nic" in (ku, kv) or "network" in (ku, kv):
        return "NET"
    return "PCI" if "pcie" in (ku, kv) else "NVL"


class _View:
    """Machine 0 of a topology as NCCL's search sees it: its ranks, the bandwidth NCCL believes each
    physical edge has, and the edges each hop of a channel takes (every machine is laid out alike)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.logical = topology.logical()
        self.kinds = topology.switches
        self.groups = [topology.machine_ranks(m) for m in range(topology.num_machines)]
        if len({len(g) for g in self.groups}) > 1:
            raise BaselineError(
                f"baseline nccl: the machines of {topology.name} hold different numbers of ranks; "
                "NCCL lays every machine out alike"
            )
        self.ranks = self.groups[0]
        self.local = {r: i for i, r in enumerate(self.ranks)}
        self.members = frozenset(self.ranks)
        self.multi = len(self.groups) > 1
        self.hopper = NVLS_KIND in self.kinds.values()
        self.believed = {
            edge: res.bandwidth_GBps * res.count * BELIEF[_edge_class(self.kinds, *edge)]
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
            if _edge_class(self.kinds, r, x) != "NET"
        )

    def total_bw(self) -> float:
        """NCCL's ``totalBw``: the largest NVLink total of a GPU, or its PCIe bandwidth."""
        best = 0.0
        for r in self.ranks:
            out = [(x, self.believed[(r, x)]) for x in self.topology.graph.successors(r)]
            nvl = sum(bw for x, bw in out if _edge_class(self.kinds, r, x) == "NVL")
            pci = max((bw for x, bw in out if _edge_class(self.kinds, r, x) == "PCI"), default=0.0)
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
        if len(best) >= MAX_RING_CHANNELS or budget.left <= 0:
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
    if view.multi:
        return SM90_SPEEDS_INTER if view.hopper else SPEEDS_INTER
    return SM90_SPEEDS_INTRA if view.hopper else SPEEDS_INTRA


def _search(view: _View) -> tuple[list[tuple[int, ...]], float, bool]:
    """NCCL's first pass: (channels, GB/s each, crossNic) with the largest ``channels * bw``."""
    speeds = _speeds(view)
    max_bw, total_bw = view.max_bw(), view.total_bw()
    i = 0
    while i < len(speeds) - 1 and (speeds[i] > max_bw or speeds[i] > total_bw):
        i += 1
    best: list[tuple[int, ...]] = []
    best_bw, best_cross = 0.0, False
    generate = _crossings if view.multi else _cycles
    while True:
        for cross in (False, True) if view.multi else (False,):
            found = _pack(view, speeds[i], generate, cross)
            if len(found) * speeds[i] > len(best) * best_bw:
                best, best_bw, best_cross = found, speeds[i], cross
            if best and len(best) * best_bw >= total_bw:
                return best, best_bw, best_cross  # perfect
        if i + 1 < len(speeds) and (not best or speeds[i + 1] / best_bw > 0.49):
            i += 1
            continue
        return best, best_bw, best_cross


def _intra_type(view: _View, chains: Sequence[Sequence[int]]) -> str:
    hops = ((u, v) for chain in chains for u, v in pairwise(chain))
    kinds = {_edge_class(view.kinds, *e) for hop in hops for e in view.edges(*hop)}
    return "PCI" if "PCI" in kinds else "NVL"


@lru_cache(maxsize=32)
def ring_graph(topology: Topology) -> RingGraph:
    """NCCL's rings on ``topology`` (module docstring); NCCL's fallback where its search finds none:
    one ring over any links (here :func:`~synth.baselines.common.hamiltonian_cycle`) at 0.1 GB/s."""
    view = _View(topology)
    if len(view.ranks) == 1 and not view.multi:
        return RingGraph(((view.ranks[0],),), ((view.ranks[0],),), 0.0, 1, False, view.hopper, "NVL")
    chains, bw, cross = _search(view)
    search_channels = len(chains)
    if not chains:
        ring = hamiltonian_cycle(topology, "nccl")
        chains, bw, search_channels = [tuple(ring[: len(view.ranks)])], 0.1, 1
    elif bw >= DUP_BW_GBPS and not (view.hopper and bw < 50.0 and len(chains) > 4):
        doubled = min(2 * len(chains), MAX_RING_CHANNELS)
        bw /= math.ceil(doubled / len(chains))
        chains = (chains * 2)[:doubled]
    rings = tuple(tuple(view.peer(r, m) for m in range(len(view.groups)) for r in c) for c in chains)
    return RingGraph(rings, tuple(chains), bw, search_channels, cross, view.hopper, _intra_type(view, chains))


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


@lru_cache(maxsize=32)
def nvls_graph(topology: Topology) -> NvlsGraph | None:
    """NCCL's NVLS channels on one machine whose GPUs all hang on an NVLink SHARP switch, else None.

    One channel per GPU (at most 32); each reserves ``bw`` on every GPU's port and twice on its
    head's, so ``bw`` is the fastest sm90 speed with ``(channels + 1) * bw`` within the slowest port
    (DGX H100: 9 x 40 <= 360, NCCL's log says "nChannels 8, bw 40/60")."""
    switch = nvls_switch(topology)
    if switch is None or topology.num_ranks < 2:
        return None
    view = _View(topology)
    channels = min(MAX_NVLS_CHANNELS, topology.num_ranks)
    port = min(min(view.believed[(r, switch)], view.believed[(switch, r)]) for r in topology.ranks)
    speeds = SM90_SPEEDS_INTRA
    i = next((k for k, s in enumerate(speeds) if (channels + 1) * s <= port), len(speeds) - 1)
    j = i
    while j > 0 and speeds[j] < 2 * speeds[i]:
        j -= 1
    return NvlsGraph(switch, channels, speeds[i], speeds[j])


def _pow2_up(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def _relay_GBps(view: _View, u: int, v: int) -> float | None:
    """NCCL's bandwidth of the route from ``u`` to ``v`` in machine 0 over NVLink (directly or through
    one GPU, NCCL's ``PATH_NVB``), or None where there is none."""
    links = view.logical.links

    def nvl(a: int, b: int) -> float | None:
        if (a, b) not in links or any(_edge_class(view.kinds, *e) != "NVL" for e in view.edges(a, b)):
            return None
        return min(view.believed[e] for e in view.edges(a, b))

    direct = nvl(u, v)
    if direct is not None:
        return direct
    two = [
        min(a, b)
        for m in view.logical.successors(u)
        if m in view.members and (a := nvl(u, m)) is not None and (b := nvl(m, v)) is not None
    ]
    return max(two, default=None)


def p2p_channels_per_peer(topology: Topology) -> int:
    """NCCL's ``p2pnChannelsPerPeer`` (src/graph/paths.cc): over every peer, the fewest of 2 per
    NVLink of the route (2 for PCIe), and across machines one per NIC or per 14 GB/s of them;
    rounded up to a power of two, within the (power-of-two) p2p channels, twice the ring's."""
    view = _View(topology)
    try:
        rings = ring_graph(topology).channels
    except BaselineError:  # no ring at all: NCCL falls back to one ring in rank order
        rings = 1
    nvlink = NVLINK_NCCL_GBPS
    counts = []
    for u in view.ranks:
        for v in view.ranks:
            if u != v:
                bw = _relay_GBps(view, u, v)
                counts.append(2 * max(1, int(bw / nvlink + 1e-9)) if bw is not None else 2)
        if view.multi:
            bw = min(view.believed[e] for e in view.out_side(u)[0])
            counts.append(max(1, math.ceil(int(bw) / P2P_PER_CHANNEL_NET_GBPS)))
    per_peer = _pow2_up(min(counts, default=1))
    p2p = _pow2_up(min(2 * rings, 2 * MAX_RING_CHANNELS))
    if not view.multi:
        return min(p2p, per_peer)
    while per_peer * math.ceil(topology.num_ranks / P2P_PEERS_PER_BATCH) > p2p and per_peer > 1:
        per_peer //= 2
    return per_peer

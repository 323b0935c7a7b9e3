"""NCCL's point-to-point channels (``src/graph/paths.cc``, ``p2pnChannelsPerPeer``): how many
channels an alltoall's sends to one peer are spread over. They follow the ring search's channel
count (:mod:`synth.nccl.search`) and the NVLink route to each peer, so they live beside it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from synth.nccl.search import _arch, _View, ring_graph
from synth.nccl.system import edge_class
from synth.nccl.versions import DEFAULT_VERSION, VERSIONS

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["p2p_channels_per_peer"]

P2P_PER_CHANNEL_NET_GBPS = 14.0
"""``NCCL_P2P_PER_CHANNEL_NET_BW``: a peer across the network gets a channel per this many GB/s."""
P2P_PEERS_PER_BATCH = 8
"""``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``."""


def _pow2_up(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def _relay_GBps(view: _View, u: int, v: int) -> float | None:
    """NCCL's bandwidth of the route from ``u`` to ``v`` in machine 0 over NVLink (directly or through
    one GPU, NCCL's ``PATH_NVB``), or None where there is none."""
    links = view.logical.links

    def nvl(a: int, b: int) -> float | None:
        if (a, b) not in links or any(edge_class(view.kinds, *e) != "NVL" for e in view.edges(a, b)):
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


def p2p_channels_per_peer(topology: Topology, version: str = DEFAULT_VERSION, arch: str | None = None) -> int:
    """NCCL's ``p2pnChannelsPerPeer`` (src/graph/paths.cc): over every peer, the fewest of 2 per
    NVLink of the route (2 for PCIe), and across machines one per NIC or per 14 GB/s of them;
    rounded up to a power of two, within the (power-of-two) p2p channels, twice the ring's."""
    arch = _arch(topology, arch)
    view = _View(topology, VERSIONS[version], arch)
    rings = ring_graph(topology, version, arch).channels
    nvlink = view.version.nvlink_bw[arch]
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
    p2p = _pow2_up(min(2 * rings, 2 * view.max_ring_channels))
    if not view.multi:
        return min(p2p, per_peer)
    while per_peer * math.ceil(topology.num_ranks / P2P_PEERS_PER_BATCH) > p2p and per_peer > 1:
        per_peer //= 2
    return per_peer

"""NCCL's channel search (``src/graph/search.cc``) on :class:`~synth.nccl.system.NcclSystem`.

A *channel* is one ring through machine 0's GPUs (entering and leaving by a NIC across machines)
that reserves ``speed`` GB/s on every edge it uses. As ``ncclTopoCompute`` does, the search starts
at the first speed of the version's array that is at most ``maxBw`` (and, since v2.19, whose
``minChannels`` fit ``totalBw``), packs as many channels as fit, stops when they fill ``totalBw``
("perfect"), otherwise lowers the speed while the next is above 0.49 of the best found, and keeps
the most GB/s (channels x speed). Then it doubles the channels at half the speed when the speed is
at least 25 GB/s (``ncclTopoDupChannels``), and since v2.19 tries higher speeds with as many
channels. The tuning model uses only the result's channels and GB/s per channel.

Simplifications, stated: rings are packed by a depth-first search with a step budget (NCCL's has a
timeout too); a channel across machines needs one NIC direction of ``speed`` and a ring's worth of
NVLink inside the machine (a path through all GPUs uses no more); the tree graph has the ring's
channels (NCCL forces their count equal) and speed; NVLS (Hopper+, an NVSwitch, one machine) has
one channel per GPU, each reserving its speed on every GPU's NVSwitch port and twice on its head's.
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.nccl.system import NcclSystem
from synth.nccl.versions import Version

__all__ = ["FALLBACK_GBPS", "Graph", "pack_rings", "search"]

SEARCH_BUDGET = 20_000
"""Steps the ring packing may take (each step places one GPU); then the best so far is kept."""
FALLBACK_GBPS = 0.1
"""NCCL's "simple order" when no path is found: one channel at 0.1 GB/s."""
DUP_MIN_GBPS = 25.0
LOWER_RATIO = 0.49
EPS = 1e-9


@dataclass(frozen=True)
class Graph:
    """One search result: ``channels`` of ``bw_intra`` GB/s inside a machine (``bw_inter`` across)."""

    pattern: str
    channels: int
    bw_intra: float
    bw_inter: float
    nvlink: bool
    """Whether the channels run over NVLink (NCCL's ``typeIntra == LINK_NVL``), else PCIe."""
    same_channels: bool = True
    """Whether every channel is the same ring (NCCL's ``sameChannels``)."""
    fallback: bool = False


class _Packer:
    """Directed rings through every GPU of machine 0, packed at one speed (depth first, budgeted)."""

    def __init__(self, system: NcclSystem, speed: float, limit: int, nvlink_only: bool) -> None:
        self.gpus = system.gpus
        self.speed = speed
        self.limit = limit
        self.left = dict(system.capacity)
        self.paths = {pair: edges for pair, (edges, nvl) in system.paths.items() if nvl or not nvlink_only}
        self.best = 0
        self.steps = 0
        self.order = {g: i for i, g in enumerate(self.gpus)}
        self.first: tuple[int, ...] = ()
        """The first ring found."""

    def fits(self, a: int, b: int) -> bool:
        edges = self.paths.get((a, b))
        return edges is not None and all(self.left[e] >= self.speed - EPS for e in edges)

    def take(self, a: int, b: int, sign: int) -> None:
        for e in self.paths[(a, b)]:
            self.left[e] -= sign * self.speed

    def bound(self) -> int:
        """Rings that could still be added: the fewest a GPU's free capacity out or in allows."""
        out = dict.fromkeys(self.gpus, 0.0)
        into = dict.fromkeys(self.gpus, 0.0)
        for (u, v), c in self.left.items():
            if u in out:
                out[u] += c
            if v in into:
                into[v] += c
        return min(int((c + EPS) // self.speed) for c in (*out.values(), *into.values()))

    def candidates(self, u: int) -> list[int]:
        """Next GPUs in NCCL's order: index + 1, index - 1, then the rest by index."""
        n = len(self.gpus)
        i = self.order[u]
        first = [self.gpus[(i + 1) % n], self.gpus[(i - 1) % n]]
        return list(dict.fromkeys(first + [g for g in self.gpus if g != u]))

    def rings(self, count: int) -> bool:
        """Add rings to ``count`` placed ones; True stops the whole search (limit or budget)."""
        self.best = max(self.best, count)
        if self.best >= self.limit or self.steps > SEARCH_BUDGET:
            return True
        if count + self.bound() <= self.best:
            return False
        start = self.gpus[0]
        return self.extend(start, [start], {start}, count)

    def extend(self, u: int, path: list[int], seen: set[int], count: int) -> bool:
        self.steps += 1
        if self.steps > SEARCH_BUDGET:
            return True
        if len(path) == len(self.gpus):
            if not self.fits(u, path[0]):
                return False
            self.take(u, path[0], 1)
            self.first = self.first or tuple(path)
            stop = self.rings(count + 1)
            self.take(u, path[0], -1)
            return stop
        for v in self.candidates(u):
            if v in seen or not self.fits(u, v):
                continue
            self.take(u, v, 1)
            seen.add(v)
            path.append(v)
            stop = self.extend(v, path, seen, count)
            path.pop()
            seen.discard(v)
            self.take(u, v, -1)
            if stop:
                return True
        return False


def pack_rings(system: NcclSystem, speed: float, limit: int, nvlink_only: bool = True) -> int:
    """How many directed rings through machine 0's GPUs fit at ``speed`` GB/s each (at most ``limit``)."""
    if system.ppn <= 1:
        return limit
    packer = _Packer(system, speed, limit, nvlink_only)
    packer.limit = min(limit, packer.bound())  # no search can do better: stop once reached
    packer.rings(0)
    return min(packer.best, limit)


def same_ring_fits(system: NcclSystem, speed: float, channels: int, nvlink_only: bool) -> bool:
    """Whether the first ring found fits ``channels`` times at ``speed`` (NCCL tries that first)."""
    if system.ppn <= 1:
        return True
    packer = _Packer(system, speed, 1, nvlink_only)
    packer.rings(0)
    ring = packer.first
    if not ring:
        return False
    use: dict = {}
    for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
        for e in packer.paths[(a, b)]:
            use[e] = use.get(e, 0) + 1
    return all(system.capacity[e] >= k * channels * speed - EPS for e, k in use.items())


def _channels(system: NcclSystem, speed: float, limit: int, nvlink_only: bool) -> int:
    """Channels that fit at ``speed``: rings inside the machine, and a NIC direction each across."""
    if system.nodes > 1:
        limit = min(limit, sum(int((nic.bandwidth_GBps + EPS) // speed) for nic in system.nics))
        if limit == 0:
            return 0
    return pack_rings(system, speed, limit, nvlink_only)


def _first_speed(speeds: tuple[float, ...], max_bw: float, total_bw: float, version: Version) -> int:
    idx = 0
    while idx < len(speeds) - 1 and (
        speeds[idx] > max_bw + EPS or (version.start_needs_total and speeds[idx] > total_bw + EPS)
    ):
        idx += 1
    return idx


def _ring_pass(
    system: NcclSystem, version: Version, speeds: tuple[float, ...], nvlink_only: bool
) -> tuple[int, float]:
    """Pass 1: (channels, speed) with the most GB/s, lowering the speed as NCCL does."""
    limit = version.max_channels // 2
    max_bw = system.max_bw_inter if system.nodes > 1 else system.max_bw_intra
    total = system.total_bw
    idx = _first_speed(speeds, max_bw, total, version)
    best = (0, 0.0)
    while True:
        speed = speeds[idx]
        n = _channels(system, speed, limit, nvlink_only)
        if n >= 1 and n * speed > best[0] * best[1] + EPS:
            best = (n, speed)
        if n == limit or best[0] * best[1] >= total - EPS:
            return best
        if idx < len(speeds) - 1 and (best[0] == 0 or speeds[idx + 1] / best[1] > LOWER_RATIO):
            idx += 1
            continue
        return best


def _dup(n: int, bw: float, system: NcclSystem, version: Version) -> tuple[int, float]:
    """``ncclTopoDupChannels``: twice the channels at half the speed, from 25 GB/s up."""
    if bw < DUP_MIN_GBPS - EPS:
        return n, bw
    if version.dup_needs_few_channels and system.arch in ("sm90", "sm100") and bw < 50 and n > 4:
        return n, bw
    dup = min(2 * n, version.max_channels // 2)
    return dup, bw / -(-dup // n)


def _climb(
    system: NcclSystem, version: Version, speeds: tuple[float, ...], n: int, bw: float, nvlink_only: bool
) -> tuple[int, float]:
    """Pass 2 of a ring (v2.19+): higher speeds that keep at least ``n`` channels."""
    idx = _first_speed(speeds, bw, float("inf"), version)
    limit = version.max_channels // 2
    while idx > 0:
        idx -= 1
        found = _channels(system, speeds[idx], limit, nvlink_only)
        if found >= n and found * speeds[idx] > n * bw + EPS:
            n, bw = found, speeds[idx]
    return n, bw


def ring_graph(system: NcclSystem, version: Version) -> Graph:
    """The ring search's result (module docstring); NVLink paths first, then any."""
    speeds = (version.speeds_inter if system.nodes > 1 else version.speeds_intra)[system.arch]
    for nvlink_only in (True, False):
        n, bw = _ring_pass(system, version, speeds, nvlink_only)
        if n == 0:
            continue
        same = same_ring_fits(system, bw, n, nvlink_only)
        if version.ring_search_climbs:
            n, bw = _dup(n, bw, system, version)
            n, bw = _climb(system, version, speeds, n, bw, nvlink_only)
        else:
            n, bw = _dup(n, bw, system, version)
        return Graph("ring", n, bw, bw, nvlink_only, same)
    return Graph("ring", 1, FALLBACK_GBPS, FALLBACK_GBPS, False, fallback=True)


def nvls_graph(system: NcclSystem, version: Version) -> Graph | None:
    """NVLS channels (module docstring), or None where NCCL has none (before Hopper, no NVSwitch,
    several machines, or a version without NVLS)."""
    if "NVLS" not in version.algorithms or system.arch not in ("sm90", "sm100"):
        return None
    if not system.nvswitch or system.nodes > 1 or system.ppn < 2:
        return None
    speeds = version.speeds_intra[system.arch]
    n = min(32, system.ppn)
    total = system.total_bw * system.ppn / (system.ppn - 1)
    port = min(
        (c for (u, v), c in system.capacity.items() if u in system.gpus or v in system.gpus), default=0.0
    )
    idx = _first_speed(speeds, system.max_bw_intra, total / n, version)
    while idx < len(speeds) and (n + 1) * speeds[idx] > port + EPS:
        idx += 1
    if idx == len(speeds):
        return None
    bw_intra = bw_inter = speeds[idx]
    while idx > 0 and bw_inter < 2 * bw_intra - EPS:
        idx -= 1
        bw_inter = speeds[idx]
    return Graph("nvls", n, bw_intra, bw_inter, True)


def search(system: NcclSystem, version: Version) -> dict[str, Graph]:
    """The graphs the tuning model reads, by algorithm (``Ring``, ``Tree``, ``PAT``, ``NVLS``)."""
    ring = ring_graph(system, version)
    tree = Graph("tree", ring.channels, ring.bw_intra, ring.bw_inter, ring.nvlink, ring.same_channels)
    out = {"Ring": ring, "Tree": tree, "PAT": ring}
    nvls = nvls_graph(system, version)
    if nvls is not None:
        out["NVLS"] = nvls
    return out

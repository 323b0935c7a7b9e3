"""NCCL's own time model (``src/graph/tuning.cc``): a second estimate, beside the project's engine.

For every (algorithm, protocol) NCCL computes once per communicator a latency and a bandwidth from
its channel search (:mod:`synth.nccl.search`) and the constants of its release
(:mod:`synth.nccl.versions`); at each call it takes ``time = latency + nBytes / (1000 * bandwidth)``
(us, bytes, GB/s) for each and runs the fastest. ``nBytes`` is nccl-tests' size, as in the
project (allgather: the output). This module does the same; the formulas, with the sources, are in
docs/nccl.md ("Model") and shared/reference/nccl.md, sections 1 and 2.

Assumed where a topology does not say: an Intel CPU (1 us network overhead per step), no CollNet
(SHARP) plugin, NCCL's defaults (no ``NCCL_ALGO``/``NCCL_PROTO``), one call (no grouped operations).

>>> from topologies import load
>>> est = nccl_time(load("dgx-h100"), "allgather", 1 << 30)
>>> est.algorithm, est.protocol, est.channels, round(est.time_us, 1)
('Ring', 'Simple', 12, 2642.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from common.errors import XcclError, quoted
from synth.nccl.search import Layout, NvlsGraph, RingGraph, layout
from synth.nccl.versions import ARCHS, DEFAULT_VERSION, PROTOCOLS, VERSIONS, Version, resolve_version

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = [
    "COLLECTIVES",
    "Candidate",
    "NcclEstimate",
    "NcclModel",
    "NcclModelError",
    "nccl_model",
    "nccl_time",
]

COLLECTIVES = {"allgather": "AG", "reducescatter": "RS", "allreduce": "AR", "broadcast": "BC", "reduce": "RD"}
"""The collectives NCCL's tuning model covers (alltoall, gather and scatter are grouped sends)."""
NET_OVERHEAD_US = 1.0
"""``getNetOverhead`` on an Intel CPU (2.0 on AMD), x3 for Simple, per network step (v2.19+)."""


class NcclModelError(XcclError):
    """A request NCCL's model cannot answer: an unknown version or arch, a collective it does not tune."""


@dataclass(frozen=True)
class Candidate:
    """One entry of NCCL's table for a collective: latency (us) and bandwidth (GB/s, as NCCL
    stores it: algbw, except busbw for non-ring allgather/reducescatter)."""

    algorithm: str
    protocol: str
    latency_us: float
    bandwidth_GBps: float
    channels: int

    def time_us(self, nbytes: float, version: Version, system: Layout, coll: str) -> float:
        """``ncclTopoGetAlgoTime``: with the tree correction and the ring allreduce plateau."""
        bw, lat = self.bandwidth_GBps, self.latency_us
        nodes, ranks, arch_index = system.nodes, system.ranks, ARCHS.index(system.arch)
        log_size = int(math.log2(nbytes // 64)) if nbytes >= 64 else -1
        if self.algorithm == "Tree" and coll == "AR" and 0 <= log_size < 23:
            bw *= version.tree_correction[log_size][PROTOCOLS.index(self.protocol)]
        if self.algorithm == "Ring" and self.protocol == "Simple" and nodes > 1 and coll == "AR":
            if version.plateau_per_channel:  # execution channels: twice the search's
                reached = nbytes / (2 * self.channels * ranks) >= 64
            else:
                reached = nbytes >= ranks / 16 * 65536
            if reached:
                lat *= version.ring_plateau[0 if arch_index >= 1 else 1]
        return lat + nbytes / (1000 * bw)


@dataclass(frozen=True)
class NcclEstimate:
    """What NCCL's model picks for one call and how long it says it takes."""

    collective: str
    size_bytes: int
    time_us: float
    algorithm: str
    protocol: str
    channels: int
    algbw_GBps: float
    busbw_GBps: float
    version: str
    arch: str


class NcclModel:
    """NCCL's latency and bandwidth tables for one topology, release and GPU arch."""

    def __init__(self, topology: Topology, version: Version, arch: str | None = None) -> None:
        self.topology = topology
        self.version = version
        self.system: Layout = layout(topology, version.name, arch)
        ring = self.system.ring
        self.graphs: dict[str, RingGraph | NvlsGraph] = {"Tree": ring, "Ring": ring, "PAT": ring}
        """The graph each algorithm reads (NCCL forces the tree's channels equal to the ring's)."""
        if self.system.nvls is not None:
            self.graphs["NVLS"] = self.system.nvls
        self.tables = (
            {coll: self._table(coll) for coll in COLLECTIVES.values()} if topology.num_ranks > 1 else {}
        )

    # -- the table (ncclTopoTuneModel) ----------------------------------------------------------
    def _table(self, coll: str) -> tuple[Candidate, ...]:
        out = []
        for algo in self.version.algorithms:
            graph = self.graphs.get(algo)
            if graph is None or not _allowed(coll, algo, self.version, self.system):
                continue
            for p, proto in enumerate(PROTOCOLS):
                if algo in ("NVLS", "PAT") and proto != "Simple":
                    continue
                if not self._enabled(graph, proto):
                    continue
                bw = self._bandwidth(coll, algo, p, graph)
                if bw > 0:
                    out.append(
                        Candidate(algo, proto, self._latency(coll, algo, p, graph), bw, graph.channels)
                    )
        return tuple(out)

    def _enabled(self, graph: RingGraph | NvlsGraph, proto: str) -> bool:
        """LL128 only where NCCL turns it on by default: NVLink inside, a NIC not behind the CPU."""
        if proto != "LL128":
            return True
        s = self.system
        return s.arch in self.version.ll128_archs and graph.nvlink and not (s.nodes > 1 and s.nic_behind_cpu)

    def _bandwidth(self, coll: str, algo: str, p: int, graph: RingGraph | NvlsGraph) -> float:
        """``comm->bandwidths[coll][algo][p]`` (GB/s)."""
        v, s = self.version, self.system
        col = min(s.nodes, 3) - 1
        ll_max = v.ll_max_bw[s.arch if s.nodes == 1 else "sm70"][col]  # several nodes: the Intel row
        bw = graph.bw_intra if s.nodes <= 2 else graph.bw_inter
        if algo == "NVLS":
            if graph.channels < 2:
                return 0.0
            intra = graph.bw_intra * v.nvls_efficiency[s.arch] * (graph.channels - 1) / graph.channels
            intra *= 2.0 if coll == "AR" else (s.ppn - 1) / s.ppn
            bw = min(intra, graph.bw_inter)
        bus = graph.channels * bw
        if v.ampere_cap is not None and s.arch == "sm80":
            bus = min(bus, v.ampere_cap)
        bus = self._refine(coll, algo, PROTOCOLS[p], bus, graph.channels, ll_max, col)
        if algo != "Ring" and coll in ("AG", "RS"):
            return bus  # NCCL keeps a bus bandwidth there
        nsteps = 2 * (s.ranks - 1) if coll == "AR" else s.ranks - 1 if coll in ("AG", "RS") else s.ranks
        ratio = s.ranks / nsteps if algo in ("Ring", "NVLS") else 0.5
        return bus * ratio

    def _refine(
        self, coll: str, algo: str, proto: str, bus: float, nch: int, ll_max: float, col: int
    ) -> float:
        """The per-protocol refinements of ``ncclTopoTuneModel``."""
        v, s = self.version, self.system
        if algo == "Ring" and proto == "LL":
            factor = v.ring_ll_factor
            if factor is None:
                factor = 1 / 4 if (s.nodes > 1 or coll in ("AR", "RD")) else 1 / 3
            return min(ll_max, bus * factor)
        if algo == "Ring" and proto == "LL128":
            eff = 0.7 if (v.ring_ll_factor is None and s.ppn < 2) else 0.92
            return min(bus * eff, nch * v.ring_ll128_per_channel[s.arch][col])
        if algo == "Tree":
            if coll == "AR" or v.ring_ll_factor is None:
                bus = min(bus * 0.92, nch * v.tree_per_channel[s.arch][col])
            if proto == "LL":
                return min(bus / 3.8, ll_max)
            if proto == "LL128":
                return min(
                    bus * (7 / 9 if s.nodes == 1 else 120 / 128), nch * v.tree_ll128_per_channel[s.arch][col]
                )
        if algo == "PAT":
            return bus * 0.75
        return bus

    def _latency(self, coll: str, algo: str, p: int, graph: RingGraph | NvlsGraph) -> float:
        """``comm->latencies[coll][algo][p]`` (us)."""
        v, s = self.version, self.system
        hw_intra = "NVLINK" if graph.nvlink else "PCI"
        intra = v.hw_latency_us[hw_intra][algo][p]
        inter = v.hw_latency_us["NET"]["Tree" if s.ppn == 1 and v.ppn1_tree_latency else algo][p]
        if v.multinode_ll_intra_factor != 1.0 and s.nodes > 1 and p == 0:
            intra *= v.multinode_ll_intra_factor
        base = v.base_latency_us[algo][p]
        nsteps = 2 * (s.ranks - 1) if coll == "AR" else s.ranks - 1 if coll in ("AG", "RS") else s.ranks
        log_nodes = int(math.log2(s.nodes))
        if algo == "Ring":
            hw = v.hw_latency_us["NET" if s.nodes > 1 else hw_intra]["Ring"]
            if coll in ("BC", "RD"):
                if graph.same_channels:
                    return base + hw[p]
                lat = v.hw_latency_us["NET" if s.nodes > 1 else hw_intra]["Tree"][p] if p == 2 else hw[p]
                return base + nsteps * lat
            if s.nodes > 1 and v.net_overhead:
                intra = max(intra, NET_OVERHEAD_US * (3 if p == 2 else 1))
            return base + (nsteps - (n_inter := self._inter_steps(coll))) * intra + n_inter * inter
        if algo == "Tree":
            return base + 2 * ((s.ppn - 1) * intra + log_nodes * inter) if coll == "AR" else base
        if algo == "NVLS":
            return intra + (inter if s.nodes > 1 else 0.0)
        return base + log_nodes * inter / 3.5 + s.ranks * 2.8  # PAT

    def _inter_steps(self, coll: str) -> int:
        nodes = self.system.nodes
        if nodes == 1:
            return 0
        if coll == "AR":
            return 2 * nodes if self.version.allreduce_inter_steps_2n else 2 * (nodes - 1)
        return nodes - 1

    # -- a call (topoGetAlgoInfo) ------------------------------------------------------------------
    def estimate(self, collective: str, size_bytes: int) -> NcclEstimate:
        """The fastest entry for ``collective`` at ``size_bytes`` (nccl-tests' size)."""
        coll = _code(collective)
        arch, name = self.system.arch, self.version.name
        if self.topology.num_ranks == 1:
            return NcclEstimate(
                collective, size_bytes, 0.0, "none", "none", 0, math.inf, math.inf, name, arch
            )
        s = self.system
        timed = [(c.time_us(size_bytes, self.version, s, coll), c) for c in self.tables[coll]]
        time, best = min(timed, key=lambda tc: tc[0])
        algbw = size_bytes / (time * 1e3)
        busbw = algbw * _busbw_factor(coll, s.ranks)
        return NcclEstimate(
            collective,
            size_bytes,
            time,
            best.algorithm,
            best.protocol,
            best.channels,
            algbw,
            busbw,
            name,
            arch,
        )


def _allowed(coll: str, algo: str, version: Version, system: Layout) -> bool:
    """Which algorithms NCCL's model considers for each collective (reference, section 1.5)."""
    if coll in ("BC", "RD"):
        return algo == "Ring"
    if coll in ("AG", "RS"):
        if algo == "PAT":
            return system.nodes == system.ranks and system.nodes > 1  # one GPU per node
        return algo in ("Ring", "NVLS")
    return algo in ("Tree", "Ring", "NVLS")


def _busbw_factor(coll: str, n: int) -> float:
    if coll == "AR":
        return 2 * (n - 1) / n
    return (n - 1) / n if coll in ("AG", "RS") else 1.0


def _code(collective: str) -> str:
    code = COLLECTIVES.get(collective)
    if code is None:
        raise NcclModelError(
            f"collective {quoted(collective)}: NCCL's tuning model covers {', '.join(COLLECTIVES)} "
            "(alltoall, gather and scatter are grouped point-to-point calls it does not model)"
        )
    return code


def _version(name: str) -> Version:
    version = resolve_version(name)
    if version is None:
        raise NcclModelError(f"NCCL version {quoted(name)}: expected one of {', '.join(VERSIONS)}")
    return version


@lru_cache(maxsize=32)
def _cached(topology: Topology, version: str, arch: str | None) -> NcclModel:
    return NcclModel(topology, _version(version), arch)


def nccl_model(topology: Topology, version: str = DEFAULT_VERSION, arch: str | None = None) -> NcclModel:
    """NCCL's tables for ``topology`` (cached per topology object, version and arch)."""
    if arch is not None and arch not in ARCHS:
        raise NcclModelError(f"GPU arch {quoted(arch)}: expected one of {', '.join(ARCHS)}")
    return _cached(topology, _version(version).name, arch)


def nccl_time(
    topology: Topology,
    collective: str,
    size_bytes: int,
    version: str = DEFAULT_VERSION,
    arch: str | None = None,
) -> NcclEstimate:
    """NCCL's own modeled time of ``collective`` at ``size_bytes`` (see the module docstring)."""
    _code(collective)
    return nccl_model(topology, version, arch).estimate(collective, size_bytes)

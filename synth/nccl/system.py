"""NCCL's view of a topology: the GPU generation, the GB/s NCCL believes each link carries, the NICs.

NCCL does not read line rates: it counts NVLinks and multiplies by a per-link figure of its own
(``SM80_NVLINK_BW 20`` ...), reads PCIe as ``width * speed / 80`` GB/s (Gen3 x16: 12 of 16 GB/s)
and a NIC as its port speed (``mbps / 8000``). This module derives the same numbers from a
:class:`~topologies.model.Topology`, which holds line rates, without asking for a machine name:

- *arch* (:func:`infer_arch`): the GPU generation from the NVLink bandwidth of a GPU (18 links of
  50 GB/s: Blackwell; 450 GB/s: Hopper; 300: Ampere; less: Volta; no NVLink: Ampere's constants,
  NCCL's default for an unknown GPU). Pass ``arch`` to say otherwise.
- an NVLink edge (rank to rank, or rank to an ``nvswitch``) of ``b`` GB/s x ``count`` is
  ``b * count / line`` NVLinks (``line`` 25 GB/s per direction for NVLink 2 to 4, 50 for NVLink 5)
  of the version's per-link GB/s; an edge through a ``pcie`` switch is read at 3/4 of its rate.
- a NIC of machine 0 (a ``nic`` switch or a rank's edge to the ``network`` switch) is
  ``min(its rate, the GPU's PCIe)``, with PCIe Gen3 for Volta, Gen4 for Ampere, Gen5 after (the
  topology does not hold the PCIe between GPU and NIC); it is behind the CPU (NCCL's ``PHB``: no
  LL128 across nodes) when it serves more than two GPUs.

All machines are taken to be like machine 0.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from synth.nccl.versions import ARCHS, Version

if TYPE_CHECKING:
    from topologies.model import Topology, Vertex

__all__ = ["NcclSystem", "infer_arch", "nccl_system"]

Edge = tuple["Vertex", "Vertex"]

NVLINK_LINE_GBPS = {"sm70": 25.0, "sm80": 25.0, "sm90": 25.0, "sm100": 50.0}
"""Line rate of one NVLink per direction: NVLink 2, 3 and 4 (V100, A100, H100) 25 GB/s, NVLink 5 50."""
PCIE_GBPS = {"sm70": 12.0, "sm80": 24.0, "sm90": 48.0, "sm100": 48.0}
"""NCCL's reading of a x16 PCIe link between a GPU and its NIC: Gen3 12, Gen4 24, Gen5 48 GB/s."""
PCIE_READ = 0.75
"""NCCL reads a PCIe link at ``width * speed / 80`` GB/s: 12 of Gen3 x16's 16 GB/s."""
NIC_BEHIND_CPU = 2
"""A NIC serving more GPUs than this is reached through the CPU (no LL128 across nodes)."""
_ARCH_BY_NVLINK = ((900.0, "sm100"), (450.0, "sm90"), (300.0, "sm80"), (0.0, "sm70"))
_INTRA_SWITCHES = ("nvswitch", "pcie")


@dataclass(frozen=True)
class Nic:
    """A NIC as NCCL sees it: the GB/s of the path to it and how many GPUs share it."""

    bandwidth_GBps: float
    gpus: int


@dataclass(frozen=True, eq=False)
class NcclSystem:
    """Machine 0 of a topology as NCCL's search sees it (module docstring)."""

    name: str
    arch: str
    nodes: int
    ranks: int
    gpus: tuple[int, ...]
    capacity: dict[Edge, float]
    """NCCL's GB/s of every directed edge inside machine 0."""
    paths: dict[tuple[int, int], tuple[tuple[Edge, ...], bool]]
    """Fewest-hop path between two GPUs of machine 0 through switches only, and whether it is all NVLink."""
    nics: tuple[Nic, ...]
    nvswitch: bool

    @property
    def ppn(self) -> int:
        return len(self.gpus)

    @cached_property
    def total_bw(self) -> float:
        """``totalBw``: the most NVLink (or PCIe) GB/s out of one GPU."""
        out = [sum(c for (u, _), c in self.capacity.items() if u == g) for g in self.gpus]
        return max(out, default=0.0)

    @cached_property
    def max_bw_intra(self) -> float:
        """``maxBw`` on one node: the best single GPU-to-GPU path."""
        return max((min(self.capacity[e] for e in p) for p, _ in self.paths.values()), default=0.0)

    @property
    def max_bw_inter(self) -> float:
        """``maxBw`` across nodes: the best GPU-to-NIC path."""
        return max((nic.bandwidth_GBps for nic in self.nics), default=0.0)

    @property
    def nic_behind_cpu(self) -> bool:
        return any(nic.gpus > NIC_BEHIND_CPU for nic in self.nics)


def infer_arch(topology: Topology) -> str:
    """The GPU generation NCCL would detect, read from the NVLink bandwidth of a GPU (module docstring)."""
    best = 0.0
    for r in topology.machine_ranks(0):
        total = 0.0
        for _, v, data in topology.graph.out_edges(r, data=True):
            if _is_nvlink(topology, r, v):
                total += data["link"].total_GBps
        best = max(best, total)
    if best == 0.0:
        return "sm80"
    return next(arch for floor, arch in _ARCH_BY_NVLINK if best >= floor)


def _is_nvlink(topology: Topology, u: Vertex, v: Vertex) -> bool:
    kinds = topology.switches
    return all(isinstance(x, int) or kinds.get(x) == "nvswitch" for x in (u, v))


def _intra_capacity(topology: Topology, version: Version, arch: str) -> dict[Edge, float]:
    """NCCL's GB/s of every edge between machine 0's GPUs and its NVSwitch and PCIe switches."""
    node = topology.node_of
    kinds = topology.switches
    per_link = version.nvlink_bw[arch] / NVLINK_LINE_GBPS[arch]

    def inside(x: Vertex) -> bool:
        return node[x] == 0 if isinstance(x, int) else kinds.get(x) in _INTRA_SWITCHES

    out: dict[Edge, float] = {}
    for u, v, link in topology.links():
        if inside(u) and inside(v):
            factor = per_link if _is_nvlink(topology, u, v) else PCIE_READ
            out[(u, v)] = link.total_GBps * factor
    return out


def _paths(
    gpus: tuple[int, ...], capacity: dict[Edge, float], topology: Topology
) -> dict[tuple[int, int], tuple[tuple[Edge, ...], bool]]:
    """Fewest-hop paths between machine 0's GPUs through switches only (as the logical view)."""
    succ: dict[Vertex, list[Vertex]] = {}
    for u, v in sorted(capacity, key=lambda e: not _is_nvlink(topology, *e)):  # NVLink first
        succ.setdefault(u, []).append(v)
    out = {}
    for a in gpus:
        parent: dict[Vertex, Vertex] = {a: a}
        queue = deque([a])
        while queue:
            u = queue.popleft()
            if u != a and isinstance(u, int):
                continue  # ranks do not forward
            for v in succ.get(u, ()):
                if v not in parent:
                    parent[v] = u
                    queue.append(v)
        for b in gpus:
            if b != a and b in parent:
                edges: list[Edge] = []
                v = b
                while v != a:
                    edges.append((parent[v], v))
                    v = parent[v]
                edges.reverse()
                out[(a, b)] = (tuple(edges), all(_is_nvlink(topology, *e) for e in edges))
    return out


def _nics(topology: Topology, arch: str) -> tuple[Nic, ...]:
    """Machine 0's NICs (``nic`` switches, or a GPU's own edge to a ``network`` switch)."""
    kinds = topology.switches
    served: dict[Vertex, list[float]] = {}
    for r in topology.machine_ranks(0):
        for _, v, data in topology.graph.out_edges(r, data=True):
            kind = kinds.get(v) if not isinstance(v, int) else None
            if kind == "nic":
                served.setdefault(v, []).append(data["link"].total_GBps)
            elif kind == "network":
                served[(r, v)] = [data["link"].total_GBps]
    pcie = PCIE_GBPS[arch]
    return tuple(Nic(min(pcie, max(rates)), len(rates)) for rates in served.values())


def nccl_system(topology: Topology, version: Version, arch: str | None = None) -> NcclSystem:
    """NCCL's view of ``topology`` with ``version``'s per-link figures (module docstring)."""
    arch = arch or infer_arch(topology)
    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r}: expected one of {', '.join(ARCHS)}")
    gpus = topology.machine_ranks(0)
    capacity = _intra_capacity(topology, version, arch)
    return NcclSystem(
        name=topology.name,
        arch=arch,
        nodes=topology.num_machines,
        ranks=topology.num_ranks,
        gpus=gpus,
        capacity=capacity,
        paths=_paths(gpus, capacity, topology),
        nics=_nics(topology, arch) if topology.num_machines > 1 else (),
        nvswitch=any(kind == "nvswitch" for kind in topology.switches.values()),
    )

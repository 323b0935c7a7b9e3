"""What NCCL believes of the hardware: the GPU generation and the GB/s of each kind of link.

NCCL does not read line rates: it counts NVLinks and multiplies by a per-link figure of its release
(``SM80_NVLINK_BW 20`` ...), reads PCIe as ``width * speed / 80`` GB/s (Gen3 x16: 12 of 16 GB/s)
and a NIC as its port speed (``mbps / 8000``) (src/graph/topo.h, topo.cc). A
:class:`~topologies.model.Topology` holds line rates; this module turns them into NCCL's figures
without asking for a machine name, for :mod:`synth.nccl.search`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from synth.nccl.versions import Version

if TYPE_CHECKING:
    from topologies.model import Topology, Vertex

__all__ = ["HOPPER_ON", "NIC_BEHIND_CPU", "believed_GBps", "edge_class", "infer_arch"]

NVLINK_LINE_GBPS = {"sm70": 25.0, "sm80": 25.0, "sm90": 25.0, "sm100": 50.0}
"""Line rate of one NVLink per direction: NVLink 2, 3 and 4 (V100, A100, H100) 25 GB/s, NVLink 5 50."""
PCIE_GBPS = {"sm70": 12.0, "sm80": 24.0, "sm90": 48.0, "sm100": 48.0}
"""NCCL's reading of the x16 PCIe link between a GPU and its NIC: Gen3 12, Gen4 24, Gen5 48 GB/s
(the topology does not hold it: Volta machines have Gen3, Ampere Gen4, later Gen5)."""
PCIE_READ = 0.75
"""NCCL reads a PCIe link at ``width * speed / 80`` GB/s: 12 of Gen3 x16's 16 GB/s (``PCI_BW``)."""
NIC_BEHIND_CPU = 2
"""A NIC serving more GPUs than this is reached through the CPU (NCCL's ``PHB``: no LL128 across
machines)."""
_ARCH_BY_NVLINK = ((900.0, "sm100"), (450.0, "sm90"), (300.0, "sm80"), (0.0, "sm70"))
HOPPER_ON = ("sm90", "sm100")
"""Archs with Hopper's speed arrays, NVLS and its channel-doubling rule."""


def edge_class(kinds: dict[str, str], u: Vertex, v: Vertex) -> str:
    """``NET`` (to or from a NIC or the network), ``PCI`` (a PCIe switch) or ``NVL`` (the rest:
    GPU to GPU, GPU to NVSwitch): which of NCCL's link types an edge is."""
    ku, kv = kinds.get(u) if isinstance(u, str) else None, kinds.get(v) if isinstance(v, str) else None
    if "nic" in (ku, kv) or "network" in (ku, kv):
        return "NET"
    return "PCI" if "pcie" in (ku, kv) else "NVL"


def infer_arch(topology: Topology) -> str:
    """The GPU generation NCCL would detect, read from a GPU's NVLink bandwidth (18 links of 50 GB/s:
    Blackwell ``sm100``; 450 GB/s: Hopper ``sm90``; 300: Ampere ``sm80``; less: Volta ``sm70``; no
    NVLink: Ampere, NCCL's default for an unknown GPU)."""
    kinds = topology.switches
    best = 0.0
    for r in topology.machine_ranks(0):
        total = sum(
            data["link"].total_GBps
            for _, v, data in topology.graph.out_edges(r, data=True)
            if edge_class(kinds, r, v) == "NVL"
        )
        best = max(best, total)
    if best == 0.0:
        return "sm80"
    return next(arch for floor, arch in _ARCH_BY_NVLINK if best >= floor)


def believed_GBps(kind: str, line_GBps: float, version: Version, arch: str) -> float:
    """The GB/s NCCL believes one link of ``kind`` (``NVL``, ``PCI``, ``NET``) of ``line_GBps`` has
    (src/graph/topo.h): an NVLink the release's per-link figure (v2.30.7: 20 GB/s on V100/A100, 20.6
    on H100, against 25 on the datasheet); PCIe ``width * speed / 80`` (3/4 of line rate); a NIC its
    port speed, within the PCIe link that joins it to the GPU (:data:`PCIE_GBPS`)."""
    if kind == "NVL":
        return line_GBps * version.nvlink_bw[arch] / NVLINK_LINE_GBPS[arch]
    if kind == "PCI":
        return line_GBps * PCIE_READ
    return min(line_GBps, PCIE_GBPS[arch])

"""Topologies: the physical graph of ranks and switches, its JSON format, families and shipped machines."""

from topologies.automorphisms import automorphisms, isomorphisms
from topologies.builders import (
    FAMILIES,
    fully_connected,
    hypercube,
    line,
    multi_node,
    ring,
    star,
    switch,
    torus,
)
from topologies.errors import TopologyError, XcclError
from topologies.io import dump_topology, load_topology_file, topology_from_dict, topology_to_dict
from topologies.logical import CapacityConstraint, ChunkCapacity, LogicalLink, LogicalTopology, Resource
from topologies.model import Link, Nic, Topology
from topologies.nvidia_smi import parse_nvidia_smi_topo
from topologies.registry import load, shipped_machines

__all__ = [
    "FAMILIES",
    "CapacityConstraint",
    "ChunkCapacity",
    "Link",
    "LogicalLink",
    "LogicalTopology",
    "Nic",
    "Resource",
    "Topology",
    "TopologyError",
    "XcclError",
    "automorphisms",
    "dump_topology",
    "fully_connected",
    "hypercube",
    "isomorphisms",
    "line",
    "load",
    "load_topology_file",
    "multi_node",
    "parse_nvidia_smi_topo",
    "ring",
    "shipped_machines",
    "star",
    "switch",
    "topology_from_dict",
    "topology_to_dict",
    "torus",
]

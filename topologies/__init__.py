"""Topologies: the physical graph of ranks and switches, its JSON format, families and shipped machines.

Names are imported on first use, so that importing :mod:`topologies.errors` (the root of the
package's exceptions) loads neither networkx nor numpy: the command line starts without them.
"""

from __future__ import annotations

from common.lazy import lazy_exports

# ``automorphisms`` is also its module's name: imported here, the function wins over the submodule
# (a lazy name would be shadowed by the submodule once anything imports it). The module is light.
from topologies.automorphisms import automorphisms, isomorphisms

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

_HOME = {
    "FAMILIES": "topologies.builders",
    "fully_connected": "topologies.builders",
    "hypercube": "topologies.builders",
    "line": "topologies.builders",
    "multi_node": "topologies.builders",
    "ring": "topologies.builders",
    "star": "topologies.builders",
    "switch": "topologies.builders",
    "torus": "topologies.builders",
    "TopologyError": "topologies.errors",
    "XcclError": "common.errors",
    "dump_topology": "topologies.io",
    "load_topology_file": "topologies.io",
    "topology_from_dict": "topologies.io",
    "topology_to_dict": "topologies.io",
    "CapacityConstraint": "topologies.logical",
    "ChunkCapacity": "topologies.logical",
    "LogicalLink": "topologies.logical",
    "LogicalTopology": "topologies.logical",
    "Resource": "topologies.logical",
    "Link": "topologies.model",
    "Nic": "topologies.model",
    "Topology": "topologies.model",
    "parse_nvidia_smi_topo": "topologies.nvidia_smi",
    "load": "topologies.registry",
    "shipped_machines": "topologies.registry",
}
"""The module that defines each public name."""


__getattr__, __dir__ = lazy_exports(__name__, _HOME)

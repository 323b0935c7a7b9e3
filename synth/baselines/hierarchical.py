"""The hierarchical baseline: a ring across machines among ranks of the same local index, then a
ring inside each machine passing everything gathered (allgather; the rest by transformation)."""

from __future__ import annotations

from synth.algorithm import Algorithm
from synth.baselines.common import BaselineError, _search_cycle, make_algorithm, schedule_paths
from synth.collectives import Collective
from topologies.model import Topology

__all__ = ["hierarchical"]


def hierarchical(topology: Topology, collective: Collective) -> Algorithm:
    if collective.name != "allgather":
        raise BaselineError(f"baseline hierarchical does not apply to {collective.name}")
    k = topology.num_machines
    if k < 2:
        raise BaselineError(f"baseline hierarchical: {topology.name} has one machine; use ring")
    g = topology.num_ranks // k
    if any(topology.node_of[r] != r // g for r in topology.ranks):
        raise BaselineError(
            f"baseline hierarchical: {topology.name} must number machine m's ranks m*g .. m*g+g-1"
        )
    local = _search_cycle(topology, list(range(g)), path_only=False) if g > 1 else [0]
    if local is None:
        raise BaselineError(f"baseline hierarchical: found no ring inside machine 0 of {topology.name}")
    routes = []
    for cid, chunk in enumerate(collective.chunks):
        (src,) = chunk.pre
        m, local_index = divmod(src, g)
        # phase 1: across machines, k-1 hops along machines m, m+1, ... at local index
        across = [((m + j) % k) * g + local_index for j in range(k)]
        routes.append((cid, across, 0))
        # phase 2: every holder passes it around its machine's ring, after phase 1 ends
        pos = local.index(local_index)
        for j in range(k):
            base = ((m + j) % k) * g
            ring = [base + local[(pos + h) % g] for h in range(g)]
            routes.append((cid, ring, k - 1))
    steps = schedule_paths(routes)
    return make_algorithm("hierarchical", topology, collective, steps, local_ring=" ".join(map(str, local)))

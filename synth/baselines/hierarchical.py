"""The hierarchical baseline on K identical machines of g ranks each (machine m holds ranks
m*g .. m*g+g-1).

- allgather: a ring across machines among ranks of the same local index, then a ring inside each
  machine passing everything gathered (the rest of the gather family by transformation).
- alltoall: rail-aligned, as NCCL's PXN and MSCCL's two-step alltoall. A chunk from local index a
  to local index b on another machine first moves inside its machine to the rank with index b,
  which sends it across the network on rail b; chunks between ranks of one index go straight.
  Every NIC then carries exactly its machine's (K-1)/K share of a buffer each way, the bound of
  the cut around a machine, and each step pairs every NIC with one other machine's, so none
  waits on another's pair; the moves inside a machine (NVLink, 9x a NIC on DGX H100) run a step
  ahead. At bandwidth-bound sizes it meets the bound but for one chunk's start and two latencies
  (docs/scale.md, "Alltoall at scale").
"""

from __future__ import annotations

from synth.algorithm import Algorithm, Provenance
from synth.baselines.common import BaselineError, _search_cycle, make_algorithm, schedule_paths
from synth.baselines.rails import VerifiedRails, rail_aligned, verify_rails
from synth.baselines.ring import SENDS
from synth.collectives import Collective
from topologies.model import Topology

__all__ = ["check_alltoall_sends", "hierarchical", "rail_alltoall"]


def hierarchical(topology: Topology, collective: Collective) -> Algorithm:
    if collective.name not in ("allgather", "alltoall"):
        raise BaselineError(f"baseline hierarchical does not apply to {collective.name}")
    k, g = _machines(topology)
    if collective.name == "alltoall":
        return _alltoall(topology, collective, g)
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


def _machines(topology: Topology) -> tuple[int, int]:
    """(machines, ranks per machine), where the machines are numbered as the module says."""
    k = topology.num_machines
    if k < 2:
        raise BaselineError(f"baseline hierarchical: {topology.name} has one machine; use ring")
    g = topology.num_ranks // k
    if any(topology.node_of[r] != r // g for r in topology.ranks):
        raise BaselineError(
            f"baseline hierarchical: {topology.name} must number machine m's ranks m*g .. m*g+g-1"
        )
    return k, g


def _alltoall(topology: Topology, collective: Collective, g: int) -> Algorithm:
    """Step d (1 .. K-1) sends the relayed chunks across to the machine d places on, so every rail
    carries a permutation of the machines (no NIC waits on another's pair); they were relayed
    inside their machine in step d - 1, when a rank also sends its own chunks for that machine.
    The sends inside a machine come last. Every rank must link to every rank of its machine. The
    schedule is :func:`synth.baselines.rails.rail_aligned`'s (held as arrays at scale), each step's
    sends in its order (relative to the sender's machine and rail)."""
    held = rail_aligned(topology, topology.num_machines, collective.chunks_per_rank)
    check_alltoall_sends(topology, collective.chunks_per_rank)
    return make_algorithm("hierarchical", topology, collective, held.send_steps())


def check_alltoall_sends(topology: Topology, chunks: int) -> None:
    """Refuse at once an alltoall whose Algorithm would exceed ``XCCL_MAX_BASELINE_SENDS``
    (4096 GPUs: 31.4 M sends; :func:`rail_alltoall` holds it as arrays instead)."""
    k = topology.num_machines
    if k < 2 or topology.num_ranks % k:
        return  # not K alike machines: the baseline says why when it is built
    sends = rail_aligned(topology, k, chunks).num_sends
    where = f"baseline hierarchical: alltoall on {topology.name} as an Algorithm"
    SENDS.check(
        sends, f"{where} (held as arrays by synth.baselines.hierarchical.rail_alltoall: docs/scale.md)"
    )


def rail_alltoall(topology: Topology, chunks: int = 1) -> VerifiedRails:
    """The rail-aligned alltoall of ``chunks`` per pair on ``topology``, held as arrays and verified
    as arrays (:mod:`synth.baselines.rails`): 4096 GPUs without a :class:`Send` made (its
    Algorithm, 31.4 M sends there, on demand); timed by :func:`synth.baselines.rails_time.simulate_rails`."""
    k, _ = _machines(topology)
    provenance = Provenance(method="baseline:hierarchical")
    return verify_rails(rail_aligned(topology, k, chunks), topology, provenance)

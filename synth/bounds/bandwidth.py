"""Bandwidth bounds: rounds per chunk (SCCL's integer model) and time at a size (GB/s model).

Both solve the same flow LP (:mod:`synth.bounds.flow`) on the physical graph, with capacities in
chunks per round or in GB/s. Combining collectives are reduced as the synthesizers reduce them
(:mod:`synth.reductions`): reducescatter and reduce to their dual on the reversed topology;
allreduce, without in-network reduction, needs a reduce-scatter and an allgather's worth of
traffic (cost-models-and-bounds.md, section 4.2), so its bound is their sum.

Where the exact LP would be too big (:data:`synth.bounds.cuts.LP_COLUMNS`) the rate comes from
LPs per class of alike ranks and from cuts (:mod:`synth.bounds.cuts`): still a lower bound on the
time, and :func:`bandwidth_bound_method` says which one each part got.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from common.units import BYTES_PER_US_PER_GBPS
from synth.bounds.cuts import LP_COLUMNS, Capacities, scaled_rate
from synth.bounds.flow import flow_network, max_rate
from synth.bounds.routing import MEET_TOLERANCE, routed_rates
from synth.collectives import Collective, make_collective
from synth.cost import chunk_bytes
from synth.errors import InfeasibleError
from synth.reductions import Problem, leaves, standard_reduction
from topologies.logical import chunks_per_round
from topologies.model import Topology

__all__ = ["MET", "bandwidth_bound_method", "bandwidth_time_us", "rounds_per_chunk_bound"]

MET = "routing meets a bound (= flow LP)"
"""How a unicast bound found without its LP says so (:mod:`synth.bounds.routing`)."""


def _commodities(collective: Collective) -> tuple[list[dict], bool]:
    """Supplies per commodity, and whether commodities share capacity (unicast: one commodity
    per source) or not (multicast: one per destination)."""
    needs = [(c.pre, c.post - c.pre) for c in collective.chunks]
    if any(len(pre) != 1 for pre, _ in needs):
        raise InfeasibleError(f"{collective.name}: the bandwidth bound needs one source per chunk")
    unicast = all(len(dsts) <= 1 for _, dsts in needs)
    groups: dict[int, dict[int, float]] = {}
    for pre, dsts in needs:
        (src,) = pre
        for d in dsts:
            supply = groups.setdefault(src if unicast else d, {})
            supply[src] = supply.get(src, 0.0) + 1
            supply[d] = supply.get(d, 0.0) - 1
    return list(groups.values()), unicast


@lru_cache(maxsize=8)
def _capacities(topology: Topology, unit: str) -> Capacities:
    """Each physical edge's capacity in chunks per round (SCCL's integer model) or in GB/s."""
    if unit == "chunks":
        unit_GBps = topology.chunk_capacity().unit_GBps
        return Capacities.of(topology, lambda link: chunks_per_round(link.bandwidth_GBps, link.count, unit_GBps))
    return Capacities.of(topology, lambda link: link.total_GBps)


def _rate(topology: Topology, collective: Collective, unit: str) -> tuple[float, str]:
    """Chunks of ``collective`` per unit time each source can ship (unit: 'chunks' or 'GBps'),
    and how that was found (the exact LP, or per-class LPs and cuts past :data:`LP_COLUMNS`)."""
    capacities = _capacities(topology, unit)
    if collective.num_ranks * len(capacities.caps) <= LP_COLUMNS:
        commodities, shared = _commodities(collective)
        arcs = flow_network(topology, capacities.as_dict())
        met = _met_by_routing(topology, collective, capacities, arcs, commodities) if shared else None
        x, how = (met, MET) if met is not None else (max_rate(arcs, commodities, shared), "flow LP")
    else:
        x, how = scaled_rate(topology, collective, capacities)
    if x <= 1e-12:
        raise InfeasibleError(
            f"{collective.name} cannot be implemented on {topology.name}: some chunk cannot reach its destination"
        )
    return x, how


def _met_by_routing(
    topology: Topology, collective: Collective, capacities: Capacities, arcs: list, commodities: list[dict]
) -> float | None:
    """The multi-commodity LP's rate where a shortest-path routing reaches the volume or cut bound
    (:mod:`synth.bounds.routing`), else None (the LP must run)."""
    if len(commodities) < 2:
        return None  # one commodity: the LP is small
    rates = routed_rates(arcs, commodities)
    if rates is None:
        return None
    lower, volume = rates
    upper = min(volume, scaled_rate(topology, collective, capacities)[0])
    return upper if lower >= upper * (1 - MEET_TOLERANCE) else None


def _parts(topology: Topology, name: str, n: int, root: int | None) -> list[Problem]:
    """The non-combining problems whose bounds add up to the bound: the collective reduced as the
    synthesizers reduce it (:func:`synth.reductions.leaves`); an allreduce is taken with one
    chunk per rank's piece, so its parts have one chunk per rank. The collectives are lazy: no
    part describes its chunks unless its exact LP is solved."""
    chunks = n if name == "allreduce" else 1
    return leaves(Problem(topology, make_collective(name, n, chunks, root, lazy=True)), standard_reduction)


@lru_cache(maxsize=256)
def _part_rates(topology: Topology, name: str, n: int, root: int | None, unit: str) -> tuple:
    """``(part, rate, how)`` of every part; alike parts (an allreduce's reduce-scatter dual and its
    allgather on a symmetric topology) are solved once."""
    out, known = [], {}
    for part in _parts(topology, name, n, root):
        c = part.collective
        key = (part.topology, c.name, c.num_ranks, c.chunks_per_rank, c.root)
        if key not in known:
            known[key] = _rate(part.topology, c, unit)
        out.append((part, *known[key]))
    return tuple(out)


@lru_cache(maxsize=256)
def _rounds_bound(topology: Topology, name: str, n: int, root: int | None) -> Fraction:
    total = Fraction(0)
    for _, x, _ in _part_rates(topology, name, n, root, "chunks"):
        total += Fraction(1 / x).limit_denominator(10_000)
    if name == "allreduce":
        total /= n  # one allreduce chunk is n reduce-scatter chunks of 1/n the size
    return total


def rounds_per_chunk_bound(topology: Topology, collective: Collective) -> Fraction:
    """Least ``R / C`` of any algorithm in SCCL's integer model (7/6 for allgather on DGX-1)."""
    return _rounds_bound(topology, collective.name, collective.num_ranks, collective.root)


def bandwidth_bound_method(topology: Topology, collective: Collective) -> str:
    """How the bandwidth bound of each reduced part was found (``flow LP`` where exact)."""
    rates = _part_rates(topology, collective.name, collective.num_ranks, collective.root, "GBps")
    return "; ".join(dict.fromkeys(how for _, _, how in rates))


@lru_cache(maxsize=256)
def _seconds_per_byte(topology: Topology, name: str, n: int, root: int | None) -> float:
    """Microseconds per byte of nccl-tests' buffer (the bound is linear in the size)."""
    total = 0.0
    for part, x, _ in _part_rates(topology, name, n, root, "GBps"):
        total += chunk_bytes(part.collective, 1.0) / (x * BYTES_PER_US_PER_GBPS)
    return total


def bandwidth_time_us(topology: Topology, collective: Collective, size_bytes: float) -> float:
    """Least time at ``size_bytes`` with unlimited steps (the min-cut bound), in microseconds."""
    return size_bytes * _seconds_per_byte(topology, collective.name, collective.num_ranks, collective.root)

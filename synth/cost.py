"""Cost models of an algorithm on a topology.

``sccl_cost``: SCCL's closed form ``S * alpha + (R / C) * L * beta`` (latency and bandwidth parts).
``simulate``: the Algorithm timed by the one timing engine (:mod:`synth.timing`, which states the
model) at a buffer size: every send is one transfer of one chunk over its logical link, ready once
its chunk is final at the source (every earlier step's write there has arrived), with the send's
place in the schedule (step order) as its priority; the call's launch cost comes first. Where sends
cost time (``Params.send_us``), each send pays it once per call of the compiled schedule: the sends
of a step on one connection that a timed schedule (a MILP's) starts together are one call of their
chunks, as the compiler merges them; so are those of a step on one connection in a textbook
baseline, whose dataflow order the compiler keeps (and whose same-step chunks it merges); every send
of another untimed synthesized schedule (SMT, trees: :func:`model_ordered`) is a call of its own,
as the compiler keeps them apart (it times them by this model's list schedule, in which a step's
chunks on one link follow each other or take a link each). NCCL's layout is timed as NCCL runs it:
its channels at once, a step's sends on one connection as its parallel links carry them. An
Algorithm has no channels, so its connection is ``src -> dst`` with a server per parallel link,
where the IR simulator has one per channel as the runtimes do (:mod:`synth.timing`): this model
charges the more per-send cost of the two where a compile spreads a peer's sends over channels.
Sizes follow nccl-tests: ``size_bytes`` is the buffer nccl-tests reports (allgather: the output).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING

import numpy as np

from common.memo import SameObjects
from common.units import BYTES_PER_US_PER_GBPS
from synth.timing import DEFAULT, IDEAL, PROTOCOLS, Network, Params, model_params
from synth.timing.engine import Jobs, arc_sources, arcs_by_source, run_jobs
from topologies.numeric import distinct, ranges

if TYPE_CHECKING:
    from synth.algorithm import Algorithm, Provenance, Send
    from synth.collectives import Collective
    from topologies.logical import Edge
    from topologies.model import Topology

__all__ = [
    "SCCLCost",
    "SimResult",
    "algbw_GBps",
    "calls_apart",
    "chunk_bytes",
    "feed",
    "link_bound_us",
    "model_ordered",
    "sccl_cost",
    "simulate",
    "simulate_best",
    "sized",
    "start_times",
]

_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_CHUNK, _SRC, _DST = attrgetter("chunk"), attrgetter("src"), attrgetter("dst")


def chunk_bytes(collective: Collective, size_bytes: float) -> float:
    """Bytes in one chunk when nccl-tests' buffer has ``size_bytes``."""
    return size_bytes / collective.size_chunks


def algbw_GBps(size_bytes: float, time_us: float) -> float:
    """nccl-tests' algbw; infinite when nothing takes time (one rank: nothing moves)."""
    return size_bytes / (time_us * BYTES_PER_US_PER_GBPS) if time_us > 0 else float("inf")


@dataclass(frozen=True)
class SCCLCost:
    latency_us: float
    bandwidth_us: float


def sccl_cost(algo: Algorithm, topology: Topology, size_bytes: float) -> SCCLCost:
    """``S * alpha`` with the slowest logical link's alpha, plus ``R`` rounds of one chunk at the
    capacity unit of :meth:`Topology.chunk_capacity` (``R / C * L * beta``)."""
    alpha = max((link.alpha_us for link in topology.logical().links.values()), default=0.0)
    unit = topology.chunk_capacity().unit_GBps
    per_round = chunk_bytes(algo.collective, size_bytes) / (unit * BYTES_PER_US_PER_GBPS)
    return SCCLCost(algo.num_steps * alpha, algo.rounds * per_round)


@dataclass(frozen=True)
class SimResult:
    size_bytes: float
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    model: str = ""
    """The timing model's label (``calibrated, Simple``, ``ideal``): every printed time says it."""


def simulate(algo: Algorithm, topology: Topology, size_bytes: float, params: Params = DEFAULT) -> SimResult:
    """Time ``algo`` on ``topology`` at ``size_bytes`` (see module docstring). There is no barrier
    between steps, as in the runtime, where only data dependencies order transfers."""
    finish = _list_schedule(algo, topology, size_bytes, params)[1]
    if finish > 0:
        finish += params.launch_us
    algbw = algbw_GBps(size_bytes, finish)
    return SimResult(size_bytes, finish, algbw, algbw * algo.collective.busbw_factor, params.label)


def simulate_best(
    algo: Algorithm, topology: Topology, size_bytes: float, model: str = "calibrated"
) -> SimResult:
    """:func:`simulate` with the fastest protocol of ``model`` at this size, as a runtime that picks
    the protocol per size does (NCCL; an XML per size window)."""
    return min(
        (simulate(algo, topology, size_bytes, model_params(model, p)) for p in PROTOCOLS),
        key=lambda r: r.time_us,
    )


def start_times(
    algo: Algorithm, topology: Topology, size_bytes: float, params: Params = DEFAULT
) -> tuple[float, ...]:
    """When each send starts in :func:`simulate`'s schedule at ``size_bytes`` (sends in step order,
    the launch not counted), so a compiler can follow the schedule the model times."""
    return _list_schedule(algo, topology, size_bytes, params)[0]


def link_bound_us(algo: Algorithm, topology: Topology, size_bytes: float) -> float:
    """A lower bound on :func:`simulate`'s time of ``algo`` at ``size_bytes`` at line rate (over
    a model's ``rate_fraction`` in that model): the bytes its sends put on its busiest physical
    edge over that edge's bandwidth (all its parallel links), as every transfer holds each edge of
    its path for its bytes at the edge's rate. Where the collective's min-cut bound
    (``synth.bounds``: LPs, 0.7 s at 128 ranks) bounds every schedule, this one bounds ``algo``'s
    and is a count (0.05 s); a cut's bytes all cross its edges, and on the 128-rank trees and
    hierarchical alltoall the two are equal."""
    logical = topology.logical()
    edge_sends = _SCHEDULED.get((algo, topology), "edge sends", lambda: _edge_sends(algo, topology))
    if not edge_sends:
        return 0.0
    nbytes = chunk_bytes(algo.collective, size_bytes)
    resources = logical.resources
    return max(
        count * nbytes / (resources[e].bandwidth_GBps * resources[e].count * BYTES_PER_US_PER_GBPS)
        for e, count in edge_sends.items()
    )


def _edge_sends(algo: Algorithm, topology: Topology) -> dict[Edge, int]:
    """How many of ``algo``'s sends cross each physical edge (their logical links' paths)."""
    _, _, src, dst = _columns_of(algo, topology)
    n = algo.collective.num_ranks
    keys, counts = np.unique(src * n + dst, return_counts=True)
    links = topology.logical().links
    out: dict[Edge, int] = {}
    for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
        for e in links[divmod(key, n)].edges:
            out[e] = out.get(e, 0) + count
    return out


def model_ordered(algo: Algorithm) -> bool:
    """Whether an untimed ``algo`` is compiled in the order of this model's list schedule
    (``codegen.lower``): every synthesized one and NCCL's layout, whose channels share connections;
    not the textbook baselines, whose dataflow order is already the model's."""
    return _ordered_method(algo.provenance)


def _ordered_method(provenance: Provenance | None) -> bool:
    method = provenance.method if provenance else ""
    return not method.startswith("baseline") or method == "baseline:nccl"


def calls_apart(provenance: Provenance | None) -> bool:
    """Whether each send of an untimed algorithm of this ``provenance`` pays the per-send cost as
    a call of its own: the synthesized ones, as the compiler keeps them apart. Not NCCL's layout: NCCL runs its channels
    at once, each with its own connection and SM, so a step's sends on one connection cost what its
    parallel links carry at once (timed per send, dgx2x2's eight rings took 613 us at 1 KiB against
    121 us, and NCCL's own model says 39 us). Our compiled XML of that layout still times each send
    as a call (docs/nccl.md)."""
    nccl = provenance is not None and provenance.method == "baseline:nccl"
    return _ordered_method(provenance) and not nccl


_SCHEDULED = SameObjects()
"""The list schedules of the last (algorithm, topology), the latest :data:`_KEPT` (size, model)
pairs: ``xccl compile`` of an untimed schedule asks the ideal model's at 1 GiB twice, to order the
lowering and to judge the compiled IR against its Algorithm (4-5 s each at 512 ranks); and the
sends' grouping and dependencies (:func:`_shape`), which no size or model changes."""
_KEPT = 4
"""Schedules kept: the ideal model's and the calibrated model's three protocols, as
``runtime.choice`` compares them at one size. Each holds a start per send (tens of MB at 512
ranks), and a sweep over sizes asks each once."""


def _list_schedule(
    algo: Algorithm, topology: Topology, size_bytes: float, params: Params
) -> tuple[tuple[float, ...], float]:
    """(start of each send in step order, finish) of :func:`simulate`'s list schedule (:func:`feed`),
    once per algorithm, topology, size and model (all frozen: the same objects give the same)."""
    held: dict = _SCHEDULED.get((algo, topology), "schedules", dict)
    key = (size_bytes, params)
    if key not in held:
        if len(held) >= _KEPT:
            del held[next(iter(held))]
        held[key] = _scheduled(algo, topology, size_bytes, params)
    return held[key]


def _scheduled(
    algo: Algorithm, topology: Topology, size_bytes: float, params: Params
) -> tuple[tuple[float, ...], float]:
    sends = _sends_of(algo, topology)
    apart = calls_apart(algo.provenance) and any(send.start_us is None for _, send in sends)
    network = Network(topology, params)
    merge = not apart and params.send_us > 0
    shape = _SCHEDULED.get(
        (algo, topology), ("shape", merge), lambda: _shape(sends, network, merge, _columns_of(algo, topology))
    )
    started, arrived = _run(sends, network, chunk_bytes(algo.collective, size_bytes), shape, None)
    return tuple(started), max(arrived, default=0.0)


def _sends_of(algo: Algorithm, topology: Topology) -> list[tuple[int, Send]]:
    """``algo``'s sends with their steps, in step order (:data:`_SCHEDULED`)."""
    return _SCHEDULED.get(
        (algo, topology),
        "sends",
        lambda: [(k, send) for k, step in enumerate(algo.steps) for send in step.sends],
    )


def _columns_of(algo: Algorithm, topology: Topology) -> tuple[np.ndarray, ...]:
    """(step, chunk, src, dst) of each of ``algo``'s sends (:data:`_SCHEDULED`): what the
    dependencies and :func:`link_bound_us` read, taken from a quarter of a million sends once."""
    return _SCHEDULED.get((algo, topology), "columns", lambda: _columns(_sends_of(algo, topology)))


def _columns(sends: list[tuple[int, Send]]) -> tuple[np.ndarray, ...]:
    """(step, chunk, src, dst) of each of ``sends``, as arrays."""
    n = len(sends)
    step = np.fromiter(map(_FIRST, sends), np.int64, n)
    plain = list(map(_SECOND, sends))  # each field read through map, in C
    return step, *(np.fromiter(map(get, plain), np.int64, n) for get in (_CHUNK, _SRC, _DST))


_Shape = tuple[list[list[int]], list[int], np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, int]], np.ndarray]
"""A list of sends as the engine runs them: its groups, each send's group, per group (and per slot
node after them: :func:`_dependencies`) how many it waits for, the arcs to what waits for each
(:class:`~synth.timing.engine.Jobs`' ``arcs_from`` and ``arc_to``), and the distinct
``(src, dst, sends)`` the groups move with each group's place among them (the same for every size
and model: a run asks the network for each distinct transfer once, not once per group, a quarter
of a million at 512 ranks)."""


def feed(
    sends: list[tuple[int, Send]],
    network: Network,
    nbytes: float,
    merge: bool,
    ready: Sequence[float] | None = None,
) -> tuple[list[float], list[float]]:
    """(start, arrival) of each of ``sends`` (``(step, send)`` in the schedule's order) in the
    engine: every send (or group of sends, when sends cost time and ``merge``: module docstring),
    ready when the earlier-step writes among ``sends`` to the slots it reads have arrived and not
    before its ``ready`` time (writes made outside ``sends``), with its place in ``sends`` as its
    priority. A send that never starts keeps 0.0 for both."""
    shape = _shape(sends, network, merge and network.params.send_us > 0)
    return _run(sends, network, nbytes, shape, ready)


def _shape(
    sends: list[tuple[int, Send]],
    network: Network,
    merge: bool,
    columns: tuple[np.ndarray, ...] | None = None,
) -> _Shape:
    """The groups and dependencies of ``sends`` (``columns``: theirs, where known: :func:`_columns`)."""
    columns = _columns(sends) if columns is None else columns
    groups, group_of = _groups(sends, network.connection_servers if merge else None, columns)
    waiting, arcs_from, arc_to = _dependencies(sends, groups, group_of, columns)
    return (groups, group_of, waiting, arcs_from, arc_to, *_distinct_links(groups, columns))


def _distinct_links(groups: list[list[int]], columns: tuple[np.ndarray, ...]) -> tuple[list, np.ndarray]:
    """The distinct ``(src, dst, sends)`` of ``groups`` in the order of their first group, and each
    group's place among them, by NumPy (a Python key per group was 0.3 s of a 512-rank schedule)."""
    if not groups:
        return [], np.zeros(0, np.int64)
    _, _, src, dst = columns
    first = np.fromiter(map(_FIRST, groups), np.int64, len(groups))
    sizes = np.fromiter(map(len, groups), np.int64, len(groups))
    ranks = int(max(src.max(), dst.max())) + 1
    key = (src[first] * ranks + dst[first]) * (int(sizes.max()) + 1) + sizes
    _, at, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(at, kind="stable")  # the distinct keys by their first group
    place = np.empty_like(order)
    place[order] = np.arange(order.size)
    kept = first[at[order]]
    links = list(zip(src[kept].tolist(), dst[kept].tolist(), sizes[at[order]].tolist(), strict=True))
    return links, place[inverse.reshape(-1)]


def _run(
    sends: list[tuple[int, Send]],
    network: Network,
    nbytes: float,
    shape: _Shape,
    ready: Sequence[float] | None,
) -> tuple[list[float], list[float]]:
    """:func:`feed`'s engine run of ``sends`` grouped as ``shape`` says: a group is ready when the
    groups it waits for, directly or through slot nodes, have arrived (a node passes on the latest
    arrival among its writes), and not before its sends' ``ready`` times; its priority is its place."""
    groups, group_of, waits, arcs_from, arc_to, links, link_of = shape
    size = len(groups)
    made = [network.transfer(src, dst, nbytes * n) for src, dst, n in links]
    delays = np.array([t.delay_us for t in made])[np.asarray(link_of, np.int64)] if size else np.zeros(0)
    ready_at = np.zeros(len(waits))  # groups, then the slots' nodes (:func:`_dependencies`)
    if ready is not None and len(ready):
        given = np.asarray(ready, np.float64)
        np.maximum.at(ready_at, np.asarray(group_of[: len(given)], np.int64), given)
    after = np.concatenate((delays, np.zeros(len(waits) - size)))[arc_sources(arcs_from)]  # nodes: 0
    jobs = Jobs(made, np.asarray(link_of, np.int64), np.arange(size), waits, ready_at, arcs_from, arc_to, after)
    starts = run_jobs(network, jobs).starts
    never = np.isnan(starts)  # keeps 0.0 for both
    of = np.asarray(group_of, np.int64)
    return np.where(never, 0.0, starts)[of].tolist(), np.where(never, 0.0, starts + delays)[of].tolist()


def _groups(
    sends: list[tuple[int, Send]],
    servers: Callable[[int, int], int] | None,
    columns: tuple[np.ndarray, ...],
) -> tuple[list[list[int]], list[int]]:
    """Sends that travel as one call: where sends cost time and the compiler merges them
    (``servers`` given), those of a step with one connection and the same recorded start (or none),
    spread round robin over the connection's ``servers(src, dst)`` parallel links, as the compiler's
    ``aggregate_chunks`` merges ops that can run at the same time; otherwise each send alone. Groups
    are in the order of their first send. By sorting, asking ``servers`` once per connection, not
    once per send (:func:`Network.connection_servers` walks the link's path)."""
    n = len(sends)
    if servers is None or not n:
        return [[i] for i in range(n)], list(range(n))
    step, _, src, dst = columns
    ranks = int(max(src.max(), dst.max())) + 1
    pair, link = np.unique(src * ranks + dst, return_inverse=True)
    lanes = np.array([servers(*divmod(p, ranks)) for p in pair.tolist()], np.int64)[link.reshape(-1)]
    starts: dict[float | None, int] = {}
    start = np.fromiter((starts.setdefault(s.start_us, len(starts)) for _, s in sends), np.int64, n)
    _, key = np.unique((step * len(starts) + start) * len(pair) + link.reshape(-1), return_inverse=True)
    key = key.reshape(-1)
    order = np.argsort(key, kind="stable")  # each key's sends in send order
    count = np.bincount(key)
    first = (np.cumsum(count) - count)[key]  # where a send's key starts in ``order``
    place = np.empty(n, np.int64)
    place[order] = np.arange(n) - first[order]  # a send's place among its key's
    lane = place % lanes
    opens = place < lanes  # the first send of each lane opens its group, in send order
    group = np.full(n, -1)
    group[opens] = np.arange(int(opens.sum()))
    group_of = group[order[first + lane]]
    members = np.argsort(group_of, kind="stable")  # each group's sends in increasing order
    return _split(group_of[members], members.tolist(), int(opens.sum())), group_of.tolist()


def _dependencies(
    sends: list[tuple[int, Send]],
    groups: list[list[int]],
    group_of: list[int],
    columns: tuple[np.ndarray, ...],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group (then per node), how many it waits for, and the arcs to those that wait for it
    (:func:`synth.timing.engine.arcs_by_source`' ``arcs_from`` and ``arc_to``, each in increasing
    order): a send reads its chunk at its source once every earlier step's write there has arrived. Sends in step
    order are matched to those writes by sorting (NumPy), through a node per slot and reading step
    (ids from ``len(groups)`` on): the node waits for the slot's writes since its previous node and
    for that node, and the slot's readers at that step wait for it, as each reader waits for every
    write before its step (the 512-rank trees allreduce: 4.5 million (write, reader) pairs, 65,024
    nodes). Any other order keeps to a loop, one group waiting for another directly."""
    n = len(sends)
    step, chunk, src, dst = columns
    if not n or np.any(step[1:] < step[:-1]):
        return _dependencies_in_order(sends, groups, group_of)
    chunks, steps = int(chunk.max(initial=0)) + 1, int(step.max(initial=0)) + 1
    written = (dst * chunks + chunk) * steps + step  # a write's (slot, step), slot = (rank, chunk)
    order = np.argsort(written, kind="stable")
    written = written[order]
    read = (src * chunks + chunk) * steps
    first = np.searchsorted(written, read, "left")  # the slot's first write
    end = np.searchsorted(written, read + step, "left")  # past its writes of earlier steps
    readers = np.flatnonzero(end > first)
    ends, node = np.unique(end[readers], return_inverse=True)  # a node per (slot, writes before)
    starts = np.empty(len(ends), np.int64)
    starts[node.reshape(-1)] = first[readers]
    chained = np.zeros(len(ends), bool)  # the node after another of its slot waits for that one
    chained[1:] = starts[1:] == starts[:-1]
    since = np.where(chained, np.concatenate(([0], ends[:-1])), starts)
    size, of = len(groups), np.asarray(group_of, np.int64)
    total = size + len(ends)
    feeds = ranges(since, ends - since)  # the writes each node waits for, node by node
    pairs = distinct(
        np.concatenate(
            (
                of[order[feeds]] * total + size + np.repeat(np.arange(len(ends)), ends - since),
                (size + np.flatnonzero(chained) - 1) * total + size + np.flatnonzero(chained),
                (size + node.reshape(-1)) * total + of[readers],
            )
        )
    )
    arcs_from, arc_to, _ = arcs_by_source(pairs // total, pairs % total, np.zeros(len(pairs)), total)
    return np.bincount(pairs % total, minlength=total), arcs_from, arc_to


def _split(keys: np.ndarray, values: list[int], size: int) -> list[list[int]]:
    """Per key ``0 .. size - 1``, its ``values`` (``keys`` sorted, one per value), by slicing: the
    512-rank trees' allreduce has 4.5 million (writer, reader) pairs, 1.5 s appended one by one."""
    bounds = np.searchsorted(keys, np.arange(size + 1)).tolist()
    return [values[a:b] for a, b in pairwise(bounds)]


def _dependencies_in_order(
    sends: list[tuple[int, Send]], groups: list[list[int]], group_of: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_dependencies` by a loop over the writes to each slot, in the order of ``sends``."""
    writes: dict[tuple[int, int], list[int]] = {}
    for i, (_, send) in enumerate(sends):
        writes.setdefault((send.dst, send.chunk), []).append(i)
    pairs: set[tuple[int, int]] = set()
    for i, (k, send) in enumerate(sends):
        for j in writes.get((send.src, send.chunk), ()):
            if sends[j][0] >= k:
                break  # the rest are this step's or later, where sends are in step order
            pairs.add((group_of[j], group_of[i]))
    ordered = np.array(sorted(pairs), np.int64).reshape(-1, 2)
    arcs_from, arc_to, _ = arcs_by_source(ordered[:, 0], ordered[:, 1], np.zeros(len(ordered)), len(groups))
    return np.bincount(ordered[:, 1], minlength=len(groups)), arcs_from, arc_to


def sized(provenance: Provenance, size_bytes: float, params: Params = DEFAULT) -> Provenance:
    """``provenance`` recording the size the schedule was made for and the model it was made in
    (where not the ideal one), as the MILP records them: the compiler's choice times an untimed
    schedule there and tries its variants (``runtime.choice``): ``synth trees``, ``synth hierarchical``."""
    size = int(size_bytes) if float(size_bytes).is_integer() else float(size_bytes)
    model = (("timing_model", params.model), ("protocol", params.protocol), ("send_us", params.send_us))
    return provenance.with_params(("size_bytes", size), *(model if params != IDEAL else ()))

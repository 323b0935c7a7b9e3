"""The IR-level timing simulator: an IR on a topology at a size, timed by the one timing engine.

The engine (:mod:`synth.timing`, which states the model) is fed what the IR actually does. Each
threadblock runs its transmissions (``runtime.program``) in order; its next primitive call is one
job. A call that sends ``b`` bytes from rank s to rank d is one transfer of ``b`` bytes over the
logical link s -> d; it keeps its threadblock busy while the sender is busy and lands when the
transfer arrives (store and forward: an ``rcs`` forwards once its data has landed). A call is
ready when its threadblock is free, its dependencies are published, its data has landed (if it
receives) and its FIFO has room (if it sends; ``fifo_depth`` calls as in the executor). Local
steps (``cpy``, ``re``, the local half of ``rrc``) take no time: the topology has no memory
bandwidth. Calls have no priority of their own (a GPU arbitrates a port first come, first
served), so the engine's tie rule decides: the call that has waited longest, then by rank and
threadblock id.

Each of those waits is for one other call, known before anything runs (:class:`_Jobs`), so the
simulator hands the engine every call at once as a graph (:class:`synth.timing.engine.Jobs`), an arc from
each call to each that waits for it, as the Algorithm model (:mod:`synth.cost`) hands it its sends.

By default each step moves all its chunks in one call (``tile_bytes=None``), the granularity of the
Algorithm-level simulator it must agree with. Give ``tile_bytes`` (e.g.
``runtime.protocol.tile_bytes(ir.protocol)``) to replay every step tile by tile, as the kernel does;
then a step pays the per-send cost on its first tile only (the protocol's steady per-tile work is
in the model's achievable rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, itemgetter

import numpy as np

from codegen.ir import IR, Dep, Op
from codegen.rules import MAX_COUNT, connections, fold_steps, get_dialect, runs_alone
from common.gc_pause import gc_paused
from common.memo import SameObjects
from runtime import protocol
from runtime.errors import BlockedStep, DeadlockError, ExecutionError
from runtime.program import Transmission, judged, transmissions
from synth.collectives import Collective
from synth.cost import SimResult, algbw_GBps
from synth.timing import DEFAULT_MODEL, Network, Params, Transfer, model_params
from synth.timing.engine import Jobs, arc_sources, arcs_by_source, run_jobs
from topologies.model import Topology
from topologies.numeric import distinct, ranges

__all__ = ["prepare", "simulate"]


@dataclass(frozen=True, eq=False)
class _Plan:
    """An IR's program as the simulator walks it, built once per IR and shared by every simulation
    of it (each model, size and tile): threadblocks in (rank, id) order, their transmissions
    (:func:`codegen.rules.fold_steps`' folding) in one sequence (threadblock ``j``'s are
    ``tx_start[j]:tx_start[j + 1]``) as arrays, connections numbered. Arrays only: nothing refers
    to the IR (a report rebuilds a threadblock's transmissions from it).

    A threadblock publishes in the order of its steps, the same steps in every tile, so a dependency
    names the publication it waits for by its place in that list, worked out here once: in tile
    ``t``, dependency ``d`` waits for publication ``t * publications[p] + dep_index[d]`` of
    threadblock ``p = dep_tb[d]`` (``p``'s first with a step ``>= dep_op[d]``; past the tile's last
    one, the next tile's first)."""

    rank: np.ndarray
    id: np.ndarray
    peer: np.ndarray
    channel: np.ndarray
    """Per threadblock, its rank, id, send peer (-1: none) and channel."""
    tx_start: np.ndarray
    count: np.ndarray
    """Per transmission, the chunks it moves (in calls of at most the protocol's count)."""
    step: np.ndarray
    """Per transmission, the step it publishes (the IR index of its last folded op)."""
    receives: np.ndarray
    sends: np.ndarray
    has_dep: np.ndarray
    dep_start: np.ndarray
    """Per transmission, where its dependencies start in ``dep_*`` (one more entry: the end)."""
    dep_tb: np.ndarray
    dep_index: np.ndarray
    dep_op: np.ndarray
    publications: np.ndarray
    """Per threadblock, how many of its transmissions publish (``has_dep``), per tile."""
    recv: np.ndarray
    send: np.ndarray
    """Per threadblock, the connection it receives on and the one it sends on (-1: none)."""
    connections: tuple[tuple[int, int, int], ...]

    def publishes_from(self, j: int, op: int) -> bool:
        """Whether threadblock ``j`` publishes at or after IR op ``op`` (as
        :meth:`runtime.program.TbProgram.publishes_from` says of its threadblock)."""
        x = slice(self.tx_start[j], self.tx_start[j + 1])
        return bool(np.any(self.has_dep[x] & (self.step[x] >= op)))


_FIRST, _LAST = itemgetter(0), itemgetter(-1)
_OPS, _DEPS, _COUNT, _HAS_DEP, _KIND = (
    attrgetter("ops"), attrgetter("deps"), attrgetter("count"), attrgetter("has_dep"), attrgetter("type")
)  # fmt: skip
_RECEIVES, _SENDS = attrgetter("receives"), attrgetter("sends")
_TB, _OP = attrgetter("tb"), attrgetter("op")


def _plan(ir: IR, connections: tuple[tuple[int, int, int], ...]) -> _Plan:
    """The plan of a judged IR (:func:`runtime.program.judged`), folded as the runtime's parser
    folds it, without a :class:`Transmission` object per step (half a million at 512 ranks):
    the fields the simulator reads are taken in C (``map``) from the ops that head and end each
    transmission. A threadblock whose steps each run alone (:func:`codegen.rules.runs_alone`:
    most) is read as it is, with no :class:`Folded` made per step."""
    d = get_dialect("msccl")
    tbs = sorted(
        ((gpu.rank, tb) for gpu in ir.gpus for tb in gpu.threadblocks), key=lambda x: (x[0], x[1].id)
    )
    heads: list[Op] = []
    tails: list[Op] = []
    steps: list[int] = []
    deps: list[tuple[Dep, ...]] = []  # per transmission, what it waits for
    per_tb = []
    for _, tb in tbs:
        ops = tb.ops
        if runs_alone(ops):
            heads.extend(ops)
            tails.extend(ops)
            steps.extend(range(len(ops)))
            deps.extend(map(_DEPS, ops))
            per_tb.append(len(ops))
            continue
        folded = fold_steps(ops, d)
        last = list(map(_LAST, map(_OPS, folded)))
        heads.extend(map(ops.__getitem__, map(_FIRST, map(_OPS, folded))))
        tails.extend(map(ops.__getitem__, last))
        steps.extend(last)
        deps.extend(map(_DEPS, folded))
        per_tb.append(len(folded))
    n = len(heads)
    kinds = list(map(_KIND, heads))
    has_dep = np.fromiter(map(_HAS_DEP, tails), bool, n)
    step = np.array(steps, np.int64)
    ndeps = np.fromiter(map(len, deps), np.int64, n)
    per_tb_a = np.array(per_tb, np.int64)
    tx_tb = np.repeat(np.arange(len(tbs)), per_tb_a)
    rank, ids = np.array([r for r, _ in tbs], np.int64), np.array([tb.id for _, tb in tbs], np.int64)
    dep_tb, dep_op = _dep_columns(rank, ids, tx_tb, ndeps, list(chain.from_iterable(deps)))
    publications = np.bincount(tx_tb[has_dep], minlength=len(tbs))
    # bisect_left of each op among its publisher's steps that publish (increasing), all at once
    span = int(max(step.max(initial=0), dep_op.max(initial=0))) + 1
    published = tx_tb[has_dep] * span + step[has_dep]
    first = np.cumsum(publications) - publications
    dep_index = np.searchsorted(published, dep_tb * span + np.maximum(dep_op, 0)) - first[dep_tb]
    conns = {key: c for c, key in enumerate(connections)}
    return _Plan(
        rank, ids, np.array([-1 if tb.send is None else tb.send for _, tb in tbs], np.int64),
        np.array([tb.channel for _, tb in tbs], np.int64),
        np.concatenate(([0], np.cumsum(per_tb_a))), np.fromiter(map(_COUNT, tails), np.int64, n), step,
        np.fromiter(map(_RECEIVES, kinds), bool, n), np.fromiter(map(_SENDS, kinds), bool, n),
        has_dep, np.concatenate(([0], np.cumsum(ndeps))), dep_tb, dep_index, dep_op, publications,
        np.array([-1 if tb.recv is None else conns[(tb.recv, r, tb.channel)] for r, tb in tbs], np.int64),
        np.array([-1 if tb.send is None else conns[(r, tb.send, tb.channel)] for r, tb in tbs], np.int64),
        connections,
    )  # fmt: skip


def _dep_columns(
    rank: np.ndarray, ids: np.ndarray, tx_tb: np.ndarray, ndeps: np.ndarray, deps: list[Dep]
) -> tuple[np.ndarray, np.ndarray]:
    """Each dependency's threadblock (its place among the threadblocks, whose ranks and ids are
    ``rank`` and ``ids``, found on the rank of the transmission that waits: ``tx_tb``, ``ndeps``
    each) and op, read in C from the ``deps`` in order. The IR is judged: each names a threadblock
    of its rank."""
    place = np.zeros((int(rank.max(initial=0)) + 1, int(ids.max(initial=0)) + 1), np.int64)
    place[rank, ids] = np.arange(rank.size)
    dep_rank = np.repeat(rank[tx_tb], ndeps)
    dep_tb = place[dep_rank, np.fromiter(map(_TB, deps), np.int64, len(deps))]
    return dep_tb, np.fromiter(map(_OP, deps), np.int64, len(deps))


@dataclass(frozen=True, eq=False)
class _Jobs:
    """A plan's calls at one tiling, count limit and FIFO depth, each with its fixed predecessors.

    Job ``k`` is one primitive call. A threadblock's calls are consecutive (tile by tile, step by
    step, a step's calls of at most ``max_count`` chunks in order), so job ids order the jobs
    waiting at once by threadblock, as the engine's tie rule wants. A call waits for its
    threadblock's previous call (to end); on its step's first call, for the publications its
    dependencies name (to end); if it receives, for the send of the same rank on its connection
    (to arrive: the k-th receive takes the k-th message); if it sends, for the receive ``depth``
    calls before it on its connection (to start: the slot it frees). One threadblock drives each
    end of a connection, in order, so each wait is one call known before anything runs: an arc of
    the engine's graph. A predecessor that never exists (a dependency past the last publication, a
    message never sent) is counted in :attr:`waits` and never starts."""

    tb: np.ndarray
    tile: np.ndarray
    tx: np.ndarray
    chunks: np.ndarray
    first: np.ndarray
    """Per job, whether it is its step's first call (the one that waits for the dependencies)."""
    pub_jobs: np.ndarray
    pub_start: np.ndarray
    """The jobs that publish, threadblock by threadblock (``j``'s from ``pub_start[j]``)."""
    match: np.ndarray
    """Per job, the send whose message it receives (-1: none, or never sent)."""
    waits: np.ndarray
    """Per job, how many predecessors it waits for (those that never exist too)."""
    arcs_from: np.ndarray
    arc_to: np.ndarray
    arc_kind: np.ndarray
    """Each job's arcs to the jobs that wait for it (``arcs_from[k]:arcs_from[k + 1]``: the
    engine's :class:`~synth.timing.engine.Jobs`), and what each waits for: :data:`_START` (a send
    for the receive that frees its slot), :data:`_ARRIVAL` (a receive for its message) or
    :data:`_END` (the threadblock's next call, a publication's waiters); the model prices them."""
    sent: list[tuple[int, int, int, int, int]]
    """The distinct transfers of the jobs that send: (rank, peer, channel, chunks, tile)."""
    transfer_of: np.ndarray
    """Per job, its transfer's place in :attr:`sent` (``len(sent)``: it sends nothing)."""


def _jobs(plan: _Plan, ntiles: int, max_count: int, depth: int) -> _Jobs:
    steps = np.diff(plan.tx_start)
    occ_tb = np.repeat(np.arange(len(plan.rank)), steps * ntiles)  # each step once per tile
    k = ranges(np.zeros(len(plan.rank), np.int64), steps * ntiles)
    occ_tile, occ_tx = k // steps[occ_tb], plan.tx_start[occ_tb] + k % steps[occ_tb]
    parts = np.maximum(1, -(-plan.count[occ_tx] // max_count))
    occ = np.repeat(np.arange(len(occ_tx)), parts)
    part = ranges(np.zeros(len(occ_tx), np.int64), parts)
    tb, tile, tx = occ_tb[occ], occ_tile[occ], occ_tx[occ]
    final = part == parts[occ] - 1
    chunks = np.where(final, plan.count[tx] - (parts[occ] - 1) * max_count, max_count)
    own = np.zeros(len(tb), bool)
    own[1:] = tb[1:] == tb[:-1]
    pub_jobs = np.flatnonzero(plan.has_dep[tx] & final)
    pub_start = np.searchsorted(tb[pub_jobs], np.arange(len(plan.rank)))
    waits = own.astype(np.int64)
    pred, succ = _dependencies(plan, ntiles, tile, tx, np.flatnonzero(part == 0), pub_jobs, pub_start, waits)
    match, arrival, room = _connections(plan, tb, tx, depth, waits)
    nexts = np.flatnonzero(own) - 1  # each call but a threadblock's last: the next one waits for it
    sends, receives = np.flatnonzero(arrival >= 0), np.flatnonzero(room >= 0)
    kinds = (_ARRIVAL, _START, _END, _END)
    parts = ((sends, arrival[sends]), (receives, room[receives]), (nexts, nexts + 1), (pred, succ))
    source = np.concatenate([a for a, _ in parts])
    arcs_from, arc_to, kind = arcs_by_source(
        source,
        np.concatenate([b for _, b in parts]),
        np.concatenate([np.full(len(a), k) for (a, _), k in zip(parts, kinds, strict=True)]),
        len(tb),
    )
    sent, transfer_of = _sent(plan, tb, tile, tx, chunks, ntiles)
    return _Jobs(
        tb, tile, tx, chunks, part == 0, pub_jobs, pub_start, match, waits, arcs_from, arc_to,
        kind.astype(np.int8), sent, transfer_of,
    )  # fmt: skip


_START, _ARRIVAL, _END = 0, 1, 2
"""What an arc waits for (:attr:`_Jobs.arc_kind`): its source's start, its arrival, its end."""


def _sent(
    plan: _Plan, tb: np.ndarray, tile: np.ndarray, tx: np.ndarray, chunks: np.ndarray, ntiles: int
) -> tuple[list[tuple[int, int, int, int, int]], np.ndarray]:
    """The distinct transfers of the jobs that send, one per (threadblock, chunks, tile), and each
    job's among them (:class:`_Jobs`): the same in every model, which only prices them."""
    sjobs = np.flatnonzero(plan.sends[tx])
    wide = int(chunks.max(initial=0)) + 1
    keys = (tb[sjobs] * wide + chunks[sjobs]) * ntiles + tile[sjobs]
    found = distinct(keys)
    transfer_of = np.full(len(tb), len(found))
    transfer_of[sjobs] = np.searchsorted(found, keys)
    rest, at = np.divmod(found, ntiles)
    j, count = np.divmod(rest, wide)
    columns = (plan.rank[j], plan.peer[j], plan.channel[j], count, at)
    return list(zip(*(c.tolist() for c in columns), strict=True)), transfer_of


def _dependencies(
    plan: _Plan,
    ntiles: int,
    tile: np.ndarray,
    tx: np.ndarray,
    firsts: np.ndarray,
    pub_jobs: np.ndarray,
    pub_start: np.ndarray,
    waits: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The (publishing job, waiting job) pairs of the dependencies; adds to ``waits`` each step's
    first call's dependencies (those never published too)."""
    begin = plan.dep_start[tx[firsts]]
    ndeps = plan.dep_start[tx[firsts] + 1] - begin
    waiter, d = np.repeat(firsts, ndeps), ranges(begin, ndeps)
    waits += np.bincount(waiter, minlength=len(waits))
    p = plan.dep_tb[d]
    per_tile = plan.publications[p]
    q = tile[waiter] * per_tile + plan.dep_index[d]
    met = q < ntiles * per_tile
    return pub_jobs[pub_start[p[met]] + q[met]], waiter[met]


def _ranked(jobs: np.ndarray, conn: np.ndarray, nconn: int) -> tuple[np.ndarray, ...]:
    """``jobs`` grouped by connection in job order, where each connection's start, how many each
    has, and each job's place among its connection's."""
    order = np.argsort(conn, kind="stable")
    count = np.bincount(conn, minlength=nconn)
    start = np.cumsum(count) - count
    place = np.empty(len(jobs), np.int64)
    place[order] = np.arange(len(jobs)) - start[conn[order]]
    return jobs[order], start, count, place


def _connections(
    plan: _Plan, tb: np.ndarray, tx: np.ndarray, depth: int, waits: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per job, the send it receives from, the receive its message feeds and the send its start
    lets go (:class:`_Jobs`); adds those waits to ``waits``."""
    nconn, n = len(plan.connections), len(tb)
    rjobs, sjobs = np.flatnonzero(plan.receives[tx]), np.flatnonzero(plan.sends[tx])
    rconn, sconn = plan.recv[tb[rjobs]], plan.send[tb[sjobs]]
    sends, s_start, s_count, s_place = _ranked(sjobs, sconn, nconn)
    recvs, r_start, r_count, r_place = _ranked(rjobs, rconn, nconn)
    match, arrival, room = np.full(n, -1), np.full(n, -1), np.full(n, -1)
    sent = r_place < s_count[rconn]  # the k-th receive on a connection takes its k-th message
    match[rjobs[sent]] = sends[s_start[rconn[sent]] + r_place[sent]]
    arrival[match[rjobs[sent]]] = rjobs[sent]
    freed = s_place - depth  # the k-th send waits for the (k - depth)-th receive to start
    ok = (freed >= 0) & (freed < r_count[sconn])
    room[recvs[r_start[sconn[ok]] + freed[ok]]] = sjobs[ok]
    waits[rjobs] += 1
    waits[sjobs[freed >= 0]] += 1
    return match, arrival, room


def _tile_sizes(chunk_bytes: float, tile: int | None) -> list[float]:
    """Bytes of one chunk in each tile."""
    if tile is None or chunk_bytes <= tile:
        size, ntiles = chunk_bytes, 1
    else:
        size, ntiles = tile, -(-int(chunk_bytes) // int(tile))
    return [min(size, chunk_bytes - t * size) for t in range(ntiles)]


class _Sim:
    """One simulation of a plan's jobs in the engine: each ready once its predecessors
    (:class:`_Jobs`) have started, at the latest time any of them lets it go."""

    def __init__(self, ir: IR, plan: _Plan, jobs: _Jobs, network: Network, sizes: list[float]) -> None:
        self.ir, self.name, self.plan, self.jobs = ir, ir.name, plan, jobs
        self.network, self.sizes = network, sizes
        self.made = self._made()
        busy = np.array([t.busy_us for t in self.made] + [0.0])[jobs.transfer_of]
        delay = np.array([t.delay_us for t in self.made] + [0.0])[jobs.transfer_of]
        self.busy, self.delay = busy, delay
        """Per job, how long it keeps its threadblock busy and when its data lands after its start
        (0.0: it sends nothing)."""
        self.starts = np.full(len(jobs.tb), math.nan)
        """When each job started (NaN: never)."""
        self.order = np.full(len(jobs.tb), -1)
        """Each job's place in start order (-1: never)."""

    def _made(self) -> list[Transfer]:
        """The jobs' distinct transfers, asked of the network once each (:attr:`_Jobs.sent`)."""
        sizes, transfer = self.sizes, self.network.transfer
        return [transfer(r, p, count * sizes[t], t == 0, ch) for r, p, ch, count, t in self.jobs.sent]

    def run(self) -> None:
        """Run every job that can run (:attr:`starts`); a receive of a count of bytes its message
        does not carry is refused once it would have started (a broken IR; a sound one pays
        nothing for the check)."""
        jobs = self.jobs
        src = arc_sources(jobs.arcs_from)
        after = np.select(
            [jobs.arc_kind == _ARRIVAL, jobs.arc_kind == _END], [self.delay[src], self.busy[src]], 0.0
        )
        transfer = np.where(jobs.transfer_of == len(self.made), -1, jobs.transfer_of)
        graph = Jobs(
            self.made, transfer, np.zeros(len(transfer), np.int64), jobs.waits,
            np.zeros(len(transfer)), jobs.arcs_from, jobs.arc_to, after,
        )  # fmt: skip
        started = run_jobs(self.network, graph)
        self.starts, self.order = started.starts, started.order
        bad = self._mismatched()
        ran = bad[self.order[bad] >= 0]
        if len(ran):
            raise self.mismatch(int(ran[np.argmin(self.order[ran])]))

    def _mismatched(self) -> np.ndarray:
        """The receives that take a count of bytes their sender did not send."""
        jobs = self.jobs
        nbytes = jobs.chunks * np.array(self.sizes)[jobs.tile]
        recv = np.flatnonzero(jobs.match >= 0)
        got, sent = nbytes[recv], nbytes[jobs.match[recv]]
        return recv[np.abs(sent - got) > 1e-6 * np.maximum(1.0, got)]

    def nbytes(self, job: int) -> float:
        return int(self.jobs.chunks[job]) * self.sizes[int(self.jobs.tile[job])]

    def mismatch(self, job: int) -> ExecutionError:
        """The error of receive ``job`` taking a count of bytes its sender did not send."""
        rank, tb, tx = self.where(job)
        nbytes, sent_bytes = self.nbytes(job), self.nbytes(int(self.jobs.match[job]))
        return ExecutionError(
            f"{self.name}: rank {rank} tb {tb} op {tx.op} ({tx.label()}) "
            f"receives {nbytes:g} B but its sender sent {sent_bytes:g} B: send and receive "
            "counts differ on this connection"
        )

    def where(self, job: int) -> tuple[int, int, Transmission]:
        """The rank, threadblock id and transmission of ``job``, for a report (from the IR: the
        plan keeps none of its objects)."""
        j, x = int(self.jobs.tb[job]), int(self.jobs.tx[job])
        rank, tb = int(self.plan.rank[j]), int(self.plan.id[j])
        block = next(t for t in self.ir.gpus[rank].threadblocks if t.id == tb)
        return rank, tb, transmissions(block, get_dialect("msccl"))[x - int(self.plan.tx_start[j])]

    def finish(self) -> float:
        """When the last call ends or its data lands (0.0: nothing ran)."""
        starts = np.nan_to_num(self.starts, nan=-np.inf)
        return float(max(0.0, (starts + self.busy).max(initial=0.0), (starts + self.delay).max(initial=0.0)))

    def stuck(self) -> list[int]:
        """Each threadblock's first job that never started, in threadblock order."""
        never = np.flatnonzero(np.isnan(self.starts))
        return never[np.unique(self.jobs.tb[never], return_index=True)[1]].tolist()

    def started(self, job: int) -> bool:
        return job >= 0 and not math.isnan(self.starts[job])

    def why(self, job: int) -> tuple:
        """What stuck ``job`` waits for, for a report: ``("flag", rank, tb, op, tb's index)`` (its first
        dependency not published), ``("msg", connection)`` or ``("room", connection)``."""
        plan, jobs = self.plan, self.jobs
        j, x, tile = int(jobs.tb[job]), int(jobs.tx[job]), int(jobs.tile[job])
        for d in range(plan.dep_start[x], plan.dep_start[x + 1]) if jobs.first[job] else ():
            p, per_tile = int(plan.dep_tb[d]), int(plan.publications[plan.dep_tb[d]])
            q = tile * per_tile + int(plan.dep_index[d])
            if q >= len(self.sizes) * per_tile or not self.started(int(jobs.pub_jobs[jobs.pub_start[p] + q])):
                return ("flag", int(plan.rank[j]), int(plan.id[p]), int(plan.dep_op[d]), p)
        if plan.receives[x] and not self.started(int(jobs.match[job])):
            return ("msg", plan.connections[plan.recv[j]])
        return ("room", plan.connections[plan.send[j]])


def _blocked(sim: _Sim, job: int) -> BlockedStep:
    rank, tb, tx = sim.where(job)
    why = sim.why(job)
    if why[0] == "flag":
        never = (
            ""
            if sim.plan.publishes_from(why[4], why[3])
            else f" (nothing in tb {why[2]} from op {why[3]} on has has_dep)"
        )
        reason = f"waits for tb {why[2]} op {why[3]}{never}"
    elif why[0] == "msg":
        reason = f"waits for data from rank {why[1][0]} on channel {why[1][2]}"
    else:
        reason = f"waits for room to send to rank {why[1][1]} on channel {why[1][2]}"
    return BlockedStep(rank, tb, tx.op, int(sim.jobs.tile[job]), f"({tx.label()}) {reason}")


_PROGRAMS = SameObjects()
"""The last IR's preparation (:class:`_Prepared`) and its jobs per tiling: ``xccl compile`` times
the IR it keeps in two models, and each build judges the IR as a runtime would (4-5 s at 512
ranks). Nothing it holds refers to the IR, so the memo lets the IR go (its key, held weakly)."""


@dataclass(frozen=True, eq=False)
class _Prepared:
    """What :func:`simulate` takes from an IR's program: not the :class:`Program` itself, which
    holds the IR (kept in :data:`_PROGRAMS`, it would keep the IR, its key, alive for good)."""

    plan: _Plan
    senders: dict[tuple[int, int, int], int | None]
    """Per connection, its sending threadblock (None: none)."""
    collective: Collective | None


def _prepared(ir: IR) -> _Prepared:
    collective, _ = judged(ir)
    ends = sorted(connections(ir).items())
    return _Prepared(_plan(ir, tuple(key for key, _ in ends)), {key: s for key, (s, _) in ends}, collective)


def _ready(
    ir: IR, size_bytes: float, tile_bytes: int | None, fifo_depth: int | None
) -> tuple[_Prepared, list[float], _Jobs]:
    """The IR's preparation, its tile sizes and its jobs at this size, built once (:data:`_PROGRAMS`)."""
    prepared = _PROGRAMS.get((ir,), "prepared", lambda: _prepared(ir))
    if size_bytes <= 0 or (tile_bytes is not None and tile_bytes < 1):
        raise ExecutionError(f"{ir.name}: size {size_bytes} B, tile {tile_bytes} B: expected positive sizes")
    depth = max(1, protocol.fifo_depth(ir.protocol) if fifo_depth is None else fifo_depth)
    chunk_bytes = size_bytes / ir.nchunksperloop
    sizes = _tile_sizes(chunk_bytes, tile_bytes)
    max_count = (
        MAX_COUNT if tile_bytes is None else protocol.max_allowed_count(int(tile_bytes), int(chunk_bytes))
    )
    key = ("jobs", len(sizes), max_count, depth)
    jobs = _PROGRAMS.get((ir,), key, lambda: _jobs(prepared.plan, len(sizes), max_count, depth))
    return prepared, sizes, jobs


def prepare(
    ir: IR, size_bytes: float, *, tile_bytes: int | None = None, fifo_depth: int | None = None
) -> None:
    """Build what :func:`simulate` of ``ir`` at this size builds before it runs a model (the
    program, judged as a runtime loads it, and its jobs; 4-5 s at 512 ranks), once for every model:
    a child process forked afterwards (``common.forked``) shares it instead of building it again.
    Raises what :func:`simulate` raises for a refused IR or a bad size."""
    _ready(ir, size_bytes, tile_bytes, fifo_depth)


@gc_paused()
def simulate(
    ir: IR,
    topology: Topology,
    size_bytes: float,
    *,
    tile_bytes: int | None = None,
    fifo_depth: int | None = None,
    params: Params | None = None,
) -> SimResult:
    """Time ``ir`` on ``topology`` at ``size_bytes`` (nccl-tests' size; see the module docstring).

    >>> from codegen import compile_algorithm
    >>> from synth.baselines import make_baseline
    >>> from synth.collectives import make_collective
    >>> from topologies.builders import ring
    >>> ring4 = ring(4, 25.0, 0.7)
    >>> ir = compile_algorithm(make_baseline("ring", ring4, make_collective("allgather", 4)), ring4)
    >>> from synth.timing import IDEAL
    >>> round(simulate(ir, ring4, 1e6, params=IDEAL).time_us, 3)  # 3 * (0.7 + 10)
    32.1
    >>> round(simulate(ir, ring4, 1e6).time_us, 3)  # 4.64 + 3 * (2.8 + 0.7 + 10 / 0.8)
    52.64
    """
    prepared, sizes, jobs = _ready(ir, size_bytes, tile_bytes, fifo_depth)
    if topology.num_ranks != ir.num_ranks:
        raise ExecutionError(
            f"{ir.name}: {ir.num_ranks} ranks, but topology {topology.name} has {topology.num_ranks}"
        )
    logical = topology.logical()
    for (src, dst, ch), sender in prepared.senders.items():
        if sender is not None and (src, dst) not in logical.links:
            raise ExecutionError(
                f"{ir.name}: rank {src} tb {sender} sends to rank {dst} on channel {ch}, but "
                f"topology {topology.name} has no link {src}->{dst}"
            )
    if params is None:
        params = model_params(DEFAULT_MODEL, ir.protocol)
    sim = _Sim(ir, prepared.plan, jobs, Network(topology, params), sizes)
    sim.run()
    stuck = sim.stuck()
    if stuck:
        raise DeadlockError(ir.name, tuple(_blocked(sim, job) for job in stuck))
    coll = prepared.collective
    finish = sim.finish()
    finish = finish + params.launch_us if finish > 0 else 0.0
    algbw = algbw_GBps(size_bytes, finish)
    return SimResult(size_bytes, finish, algbw, algbw * (coll.busbw_factor if coll else 1.0), params.label)

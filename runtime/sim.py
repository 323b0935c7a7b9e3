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

By default each step moves all its chunks in one call (``tile_bytes=None``), the granularity of the
Algorithm-level simulator it must agree with. Give ``tile_bytes`` (e.g.
``runtime.protocol.tile_bytes(ir.protocol)``) to replay every step tile by tile, as the kernel does;
then a step pays the per-send cost on its first tile only (the protocol's steady per-tile work is
in the model's achievable rate).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from codegen.ir import IR
from codegen.rules import MAX_COUNT
from common.gc_pause import gc_paused
from common.memo import SameObjects
from runtime import protocol
from runtime.errors import BlockedStep, DeadlockError, ExecutionError
from runtime.program import Program, TbProgram, build_program
from synth.cost import SimResult, algbw_GBps
from synth.timing import DEFAULT_MODEL, Engine, Network, Params, Transfer, model_params
from topologies.model import Topology

__all__ = ["simulate"]


@dataclass(frozen=True)
class _Plan:
    """A program as the simulator walks it, built once per program: threadblocks in (rank, id)
    order, each transmission a tuple of ints (:data:`_Call`), connections and publishers numbered.

    A wait is an int: threadblock ``p``'s publications are ``p``; connection ``c``'s next message is
    ``T + 2c`` and its room ``T + 2c + 1`` (``T`` threadblocks). A publication ``(tile, step)`` is
    the int ``tile * span + step`` (``span`` exceeds every op index), ordered as the pairs are."""

    tbs: tuple[TbProgram, ...]
    calls: tuple[tuple[_Call, ...], ...]
    recv: tuple[int, ...]
    send: tuple[int, ...]
    connections: tuple[tuple[int, int, int], ...]
    span: int


_Call = tuple[bool, bool, int, bool, int, tuple[tuple[int, int], ...]]
"""One transmission: (receives, sends, count, has_dep, step it publishes, deps as (publisher, op))."""


def _plan(program: Program) -> _Plan:
    tbs = tuple(sorted(program.tbs, key=lambda p: (p.rank, p.id)))
    index = {(p.rank, p.id): j for j, p in enumerate(tbs)}
    conns = {key: c for c, key in enumerate(program.connections)}
    span = 1 + max(
        (op for p in tbs for tx in p.transmissions for op in (*tx.ops, *(d.op for d in tx.deps))), default=0
    )
    calls = tuple(
        tuple(
            (
                tx.type.receives,
                tx.type.sends,
                tx.count,
                tx.has_dep,
                tx.step,
                tuple((index[(p.rank, d.tb)], d.op) for d in tx.deps),
            )
            for tx in p.transmissions
        )
        for p in tbs
    )
    recv = tuple(-1 if p.recv is None else conns[(p.recv, p.rank, p.channel)] for p in tbs)
    send = tuple(-1 if p.send is None else conns[(p.rank, p.send, p.channel)] for p in tbs)
    return _Plan(tbs, calls, recv, send, tuple(conns), span)


class _Tb:
    """One threadblock as it runs: its next call (transmission ``tx`` of tile ``tile``, ``part``
    chunks of it done) and, once ``_Sim.consider`` handed it to the engine, its size and transfer.
    It holds its connections' lists (``in_*``: what it receives, ``out_*``: what it sends) and
    their waits (:class:`_Plan`), looked up once."""

    __slots__ = (
        "calls", "count", "dep_time", "free", "full_wait", "in_arrives", "in_consumed", "in_sent",
        "msg_wait", "nbytes", "out_arrives", "out_consumed", "out_sent", "part", "prog", "room_wait",
        "sent_wait", "tile", "transfer", "transfers", "tx", "waited",
    )  # fmt: skip

    def __init__(self, sim: _Sim, prog: TbProgram, calls: tuple[_Call, ...], recv: int, send: int) -> None:
        self.prog, self.calls = prog, calls
        self.free = self.dep_time = self.nbytes = 0.0
        self.tile = self.tx = self.part = self.count = 0
        self.waited = False
        self.transfer: Transfer | None = None
        self.transfers: dict[tuple[float, bool], Transfer] = {}
        if recv >= 0:
            self.in_arrives, self.in_consumed, self.in_sent, self.msg_wait, self.room_wait = sim.ends(recv)
        if send >= 0:
            self.out_arrives, self.out_consumed, self.out_sent, self.sent_wait, self.full_wait = sim.ends(
                send
            )

    @property
    def done(self) -> bool:
        return self.tx >= len(self.calls)


class _Sim:
    """The IR's state as its calls run: what each connection sent (arrival, bytes) and consumed,
    what each threadblock published; the engine decides when each call starts."""

    def __init__(
        self,
        program: Program,
        plan: _Plan,
        network: Network,
        chunk_bytes: float,
        tile: int | None,
        depth: int,
    ) -> None:
        self.program, self.plan, self.network, self.depth = program, plan, network, depth
        if tile is None or chunk_bytes <= tile:
            size, ntiles = chunk_bytes, 1
        else:
            size, ntiles = tile, -(-int(chunk_bytes) // int(tile))
        self.sizes = [min(size, chunk_bytes - t * size) for t in range(ntiles)]
        """Bytes of one chunk in each tile."""
        self.max_count = (
            MAX_COUNT if tile is None else protocol.max_allowed_count(int(tile), int(chunk_bytes))
        )
        self.arrives: list[list[float]] = [[] for _ in plan.connections]
        self.sent: list[list[float]] = [[] for _ in plan.connections]
        self.consumed: list[list[float]] = [[] for _ in plan.connections]
        self.published: list[list[int]] = [[] for _ in plan.tbs]
        self.published_at: list[list[float]] = [[] for _ in plan.tbs]
        self.finish = 0.0
        self.tbs = [_Tb(self, *row) for row in zip(plan.tbs, plan.calls, plan.recv, plan.send, strict=True)]
        self.waiting: dict[int, list[int]] = {}
        self.engine = Engine(network)

    def ends(self, c: int) -> tuple[list[float], list[float], list[float], int, int]:
        """Connection ``c``'s lists (arrivals, times consumed, bytes sent) and its two waits (its
        next message, room in it)."""
        base = len(self.plan.tbs)
        return self.arrives[c], self.consumed[c], self.sent[c], base + 2 * c, base + 2 * c + 1

    def ready(self, tb: _Tb) -> tuple[float, int]:
        """When ``tb``'s next call is ready (all but the links) and -1, or 0.0 and the wait
        (:class:`_Plan`) it is blocked on."""
        call = tb.calls[tb.tx]
        if not tb.waited:
            dep_time = 0.0
            key = tb.tile * self.plan.span
            for p, op in call[5]:
                keys = self.published[p]
                i = bisect_left(keys, key + op)
                if i >= len(keys):
                    return 0.0, p
                at = self.published_at[p][i]
                if at > dep_time:
                    dep_time = at
            tb.waited, tb.dep_time = True, dep_time
        start = tb.dep_time if tb.dep_time > tb.free else tb.free
        if call[0]:
            k, arrives = len(tb.in_consumed), tb.in_arrives
            if k >= len(arrives):
                return 0.0, tb.msg_wait
            if arrives[k] > start:
                start = arrives[k]
        if call[1]:
            k = len(tb.out_arrives) - self.depth
            if k >= 0:
                consumed = tb.out_consumed
                if k >= len(consumed):
                    return 0.0, tb.full_wait
                if consumed[k] > start:
                    start = consumed[k]
        return start, -1

    def transfer(self, tb: _Tb, nbytes: float) -> Transfer:
        """The transfer of ``nbytes`` from ``tb``'s rank to its send peer; a step pays the per-send
        cost on its first tile only."""
        key = (nbytes, tb.tile == 0)
        out = tb.transfers.get(key)
        if out is None:
            out = tb.transfers[key] = self.network.transfer(
                tb.prog.rank, tb.prog.send, nbytes, send=tb.tile == 0, channel=tb.prog.channel
            )
        return out

    # -- running the calls -------------------------------------------------------------------------
    def run(self) -> None:
        for j in range(len(self.tbs)):
            self.consider(j)
        self.engine.run(self.start)

    def consider(self, j: int) -> None:
        """Hand threadblock ``j``'s next call to the engine once it is ready, else let it wait."""
        tb = self.tbs[j]
        if tb.tx >= len(tb.calls):
            return
        ready, wait = self.ready(tb)
        if wait >= 0:
            self.waiting.setdefault(wait, []).append(j)
            return
        call = tb.calls[tb.tx]
        count = call[2] - tb.part
        if count > self.max_count:
            count = self.max_count
        tb.count = count
        tb.nbytes = nbytes = count * self.sizes[tb.tile]
        tb.transfer = self.transfer(tb, nbytes) if call[1] else None
        self.engine.submit(j, ready, tb.transfer)

    def start(self, j: int, start: float) -> None:
        """The engine started threadblock ``j``'s next call at ``start``: run it, wake who it frees
        (the receiver's room, then the message, then the publication)."""
        tb = self.tbs[j]
        call = tb.calls[tb.tx]
        nbytes, transfer = tb.nbytes, tb.transfer
        end = start
        wakes = []
        if call[0]:
            self.receive(tb, start, nbytes)
            wakes.append(tb.room_wait)
        if transfer is not None:
            end = start + transfer.busy_us
            arrive = start + transfer.delay_us
            tb.out_arrives.append(arrive)
            tb.out_sent.append(nbytes)
            if arrive > self.finish:
                self.finish = arrive
            wakes.append(tb.sent_wait)
        tb.free = end
        if end > self.finish:
            self.finish = end
        tb.part += tb.count
        if tb.part >= call[2]:
            if call[3]:
                self.published[j].append(tb.tile * self.plan.span + call[4])
                self.published_at[j].append(end)
                wakes.append(j)
            tb.part, tb.waited = 0, False
            tb.tx += 1
            if tb.tx == len(tb.calls) and tb.tile + 1 < len(self.sizes):
                tb.tx, tb.tile = 0, tb.tile + 1
        waiting, consider = self.waiting, self.consider
        for wake in wakes:
            if wake in waiting:
                for other in waiting.pop(wake):
                    consider(other)
        consider(j)

    def receive(self, tb: _Tb, start: float, nbytes: float) -> None:
        """``tb`` consumes its connection's next message at ``start`` (its size must match)."""
        consumed = tb.in_consumed
        sent_bytes = tb.in_sent[len(consumed)]
        if abs(sent_bytes - nbytes) > 1e-6 * max(1.0, nbytes):
            prog = tb.prog
            tx = prog.transmissions[tb.tx]
            raise ExecutionError(
                f"{self.program.ir.name}: rank {prog.rank} tb {prog.id} op {tx.op} ({tx.label()}) "
                f"receives {nbytes:g} B but its sender sent {sent_bytes:g} B: send and receive "
                "counts differ on this connection"
            )
        consumed.append(start)

    def why(self, tb: _Tb) -> tuple:
        """What ``tb``'s next call is blocked on, for a report: ``("flag", rank, tb, op)``,
        ``("msg", connection)`` or ``("room", connection)``."""
        _, wait = self.ready(tb)
        prog = tb.prog
        if wait < len(self.tbs):
            key = tb.tile * self.plan.span
            for p, op in tb.calls[tb.tx][5]:
                if bisect_left(self.published[p], key + op) >= len(self.published[p]):
                    return ("flag", prog.rank, self.plan.tbs[p].id, op)
        c, room = divmod(wait - len(self.tbs), 2)
        return ("room" if room else "msg", self.plan.connections[c])


def _blocked(sim: _Sim, tb: _Tb, why: tuple) -> BlockedStep:
    prog = tb.prog
    tx = prog.transmissions[tb.tx]
    if why[0] == "flag":
        target = sim.program.tb(why[1], why[2])
        never = (
            ""
            if target.publishes_from(why[3])
            else f" (nothing in tb {why[2]} from op {why[3]} on has has_dep)"
        )
        reason = f"waits for tb {why[2]} op {why[3]}{never}"
    elif why[0] == "msg":
        reason = f"waits for data from rank {why[1][0]} on channel {why[1][2]}"
    else:
        reason = f"waits for room to send to rank {why[1][1]} on channel {why[1][2]}"
    return BlockedStep(prog.rank, prog.id, tx.op, tb.tile, f"({tx.label()}) {reason}")


_PROGRAMS = SameObjects()
"""The last IR's program (frozen, read only here): ``xccl compile`` times the IR it keeps in two
models, and each build judges the IR as a runtime would (4-5 s at 512 ranks)."""


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
    program = _PROGRAMS.get((ir,), "program", lambda: build_program(ir))
    plan = _PROGRAMS.get((ir,), "plan", lambda: _plan(program))
    if size_bytes <= 0 or (tile_bytes is not None and tile_bytes < 1):
        raise ExecutionError(f"{ir.name}: size {size_bytes} B, tile {tile_bytes} B: expected positive sizes")
    if topology.num_ranks != ir.num_ranks:
        raise ExecutionError(
            f"{ir.name}: {ir.num_ranks} ranks, but topology {topology.name} has {topology.num_ranks}"
        )
    logical = topology.logical()
    logical.route((src, dst) for src, dst, _ in program.connections)  # one search per source
    for (src, dst, ch), conn in program.connections.items():
        if conn.sender is not None and (src, dst) not in logical.links:
            raise ExecutionError(
                f"{ir.name}: rank {src} tb {conn.sender} sends to rank {dst} on channel {ch}, but "
                f"topology {topology.name} has no link {src}->{dst}"
            )
    depth = protocol.fifo_depth(ir.protocol) if fifo_depth is None else fifo_depth
    if params is None:
        params = model_params(DEFAULT_MODEL, ir.protocol)
    sim = _Sim(
        program, plan, Network(topology, params), size_bytes / ir.nchunksperloop, tile_bytes, max(1, depth)
    )
    sim.run()
    stuck = [tb for tb in sim.tbs if not tb.done]
    if stuck:
        raise DeadlockError(ir.name, tuple(_blocked(sim, tb, sim.why(tb)) for tb in stuck))
    coll = program.collective
    finish = sim.finish + params.launch_us if sim.finish > 0 else 0.0
    algbw = algbw_GBps(size_bytes, finish)
    return SimResult(size_bytes, finish, algbw, algbw * (coll.busbw_factor if coll else 1.0), params.label)

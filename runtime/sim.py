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


_Call = tuple[bool, bool, int, bool, tuple[tuple[int, int, int, int], ...]]
"""One transmission as the simulator runs it: ``(receives, sends, count, has_dep, deps)``, read by
unpacking (a NamedTuple's unpacking costs 50 ns more, 0.2 s of a 512-rank simulation's 4 M).
``count``: the chunks it moves (a call moves at most the protocol's count; the rest in more calls);
``has_dep``: it publishes (the next entry of its threadblock's publications, per tile); ``deps``:
what it waits for, each ``(publisher p, index, n, op)``: in tile ``t``, publication ``t * n +
index`` of threadblock ``p`` (``p``'s first with a step ``>= op``; ``n`` of them per tile)."""


@dataclass(frozen=True)
class _Plan:
    """A program as the simulator walks it, built once per program and shared by every simulation
    of it (each model, size and tile): threadblocks in (rank, id) order, each transmission a
    :class:`_Call` of ints, connections and publishers numbered.

    A wait is an int: threadblock ``p``'s publications are ``p``; connection ``c``'s next message is
    ``T + 2c`` and its room ``T + 2c + 1`` (``T`` threadblocks). A threadblock publishes in the
    order of its steps, the same steps in every tile, so a dependency names the publication it
    waits for by its place in that list, worked out here once (no search while running)."""

    tbs: tuple[TbProgram, ...]
    calls: tuple[tuple[_Call, ...], ...]
    recv: tuple[int, ...]
    send: tuple[int, ...]
    connections: tuple[tuple[int, int, int], ...]


def _plan(program: Program) -> _Plan:
    tbs = tuple(sorted(program.tbs, key=lambda p: (p.rank, p.id)))
    index = {(p.rank, p.id): j for j, p in enumerate(tbs)}
    conns = {key: c for c, key in enumerate(program.connections)}
    steps = [[tx.step for tx in p.transmissions if tx.has_dep] for p in tbs]

    def dep(p: int, op: int) -> tuple[int, int, int, int]:
        return (p, bisect_left(steps[p], op), len(steps[p]), op)

    calls = tuple(
        tuple(
            (
                tx.type.receives,
                tx.type.sends,
                tx.count,
                tx.has_dep,
                tuple(dep(index[(p.rank, d.tb)], d.op) for d in tx.deps),
            )
            for tx in p.transmissions
        )
        for p in tbs
    )
    recv = tuple(-1 if p.recv is None else conns[(p.recv, p.rank, p.channel)] for p in tbs)
    send = tuple(-1 if p.send is None else conns[(p.rank, p.send, p.channel)] for p in tbs)
    return _Plan(tbs, calls, recv, send, tuple(conns))


class _Tb:
    """One threadblock as it runs: its next call (transmission ``tx`` of tile ``tile``, ``part``
    chunks of it done) and, once ``_Sim.consider`` handed it to the engine, its size and transfer.
    It holds its connections' lists (``in_*``: what it receives, ``out_*``: what it sends) and
    their waits (:class:`_Plan`), looked up once."""

    __slots__ = (
        "blocked", "calls", "count", "dep_time", "free", "full_wait", "in_arrives", "in_consumed", "in_sent",
        "msg_wait", "nbytes", "out_arrives", "out_consumed", "out_sent", "part", "prog", "room_wait",
        "sent_wait", "tile", "transfer", "transfers", "tx", "waited",
    )  # fmt: skip

    def __init__(self, sim: _Sim, prog: TbProgram, calls: tuple[_Call, ...], recv: int, send: int) -> None:
        self.prog, self.calls = prog, calls
        self.free = self.dep_time = self.nbytes = 0.0
        self.tile = self.tx = self.part = self.count = self.blocked = 0
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
        self.published: list[list[float]] = [[] for _ in plan.tbs]
        """Per threadblock, when each of its publications was made (:class:`_Call`)."""
        self.finish = 0.0
        self.tbs = [_Tb(self, *row) for row in zip(plan.tbs, plan.calls, plan.recv, plan.send, strict=True)]
        self.waiting: dict[int, list[int]] = {}
        self.engine = Engine(network)
        self.submit = self.engine.submit

    def ends(self, c: int) -> tuple[list[float], list[float], list[float], int, int]:
        """Connection ``c``'s lists (arrivals, times consumed, bytes sent) and its two waits (its
        next message, room in it)."""
        base = len(self.plan.tbs)
        return self.arrives[c], self.consumed[c], self.sent[c], base + 2 * c, base + 2 * c + 1

    # -- running the calls -------------------------------------------------------------------------
    def run(self) -> None:
        for j in range(len(self.tbs)):
            self.consider(j)
        self.engine.run(self.start)

    def consider(self, j: int) -> None:
        """Hand threadblock ``j``'s next call to the engine once it is ready (its dependencies
        published, its message landed, room in its FIFO; the links are the engine's), else let it
        wait on what blocks it (:class:`_Plan`)."""
        tb = self.tbs[j]
        calls = tb.calls
        if tb.tx >= len(calls):
            return
        receives, sends, count, _, deps = calls[tb.tx]
        if not tb.waited:
            dep_time = 0.0
            if deps:
                tile, published = tb.tile, self.published
                for p, i, n, _ in deps:
                    times = published[p]
                    i += tile * n
                    if i >= len(times):
                        self.wait(p, j)
                        return
                    if times[i] > dep_time:
                        dep_time = times[i]
            tb.waited, tb.dep_time = True, dep_time
        start = tb.dep_time if tb.dep_time > tb.free else tb.free
        if receives:
            k, arrives = len(tb.in_consumed), tb.in_arrives
            if k >= len(arrives):
                self.wait(tb.msg_wait, j)
                return
            if arrives[k] > start:
                start = arrives[k]
        if sends:
            k = len(tb.out_arrives) - self.depth
            if k >= 0:
                consumed = tb.out_consumed
                if k >= len(consumed):
                    self.wait(tb.full_wait, j)
                    return
                if consumed[k] > start:
                    start = consumed[k]
        count -= tb.part
        if count > self.max_count:
            count = self.max_count
        tb.count = count
        tb.nbytes = nbytes = count * self.sizes[tb.tile]
        if sends:
            key = (nbytes, tb.tile == 0)
            transfer = tb.transfers.get(key)
            if transfer is None:
                transfer = tb.transfers[key] = self.network.transfer(
                    tb.prog.rank, tb.prog.send, nbytes, send=tb.tile == 0, channel=tb.prog.channel
                )
            tb.transfer = transfer
        else:
            tb.transfer = None
        self.submit(j, start, tb.transfer)

    def wait(self, on: int, j: int) -> None:
        """Threadblock ``j`` waits until ``on`` (:class:`_Plan`) happens."""
        self.tbs[j].blocked = on
        waiting = self.waiting.get(on)
        if waiting is None:
            self.waiting[on] = [j]
        else:
            waiting.append(j)

    def start(self, j: int, start: float) -> None:
        """The engine started threadblock ``j``'s next call at ``start``: run it, wake who it frees
        (the receiver's room, then the message, then the publication, then ``j`` itself)."""
        tb = self.tbs[j]
        receives, _, count, has_dep, _ = tb.calls[tb.tx]
        nbytes, transfer = tb.nbytes, tb.transfer
        if receives:
            consumed = tb.in_consumed
            sent_bytes = tb.in_sent[len(consumed)]
            if abs(sent_bytes - nbytes) > 1e-6 * max(1.0, nbytes):
                raise self.mismatch(tb, nbytes, sent_bytes)
            consumed.append(start)
        end = start
        if transfer is not None:
            end = start + transfer.busy_us
            arrive = start + transfer.delay_us
            tb.out_arrives.append(arrive)
            tb.out_sent.append(nbytes)
            if arrive > self.finish:
                self.finish = arrive
        tb.free = end
        if end > self.finish:
            self.finish = end
        tb.part += tb.count
        published = False
        if tb.part >= count:
            if has_dep:
                self.published[j].append(end)
                published = True
            tb.part, tb.waited = 0, False
            tb.tx += 1
            if tb.tx == len(tb.calls) and tb.tile + 1 < len(self.sizes):
                tb.tx, tb.tile = 0, tb.tile + 1
        waiting, consider = self.waiting, self.consider
        if receives and tb.room_wait in waiting:
            for other in waiting.pop(tb.room_wait):
                consider(other)
        if transfer is not None and tb.sent_wait in waiting:
            for other in waiting.pop(tb.sent_wait):
                consider(other)
        if published and j in waiting:
            for other in waiting.pop(j):
                consider(other)
        consider(j)

    def mismatch(self, tb: _Tb, nbytes: float, sent_bytes: float) -> ExecutionError:
        """The error of ``tb`` receiving ``nbytes`` where its sender sent ``sent_bytes``."""
        prog = tb.prog
        tx = prog.transmissions[tb.tx]
        return ExecutionError(
            f"{self.program.ir.name}: rank {prog.rank} tb {prog.id} op {tx.op} ({tx.label()}) "
            f"receives {nbytes:g} B but its sender sent {sent_bytes:g} B: send and receive "
            "counts differ on this connection"
        )

    def why(self, tb: _Tb) -> tuple:
        """What ``tb``'s next call is blocked on, for a report: ``("flag", rank, tb, op)``,
        ``("msg", connection)`` or ``("room", connection)``."""
        wait = tb.blocked
        prog = tb.prog
        if wait < len(self.tbs):
            *_, deps = tb.calls[tb.tx]
            for p, i, n, op in deps:
                if tb.tile * n + i >= len(self.published[p]):
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

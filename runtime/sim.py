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


@dataclass
class _Tb:
    prog: TbProgram
    free: float = 0.0
    tile: int = 0
    tx: int = 0
    part: int = 0
    waited: bool = False
    dep_time: float = 0.0
    count: int = 0
    """Chunks of the next call, with its transfer (``None``: it sends nothing), as ``_Sim.consider``
    handed it to the engine; ``commit`` runs it (a call's transfer was looked up twice per call)."""
    transfer: Transfer | None = None
    recv_key: tuple | None = None
    send_key: tuple | None = None

    def __post_init__(self) -> None:
        prog = self.prog
        self.recv_key = None if prog.recv is None else (prog.recv, prog.rank, prog.channel)
        self.send_key = None if prog.send is None else (prog.rank, prog.send, prog.channel)

    @property
    def done(self) -> bool:
        return self.tx >= len(self.prog.transmissions)


class _Sim:
    """The IR's state as its calls run: what each connection sent and consumed, what each
    threadblock published; the engine decides when each call starts."""

    def __init__(
        self, program: Program, network: Network, chunk_bytes: float, tile: float | None, depth: int
    ) -> None:
        self.program, self.network, self.depth = program, network, depth
        self.chunk = chunk_bytes
        if tile is None or chunk_bytes <= tile:
            self.tile, self.ntiles = chunk_bytes, 1
        else:
            self.tile, self.ntiles = tile, -(-int(chunk_bytes) // int(tile))
        self.max_count = (
            MAX_COUNT
            if tile is None
            else protocol.max_allowed_count(int(tile), int(chunk_bytes))
        )
        self.sent: dict[tuple, list[tuple[float, float]]] = {key: [] for key in program.connections}
        self.consumed: dict[tuple, list[float]] = {key: [] for key in program.connections}
        self.published: dict[tuple[int, int], tuple[list[tuple[int, int]], list[float]]] = {
            (tb.rank, tb.id): ([], []) for tb in program.tbs
        }
        self.finish = 0.0
        self.tbs = [_Tb(p) for p in sorted(program.tbs, key=lambda p: (p.rank, p.id))]
        self.waiting: dict[tuple, list[int]] = {}
        self.engine = Engine(network)

    # -- what a call waits for -------------------------------------------------------------------
    def tile_bytes(self, t: int) -> float:
        return min(self.tile, self.chunk - t * self.tile)

    def published_at(self, rank: int, tb: int, key: tuple[int, int]) -> float | None:
        keys, times = self.published[(rank, tb)]
        i = bisect_left(keys, key)
        return times[i] if i < len(keys) else None

    def ready(self, tb: _Tb) -> tuple[float, tuple | None]:
        """When ``tb``'s next call is ready (all but the links), or what it is blocked on."""
        prog = tb.prog
        tx = prog.transmissions[tb.tx]
        if not tb.waited:
            dep_time = 0.0
            for dep in tx.deps:
                at = self.published_at(prog.rank, dep.tb, (tb.tile, dep.op))
                if at is None:
                    return 0.0, ("flag", prog.rank, dep.tb, dep.op)
                dep_time = max(dep_time, at)
            tb.waited, tb.dep_time = True, dep_time
        start = max(tb.free, tb.dep_time)
        kind = tx.type
        if kind.receives:
            key = tb.recv_key
            k, sent = len(self.consumed[key]), self.sent[key]
            if k >= len(sent):
                return 0.0, ("msg", key)
            if sent[k][0] > start:
                start = sent[k][0]
        if kind.sends:
            key = tb.send_key
            k = len(self.sent[key]) - self.depth
            if k >= 0:
                consumed = self.consumed[key]
                if k >= len(consumed):
                    return 0.0, ("room", key)
                if consumed[k] > start:
                    start = consumed[k]
        return start, None

    def call(self, tb: _Tb) -> tuple[int, Transfer | None]:
        """How many chunks ``tb``'s next call moves, and its transfer if it sends."""
        tx = tb.prog.transmissions[tb.tx]
        count = min(self.max_count, tx.count - tb.part)
        if not tx.type.sends:
            return count, None
        nbytes = count * self.tile_bytes(tb.tile)
        return count, self.network.transfer(
            tb.prog.rank, tb.prog.send, nbytes, send=tb.tile == 0, channel=tb.prog.channel
        )

    # -- running the calls -------------------------------------------------------------------------
    def run(self) -> None:
        for j in range(len(self.tbs)):
            self.consider(j)
        self.engine.run(self.start)

    def consider(self, j: int) -> None:
        """Hand threadblock ``j``'s next call to the engine once it is ready, else let it wait."""
        tb = self.tbs[j]
        if tb.done:
            return
        ready, why = self.ready(tb)
        if why is None:
            tb.count, tb.transfer = self.call(tb)
            self.engine.submit(j, ready, tb.transfer)
        else:
            self.waiting.setdefault(why[:3] if why[0] == "flag" else why, []).append(j)

    def start(self, j: int, start: float) -> None:
        """The engine started threadblock ``j``'s next call at ``start``: run it, wake who it frees."""
        for wake in self.commit(self.tbs[j], start):
            for other in self.waiting.pop(wake, ()):
                self.consider(other)
        self.consider(j)

    def commit(self, tb: _Tb, start: float) -> list[tuple]:
        """Run ``tb``'s next call at ``start``; returns the wait keys it may release."""
        prog = tb.prog
        tx = prog.transmissions[tb.tx]
        tc, transfer = tb.count, tb.transfer
        nbytes = tc * self.tile_bytes(tb.tile)
        end = start
        woken: list[tuple] = []
        if tx.type.receives:
            woken.append(self.receive(tb, start, nbytes))
        if transfer is not None:
            key = tb.send_key
            end = start + transfer.busy_us
            self.sent[key].append((start + transfer.delay_us, nbytes))
            self.finish = max(self.finish, start + transfer.delay_us)
            woken.append(("msg", key))
        tb.free = end
        self.finish = max(self.finish, end)
        tb.part += tc
        if tb.part >= tx.count:
            if tx.has_dep:
                keys, times = self.published[(prog.rank, prog.id)]
                keys.append((tb.tile, tx.step))
                times.append(end)
                woken.append(("flag", prog.rank, prog.id))
            tb.part, tb.waited = 0, False
            tb.tx += 1
            if tb.tx == len(prog.transmissions) and tb.tile + 1 < self.ntiles:
                tb.tx, tb.tile = 0, tb.tile + 1
        return woken

    def receive(self, tb: _Tb, start: float, nbytes: float) -> tuple:
        """``tb`` consumes its connection's next message at ``start`` (its size must match)."""
        prog = tb.prog
        key = tb.recv_key
        sent_bytes = self.sent[key][len(self.consumed[key])][1]
        if abs(sent_bytes - nbytes) > 1e-6 * max(1.0, nbytes):
            tx = prog.transmissions[tb.tx]
            raise ExecutionError(
                f"{self.program.ir.name}: rank {prog.rank} tb {prog.id} op {tx.op} ({tx.label()}) "
                f"receives {nbytes:g} B but its sender sent {sent_bytes:g} B: send and receive "
                "counts differ on this connection"
            )
        self.consumed[key].append(start)
        return ("room", key)


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
    sim = _Sim(program, Network(topology, params), size_bytes / ir.nchunksperloop, tile_bytes, max(1, depth))
    sim.run()
    stuck = [tb for tb in sim.tbs if not tb.done]
    if stuck:
        raise DeadlockError(ir.name, tuple(_blocked(sim, tb, sim.ready(tb)[1]) for tb in stuck))
    coll = program.collective
    finish = sim.finish + params.launch_us if sim.finish > 0 else 0.0
    algbw = algbw_GBps(size_bytes, finish)
    return SimResult(size_bytes, finish, algbw, algbw * (coll.busbw_factor if coll else 1.0), params.label)

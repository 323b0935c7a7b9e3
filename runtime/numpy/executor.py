"""The NumPy executor: every rank of an IR in one process, with the MSCCL runtime's semantics.

Per rank: input, output and scratch buffers (aliased for in-place calls). Per threadblock: its
transmissions (``runtime.program``), replayed once per tile as the kernel does, each split into
primitive calls of at most ``maxAllowedCount`` chunks. Per connection (sender, receiver, channel):
a FIFO of primitive calls, bounded like NCCL's (``fifo_depth`` calls, default from the protocol:
Simple 2, LL/LL128 8), so a schedule that only works with unbounded buffering deadlocks here too.

A call runs when its transmission's dependencies are published for this tile (or a later one),
data waits on its connection if it receives, and its FIFO has room if it sends. Threadblocks take
turns from a queue, each running until it blocks (or, with ``schedule_seed``, one call per turn in
a seeded random order, to try other interleavings); a blocked threadblock rejoins the queue when
something it may wait for changes (data arrives, room frees up, its rank publishes progress). When
the queue is empty while threadblocks are left, every one of them is blocked: a deadlock, and
:class:`DeadlockError` names every blocked step and what it waits for.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codegen.ir import IR, Buffer, OpType
from common.units import format_size
from runtime import protocol
from runtime.errors import BlockedStep, DeadlockError, ExecutionError
from runtime.executor import Executor
from runtime.limits import check_memory, memory_limit
from runtime.numpy.memory import Message, RankMemory
from runtime.numpy.ops import HANDLERS, Call
from runtime.program import Connection, TbProgram, call_aliases
from runtime.reference import REDUCTIONS
from synth.collectives import Collective

__all__ = ["ExecStats", "NumpyExecutor"]


@dataclass(frozen=True)
class ExecStats:
    """What one execution did: primitive calls, bytes written to destinations, scheduling turns."""

    calls: int
    bytes_written: int
    turns: int


class _Tb:
    """A threadblock's progress: tile, transmission, chunk offset of the next call."""

    __slots__ = ("done", "incoming", "mem", "outgoing", "part", "prog", "queued", "tile", "tx", "waited")

    def __init__(self, prog: TbProgram, mem: RankMemory, incoming, outgoing) -> None:
        self.prog, self.mem, self.incoming, self.outgoing = prog, mem, incoming, outgoing
        self.tile = self.tx = self.part = 0
        self.waited = self.queued = False
        self.done = not prog.transmissions


class NumpyExecutor(Executor):
    """Runs one IR at one size, dtype and reduction; :meth:`load` inputs, :meth:`execute`, read
    :meth:`outputs`. ``tile_bytes`` and ``fifo_depth`` default to the IR protocol's values;
    ``declared`` is the expected result of a ``custom`` IR (``runtime.program.collective_of``);
    ``max_memory`` (bytes or a size) the host-memory limit, checked before anything is allocated
    (default: ``runtime.limits.memory_limit()``)."""

    def __init__(
        self,
        ir: IR,
        size_bytes: int,
        dtype: str | np.dtype = "float32",
        op: str = "sum",
        *,
        inplace: bool = False,
        tile_bytes: int | None = None,
        fifo_depth: int | None = None,
        schedule_seed: int | None = None,
        declared: Collective | None = None,
        max_memory: int | str | None = None,
    ) -> None:
        super().__init__(ir, size_bytes, dtype, op, inplace, declared)
        self.ufunc = REDUCTIONS[self.op]
        tile = protocol.tile_bytes(ir.protocol) if tile_bytes is None else tile_bytes
        self.layout = protocol.layout(self.chunk_elems, self.dtype.itemsize, tile)
        self.fifo_depth = protocol.fifo_depth(ir.protocol) if fifo_depth is None else fifo_depth
        if self.fifo_depth < 1:
            raise ExecutionError(f"fifo depth {self.fifo_depth}: expected at least 1 call")
        self.schedule_seed = schedule_seed
        aliases = call_aliases(self.program, inplace)
        what = f"{ir.name}: executing at {format_size(size_bytes)} on {ir.num_ranks} ranks"
        check_memory(what, self.footprint_bytes(aliases), memory_limit(max_memory))
        self.memory = [
            RankMemory(self.program.chunks[r], self.chunk_elems, self.layout.ntiles, self.dtype, aliases[r])
            for r in range(ir.num_ranks)
        ]
        self.fifos: dict[tuple[int, int, int], deque[Message]] = {
            key: deque() for key in self.program.connections
        }
        self._loaded = False

    def footprint_bytes(self, aliases: Sequence[tuple[str, int] | None]) -> int:
        """About the host memory one checked execution takes: every rank's buffers (in place, the
        smaller inside the larger), the inputs kept to reload them, and the reference (its terms
        are float64 for float reductions)."""
        item, chunk = self.dtype.itemsize, self.chunk_elems
        buffers = inputs = 0
        for rank, alias in enumerate(aliases):
            chunks = self.program.chunks[rank]
            inp, out, scratch = chunks[Buffer.INPUT], chunks[Buffer.OUTPUT], chunks[Buffer.SCRATCH]
            buffers += (max(inp, out) if alias is not None else inp + out) + scratch
            inputs += inp
        reference = 0
        if self.collective is not None:
            wide = 8 if self.dtype.kind == "f" else item
            reference = inputs * (item + wide) + 2 * self.collective.num_addresses * 8
        return (buffers + inputs) * chunk * item + reference * chunk

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        """Put one input array per rank in place; everything else starts as garbage."""
        if len(inputs) != self.ir.num_ranks:
            raise ExecutionError(f"{self.ir.name}: expected {self.ir.num_ranks} inputs, got {len(inputs)}")
        for rank, (mem, data) in enumerate(zip(self.memory, inputs, strict=True)):
            want = self.input_elems(rank)
            if np.size(data) != want:
                raise ExecutionError(
                    f"{self.ir.name}: input of rank {rank}: expected {want} elements, got {np.size(data)}"
                )
            mem.load(np.asarray(data).reshape(-1))
        for fifo in self.fifos.values():
            fifo.clear()
        self._loaded = True

    def outputs(self) -> list[np.ndarray]:
        """Every rank's output buffer (views, valid until the next :meth:`load`)."""
        return [mem.view(Buffer.OUTPUT) for mem in self.memory]

    # -- execution ---------------------------------------------------------------------------------
    def execute(self) -> ExecStats:
        """Run every threadblock to its end; raises :class:`DeadlockError` if they cannot all get there."""
        if not self._loaded:
            raise ExecutionError(f"{self.ir.name}: load inputs before executing")
        self._loaded = False
        flags = [{tb.id: (-1, -1) for tb in g.threadblocks} for g in self.ir.gpus]
        tbs = {(prog.rank, prog.id): self._state(prog) for prog in self.program.tbs}
        ranks = [[tb for tb in tbs.values() if tb.prog.rank == r] for r in range(self.ir.num_ranks)]
        ready = deque(tb for tb in tbs.values() if not tb.done)
        for tb in ready:
            tb.queued = True
        rng = random.Random(self.schedule_seed) if self.schedule_seed is not None else None
        calls = written = turns = 0
        while ready:
            if rng is not None:
                ready.rotate(-rng.randrange(len(ready)))
            tb = ready.popleft()
            tb.queued = False
            turns += 1
            while True:
                done = self._advance(tb, flags[tb.prog.rank])
                if done is None:
                    break
                calls += 1
                written += done[0]
                self._wake(tb.prog, done[1], done[2], tbs, ranks, ready)
                if rng is not None:
                    _enqueue(tb, ready)
                    break
        live = [tb for tb in tbs.values() if not tb.done]
        if live:
            raise DeadlockError(self.ir.name, tuple(self._blocked(tb, flags[tb.prog.rank]) for tb in live))
        self._check_drained()
        return ExecStats(calls, written * self.dtype.itemsize, turns)

    def _wake(
        self, prog: TbProgram, kind: OpType, published: bool, tbs: dict, ranks: list, ready: deque
    ) -> None:
        """Queue the threadblocks a call may have unblocked; the receiver of new data goes first,
        so it copies the data while it is still in cache."""
        if kind.sends:
            conn = self.program.connections[(prog.rank, prog.send, prog.channel)]
            if conn.receiver is not None:
                _enqueue(tbs[(prog.send, conn.receiver)], ready, first=True)
        if kind.receives:
            conn = self.program.connections[(prog.recv, prog.rank, prog.channel)]
            if conn.sender is not None:
                _enqueue(tbs[(prog.recv, conn.sender)], ready)
        if published:
            for other in ranks[prog.rank]:
                _enqueue(other, ready)

    def _state(self, prog: TbProgram) -> _Tb:
        r = prog.rank
        incoming = self.fifos[(prog.recv, r, prog.channel)] if prog.recv is not None else None
        outgoing = self.fifos[(r, prog.send, prog.channel)] if prog.send is not None else None
        return _Tb(prog, self.memory[r], incoming, outgoing)

    def _advance(self, tb: _Tb, flags: dict[int, tuple[int, int]]) -> tuple[int, OpType, bool] | None:
        """Run the next primitive call if it can: (elements written, its type, whether it published
        progress), or None when the threadblock is blocked or done."""
        if tb.done:
            return None
        tx = tb.prog.transmissions[tb.tx]
        if not tb.waited:
            for dep in tx.deps:
                if flags[dep.tb] < (tb.tile, dep.op):
                    return None
            tb.waited = True
        kind = tx.type
        if kind.receives and not tb.incoming:
            return None
        if kind.sends and len(tb.outgoing) >= self.fifo_depth:
            return None
        lay = self.layout
        tc = min(lay.max_count, tx.count - tb.part)
        call = Call(
            self.ir.name,
            tb.prog.rank,
            tb.prog.id,
            tb.mem,
            tx,
            tb.part,
            tc,
            tb.tile,
            tb.tile * lay.tile_elems,
            lay.tile_len(tb.tile),
            self.ufunc,
            tb.incoming,
            tb.outgoing,
        )
        HANDLERS[kind](call)
        tb.part += tc
        published = False
        if tb.part >= tx.count:
            if tx.has_dep:
                flags[tb.prog.id] = (tb.tile, tx.step)
                published = True
            tb.part = 0
            tb.waited = False
            tb.tx += 1
            if tb.tx == len(tb.prog.transmissions):
                tb.tx = 0
                tb.tile += 1
                tb.done = tb.tile == lay.ntiles
        return call.written, kind, published

    def _blocked(self, tb: _Tb, flags: dict[int, tuple[int, int]]) -> BlockedStep:
        prog = tb.prog
        tx = prog.transmissions[tb.tx]
        where = (prog.rank, prog.id, tx.op, tb.tile)
        if not tb.waited:
            for dep in tx.deps:
                if flags[dep.tb] < (tb.tile, dep.op):
                    target = self.program.tb(prog.rank, dep.tb)
                    note = "" if target.publishes_from(dep.op) else _NEVER.format(tb=dep.tb, op=dep.op)
                    return BlockedStep(*where, f"({tx.label()}) waits for tb {dep.tb} op {dep.op}{note}")
        if tx.type.receives and not tb.incoming:
            conn = self.program.connections[(prog.recv, prog.rank, prog.channel)]
            note = "" if conn.sender is not None else " (no threadblock there sends on this connection)"
            return BlockedStep(
                *where, f"({tx.label()}) waits for data from rank {prog.recv} on channel {prog.channel}{note}"
            )
        conn = self.program.connections[(prog.rank, prog.send, prog.channel)]
        return BlockedStep(
            *where,
            f"({tx.label()}) waits for room to send to rank {prog.send} on channel {prog.channel} "
            f"({len(tb.outgoing)} of {self.fifo_depth} calls queued{_unread(conn)})",
        )

    def _check_drained(self) -> None:
        for key, fifo in self.fifos.items():
            if fifo:
                conn = self.program.connections[key]
                rank, tb, op = fifo[0].sender
                raise ExecutionError(
                    f"{self.ir.name}: {conn}: {len(fifo)} calls were sent but never received "
                    f"(the first by rank {rank} tb {tb} op {op})"
                )


_NEVER = " (nothing in tb {tb} from op {op} on has has_dep, so it never publishes that far)"


def _enqueue(tb: _Tb, ready: deque, first: bool = False) -> None:
    if tb.queued or tb.done:
        return
    tb.queued = True
    if first:
        ready.appendleft(tb)
    else:
        ready.append(tb)


def _unread(conn: Connection) -> str:
    return "" if conn.receiver is not None else "; no threadblock receives on this connection"

"""The IR-level timing simulator: an IR on a topology at a size, in the alpha-beta model.

The model is :func:`synth.cost.simulate`'s, applied to what the IR actually does. Each
threadblock runs its transmissions (``runtime.program``) in order. A primitive call that sends
``b`` bytes from rank s to rank d holds one server of every physical edge on the logical link's path
for ``b / edge bandwidth``, keeps its threadblock busy for ``b / link bandwidth`` and lands
``alpha + b / link bandwidth`` after it starts (store and forward: an ``rcs`` forwards once its data
has landed). A call starts when its threadblock is free, its dependencies are published, its data
has landed (if it receives), its FIFO has room (if it sends; ``fifo_depth`` calls as in the
executor) and the edges it needs have a free server. Local steps (``cpy``, ``re``, the local half of
``rrc``) take no time: the topology has no memory bandwidth.

By default each step moves all its chunks in one call (``tile_bytes=None``), the granularity of the
Algorithm-level simulator it must agree with. Give ``tile_bytes`` (e.g.
``runtime.protocol.tile_bytes(ir.protocol)``) to replay every step tile by tile, as the kernel does.
List scheduling picks, among calls that can run, the one that can start earliest.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from dataclasses import dataclass

from codegen.ir import IR
from codegen.rules import MAX_COUNT
from runtime import protocol
from runtime.errors import BlockedStep, DeadlockError, ExecutionError
from runtime.program import Program, TbProgram, build_program
from synth.cost import BYTES_PER_US_PER_GBPS, SimResult, algbw_GBps
from topologies.logical import LogicalTopology
from topologies.model import Topology

__all__ = ["simulate"]

_EPS = 1e-9


@dataclass
class _Tb:
    prog: TbProgram
    free: float = 0.0
    tile: int = 0
    tx: int = 0
    part: int = 0
    waited: bool = False
    dep_time: float = 0.0

    @property
    def done(self) -> bool:
        return self.tx >= len(self.prog.transmissions)


class _Sim:
    def __init__(
        self, program: Program, logical: LogicalTopology, chunk_bytes: float, tile: float | None, depth: int
    ) -> None:
        self.program, self.logical, self.depth = program, logical, depth
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
        self.servers = {edge: [0.0] * res.count for edge, res in logical.resources.items()}
        self.sent: dict[tuple, list[tuple[float, float]]] = {key: [] for key in program.connections}
        self.consumed: dict[tuple, list[float]] = {key: [] for key in program.connections}
        self.published: dict[tuple[int, int], tuple[list[tuple[int, int]], list[float]]] = {
            (tb.rank, tb.id): ([], []) for tb in program.tbs
        }
        self.finish = 0.0

    # -- what a call waits for -------------------------------------------------------------------
    def tile_bytes(self, t: int) -> float:
        return min(self.tile, self.chunk - t * self.tile)

    def published_at(self, rank: int, tb: int, key: tuple[int, int]) -> float | None:
        keys, times = self.published[(rank, tb)]
        i = bisect_left(keys, key)
        return times[i] if i < len(keys) else None

    def earliest(self, tb: _Tb) -> tuple[float, tuple | None]:
        """When ``tb``'s next call can start, or what it is blocked on."""
        prog = tb.prog
        tx = prog.transmissions[tb.tx]
        start = tb.free
        if not tb.waited:
            dep_time = 0.0
            for dep in tx.deps:
                at = self.published_at(prog.rank, dep.tb, (tb.tile, dep.op))
                if at is None:
                    return 0.0, ("flag", prog.rank, dep.tb, dep.op)
                dep_time = max(dep_time, at)
            tb.waited, tb.dep_time = True, dep_time
        start = max(start, tb.dep_time)
        if tx.type.receives:
            key = (prog.recv, prog.rank, prog.channel)
            k = len(self.consumed[key])
            if k >= len(self.sent[key]):
                return 0.0, ("msg", key)
            start = max(start, self.sent[key][k][0])
        if tx.type.sends:
            key = (prog.rank, prog.send, prog.channel)
            k = len(self.sent[key]) - self.depth
            if k >= 0:
                if k >= len(self.consumed[key]):
                    return 0.0, ("room", key)
                start = max(start, self.consumed[key][k])
            for edge in self.logical.links[(prog.rank, prog.send)].edges:
                start = max(start, min(self.servers[edge]))
        return start, None

    # -- running a call ----------------------------------------------------------------------------
    def commit(self, tb: _Tb, start: float) -> list[tuple]:
        """Run ``tb``'s next call at ``start``; returns the wait keys it may release."""
        prog = tb.prog
        tx = prog.transmissions[tb.tx]
        tc = min(self.max_count, tx.count - tb.part)
        nbytes = tc * self.tile_bytes(tb.tile)
        end = start
        woken: list[tuple] = []
        if tx.type.receives:
            key = (prog.recv, prog.rank, prog.channel)
            k = len(self.consumed[key])
            sent_bytes = self.sent[key][k][1]
            if abs(sent_bytes - nbytes) > 1e-6 * max(1.0, nbytes):
                raise ExecutionError(
                    f"{self.program.ir.name}: rank {prog.rank} tb {prog.id} op {tx.op} ({tx.label()}) "
                    f"receives {nbytes:g} B but its sender sent {sent_bytes:g} B: send and receive "
                    "counts differ on this connection"
                )
            self.consumed[key].append(start)
            woken.append(("room", key))
        if tx.type.sends:
            key = (prog.rank, prog.send, prog.channel)
            link = self.logical.links[(prog.rank, prog.send)]
            for edge in link.edges:
                free = self.servers[edge]
                i = min(range(len(free)), key=free.__getitem__)
                bw = self.logical.resources[edge].bandwidth_GBps
                free[i] = start + nbytes / (bw * BYTES_PER_US_PER_GBPS)
            end = start + nbytes / (link.bandwidth_GBps * BYTES_PER_US_PER_GBPS)
            arrive = end + link.alpha_us
            self.sent[key].append((arrive, nbytes))
            self.finish = max(self.finish, arrive)
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


def simulate(
    ir: IR,
    topology: Topology,
    size_bytes: float,
    *,
    tile_bytes: int | None = None,
    fifo_depth: int | None = None,
) -> SimResult:
    """Time ``ir`` on ``topology`` at ``size_bytes`` (nccl-tests' size; see the module docstring).

    >>> from codegen import compile_algorithm
    >>> from synth.baselines import make_baseline
    >>> from synth.collectives import make_collective
    >>> from topologies.builders import ring
    >>> ring4 = ring(4, 25.0, 0.7)
    >>> ir = compile_algorithm(make_baseline("ring", ring4, make_collective("allgather", 4)), ring4)
    >>> round(simulate(ir, ring4, 1e6).time_us, 3)  # 3 * (0.7 + 10)
    32.1
    """
    program = build_program(ir)
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
    sim = _Sim(program, logical, size_bytes / ir.nchunksperloop, tile_bytes, max(1, depth))
    tbs = {(p.rank, p.id): _Tb(p) for p in program.tbs}
    heap: list[tuple[float, int, int]] = []
    waiting: dict[tuple, list[_Tb]] = {}

    def consider(tb: _Tb) -> None:
        if tb.done:
            return
        start, why = sim.earliest(tb)
        if why is None:
            heapq.heappush(heap, (start, tb.prog.rank, tb.prog.id))
        else:
            waiting.setdefault(why[:3] if why[0] == "flag" else why, []).append(tb)

    for tb in tbs.values():
        consider(tb)
    while heap:
        key, rank, tb_id = heapq.heappop(heap)
        tb = tbs[(rank, tb_id)]
        start, _ = sim.earliest(tb)
        if start > key + _EPS:
            heapq.heappush(heap, (start, rank, tb_id))
            continue
        for wake in sim.commit(tb, start):
            for other in waiting.pop(wake, ()):
                consider(other)
        consider(tb)
    stuck = [tb for tb in tbs.values() if not tb.done]
    if stuck:
        raise DeadlockError(ir.name, tuple(_blocked(sim, tb, sim.earliest(tb)[1]) for tb in stuck))
    coll = program.collective
    algbw = algbw_GBps(size_bytes, sim.finish)
    return SimResult(size_bytes, sim.finish, algbw, algbw * (coll.busbw_factor if coll else 1.0))

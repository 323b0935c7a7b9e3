"""A symbolic executor of the IR for the codegen tests: the oracle that compiled code is correct.

Independent of the compiler: it reads only the IR and synth's collectives. Each slot holds the
sorted ids of the collective's chunks reduced into it; threadblocks run their steps in order, a
step waits for its dependencies and, if it receives, for a message on its connection (FIFO per
sender, receiver, channel); the runtime's op semantics (reference/msccl-xml.md, 3.6). Steps are
picked in a random order among the ready ones (a seed per run), so a missing dependency shows as a
wrong or uninitialized value under some interleaving. A deadlock (nothing ready, work left) fails.
"""

from __future__ import annotations

import random
from collections import defaultdict, deque

from codegen.ir import IR, Buffer, OpType, Ref
from codegen.rules import chunk_factor
from synth.collectives import make_collective

__all__ = ["ExecutionError", "execute"]


class ExecutionError(AssertionError):
    pass


def execute(ir: IR, inplace: bool | None = None, seed: int | None = 0) -> None:
    """Run ``ir`` symbolically and raise :class:`ExecutionError` unless every output is right.

    ``inplace`` picks the call (default: in place iff the IR is only valid in place)."""
    inplace = (ir.inplace and not ir.outofplace) if inplace is None else inplace
    coll = make_collective(ir.collective, ir.num_ranks, chunk_factor(ir), ir.root)
    rng = random.Random(seed)

    def canon(rank: int, ref: Ref, k: int) -> tuple[int, Buffer, int]:
        if inplace:
            small, offset = coll.inplace_alias(rank)
            small_buf = Buffer.INPUT if small == "input" else Buffer.OUTPUT
            if ref.buffer is small_buf:
                large = Buffer.OUTPUT if small_buf is Buffer.INPUT else Buffer.INPUT
                return rank, large, offset + ref.index + k
        return rank, ref.buffer, ref.index + k

    mem: dict[tuple[int, Buffer, int], tuple[int, ...]] = {}
    for r in range(ir.num_ranks):
        for j, cid in enumerate(coll.inputs[r]):
            if cid is not None:
                mem[canon(r, Ref(Buffer.INPUT, j), 0)] = (cid,)

    def read(rank: int, ref: Ref, count: int, where: str) -> list[tuple[int, ...]]:
        out = []
        for k in range(count):
            slot = canon(rank, ref, k)
            if slot not in mem:
                raise ExecutionError(
                    f"{where}: reads {ref.buffer.value}[{ref.index + k}] before anything wrote it"
                )
            out.append(mem[slot])
        return out

    def write(rank: int, ref: Ref, values: list[tuple[int, ...]]) -> None:
        for k, v in enumerate(values):
            mem[canon(rank, ref, k)] = v

    fifo: dict[tuple[int, int, int], deque] = defaultdict(deque)
    done = {(g.rank, tb.id): 0 for g in ir.gpus for tb in g.threadblocks}
    tbs = {(g.rank, tb.id): tb for g in ir.gpus for tb in g.threadblocks}

    def ready(key: tuple[int, int]) -> bool:
        rank = key[0]
        tb = tbs[key]
        op = tb.ops[done[key]]
        if any(done[(rank, d.tb)] <= d.op for d in op.deps):
            return False
        return not op.type.receives or bool(fifo[(tb.recv, rank, tb.channel)])

    while True:
        live = [k for k in sorted(tbs) if done[k] < len(tbs[k].ops)]
        if not live:
            break
        runnable = [k for k in live if ready(k)]
        if not runnable:
            stuck = ", ".join(f"r{r}.tb{t}.s{done[(r, t)]}" for r, t in live[:6])
            raise ExecutionError(f"deadlock: nothing can run ({stuck})")
        key = rng.choice(runnable) if seed is not None else runnable[0]
        rank, t = key
        tb = tbs[key]
        op = tb.ops[done[key]]
        where = f"rank {rank} tb {t} step {done[key]} ({op})"
        data = None
        if op.type.receives:
            data = fifo[(tb.recv, rank, tb.channel)].popleft()
            if len(data) != op.count:
                raise ExecutionError(f"{where}: received {len(data)} chunk(s)")
        kind = op.type
        if kind in (OpType.RECV_REDUCE_SEND, OpType.RECV_REDUCE_COPY, OpType.RECV_REDUCE_COPY_SEND):
            data = [
                tuple(sorted(a + b)) for a, b in zip(data, read(rank, op.src, op.count, where), strict=True)
            ]
        if kind is OpType.SEND:
            data = read(rank, op.src, op.count, where)
        if kind in (
            OpType.RECV,
            OpType.RECV_COPY_SEND,
            OpType.RECV_REDUCE_COPY,
            OpType.RECV_REDUCE_COPY_SEND,
        ):
            write(rank, op.dst, data)
        if kind is OpType.COPY:
            write(rank, op.dst, read(rank, op.src, op.count, where))
        if kind is OpType.REDUCE:
            mine = read(rank, op.dst, op.count, where)
            other = read(rank, op.src, op.count, where)
            write(rank, op.dst, [tuple(sorted(a + b)) for a, b in zip(mine, other, strict=True)])
        if kind.sends:
            fifo[(rank, tb.send, tb.channel)].append(data)
        done[key] += 1
    left = {k: len(q) for k, q in fifo.items() if q}
    if left:
        raise ExecutionError(f"messages never received: {left}")
    for r in range(ir.num_ranks):
        for j, addr in enumerate(coll.outputs[r]):
            if addr is None:
                continue
            want = tuple(sorted(coll.contributions[addr])) if coll.combining else (addr,)
            got = mem.get(canon(r, Ref(Buffer.OUTPUT, j), 0))
            if got != want:
                raise ExecutionError(f"rank {r} output[{j}]: expected {want}, got {got}")

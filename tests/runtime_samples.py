"""Test support: hand-written IRs in the style the MSCCL tools emit, the subjects of the runtime's
tests and of ``benchmarks/runtime_cupy.py`` (codegen compiles the same schedules from algorithms).

Each builder returns a complete :class:`IR`: one ``Gpu`` per rank, threadblocks with one send and one
receive peer on one channel, and ops whose local operands are the op's own rank's.
"""

from __future__ import annotations

from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock
from synth.collectives import make_collective

__all__ = [
    "allpairs_allgather",
    "allpairs_allreduce",
    "allpairs_alltoall",
    "ring_allgather",
    "ring_allreduce",
    "ring_broadcast",
    "ring_reduce",
    "ring_reducescatter",
]

IN, OUT, SCR = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def _op(kind: OpType, src: Ref | None = None, dst: Ref | None = None, count: int = 1, **kw) -> Op:
    return Op(kind, src, dst, count, **kw)


def _ir(
    name: str,
    collective: str,
    n: int,
    chunks: int,
    tbs: list[list[Threadblock]],
    *,
    inplace: bool = True,
    outofplace: bool = True,
    root: int | None = None,
    scratch: int = 0,
) -> IR:
    coll = make_collective(collective, n, chunks, root)
    gpus = tuple(Gpu(r, coll.input_chunks, coll.output_chunks, scratch, tuple(tbs[r])) for r in range(n))
    return IR(
        name,
        coll.name,
        n,
        coll.size_chunks,
        gpus,
        inplace=inplace,
        outofplace=outofplace,
        root=coll.root,
    )


def ring_allgather(n: int, chunks: int = 1, channels: int = 1, aggregate: bool = False) -> IR:
    """Ring allgather as MSCCL's ``allgather_ring``: rank r copies its chunk j into its output and
    sends it round the ring on channel ``j % channels`` (``rcs`` at each rank, ``r`` at the last);
    ``aggregate`` moves all of a rank's chunks in one ``cnt=chunks`` op. Correct in place and out of
    place."""
    c = chunks
    tbs: list[list[Threadblock]] = []
    for r in range(n):
        ops: dict[int, list[Op]] = {ch: [] for ch in range(channels)}
        groups = [(0, c)] if aggregate else [(j, 1) for j in range(c)]
        for j, cnt in groups:
            ch = j % channels
            ops[ch].append(_op(OpType.COPY, Ref(IN, j), Ref(OUT, r * c + j), count=cnt))
            ops[ch].append(_op(OpType.SEND, Ref(OUT, r * c + j), count=cnt))
            for k in range(1, n):
                kind = OpType.RECV_COPY_SEND if k < n - 1 else OpType.RECV
                ops[ch].append(_op(kind, dst=Ref(OUT, ((r - k) % n) * c + j), count=cnt))
        tbs.append([Threadblock(ch, (r + 1) % n, (r - 1) % n, ch, tuple(ops[ch])) for ch in range(channels)])
    return _ir(f"ring-allgather-n{n}-c{c}-ch{channels}", "allgather", n, c, tbs)


def ring_allreduce(n: int, channels: int = 1) -> IR:
    """MSCCL's ring allreduce (chunk factor n): chunk c is reduced along the ring from rank c+1
    (``s``, ``rrs``, ``rrcs`` at rank c) and then passed on (``rcs``, ``r``); one threadblock per
    channel, chunk c on channel ``c % channels``."""
    tbs = []
    for r in range(n):
        ops: dict[int, list[Op]] = {ch: [] for ch in range(channels)}
        for k in range(2 * n - 1):
            c = (r - 1 - k) % n
            if k == 0:
                op = _op(OpType.SEND, Ref(IN, c))
            elif k < n - 1:
                op = _op(OpType.RECV_REDUCE_SEND, Ref(IN, c))
            elif k == n - 1:
                op = _op(OpType.RECV_REDUCE_COPY_SEND, Ref(IN, c), Ref(OUT, c))
            elif k < 2 * n - 2:
                op = _op(OpType.RECV_COPY_SEND, dst=Ref(OUT, c))
            else:
                op = _op(OpType.RECV, dst=Ref(OUT, c))
            ops[c % channels].append(op)
        tbs.append([Threadblock(ch, (r + 1) % n, (r - 1) % n, ch, tuple(ops[ch])) for ch in range(channels)])
    return _ir(f"ring-allreduce-n{n}-ch{channels}", "allreduce", n, n, tbs)


def ring_reducescatter(n: int, chunks: int = 1) -> IR:
    """Ring reduce-scatter: address (d, j) starts at rank d+1 and ends reduced in rank d's output."""
    c = chunks
    tbs = []
    for r in range(n):
        ops = []
        for j in range(c):
            for k in range(n):
                d = (r - 1 - k) % n
                src = Ref(IN, d * c + j)
                if k == 0:
                    ops.append(_op(OpType.SEND, src))
                elif k < n - 1:
                    ops.append(_op(OpType.RECV_REDUCE_SEND, src))
                else:
                    ops.append(_op(OpType.RECV_REDUCE_COPY, src, Ref(OUT, j)))
        tbs.append([Threadblock(0, (r + 1) % n, (r - 1) % n, 0, tuple(ops))])
    return _ir(f"ring-reducescatter-n{n}-c{c}", "reducescatter", n, c, tbs)


def ring_broadcast(n: int, root: int = 0, chunks: int = 1) -> IR:
    """Ring broadcast from ``root``: each chunk is pipelined round the ring."""
    tbs = []
    for r in range(n):
        hop = (r - root) % n
        ops = []
        for j in range(chunks):
            if hop == 0:
                ops += [_op(OpType.SEND, Ref(IN, j)), _op(OpType.COPY, Ref(IN, j), Ref(OUT, j))]
            else:
                kind = OpType.RECV_COPY_SEND if hop < n - 1 else OpType.RECV
                ops.append(_op(kind, dst=Ref(OUT, j)))
        send = (r + 1) % n if hop < n - 1 else None
        recv = (r - 1) % n if hop > 0 else None
        tbs.append([Threadblock(0, send, recv, 0, tuple(ops))])
    return _ir(f"ring-broadcast-n{n}-root{root}", "broadcast", n, chunks, tbs, root=root)


def ring_reduce(n: int, root: int = 0, chunks: int = 1) -> IR:
    """Ring reduce to ``root``: partial sums travel from rank root+1 (``s``, ``rrs``) to the root
    (``rrc`` into its output)."""
    tbs = []
    for r in range(n):
        hop = (r - root - 1) % n
        ops = []
        for j in range(chunks):
            if hop == 0:
                ops.append(_op(OpType.SEND, Ref(IN, j)))
            elif hop < n - 1:
                ops.append(_op(OpType.RECV_REDUCE_SEND, Ref(IN, j)))
            else:
                ops.append(_op(OpType.RECV_REDUCE_COPY, Ref(IN, j), Ref(OUT, j)))
        send = (r + 1) % n if hop < n - 1 else None
        recv = (r - 1) % n if hop > 0 else None
        tbs.append([Threadblock(0, send, recv, 0, tuple(ops))])
    return _ir(f"ring-reduce-n{n}-root{root}", "reduce", n, chunks, tbs, root=root)


def allpairs_allgather(n: int, chunks: int = 1) -> IR:
    """All-pairs allgather: one threadblock per peer (send own chunks, receive the peer's), and one
    without peers for the local copy."""
    c = chunks
    tbs = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        rank_tbs = [
            Threadblock(
                t,
                p,
                p,
                0,
                (_op(OpType.SEND, Ref(IN, 0), count=c), _op(OpType.RECV, dst=Ref(OUT, p * c), count=c)),
            )
            for t, p in enumerate(peers)
        ]
        copy = _op(OpType.COPY, Ref(IN, 0), Ref(OUT, r * c), count=c)
        rank_tbs.append(Threadblock(len(peers), None, None, 0, (copy,)))
        tbs.append(rank_tbs)
    return _ir(f"allpairs-allgather-n{n}-c{c}", "allgather", n, c, tbs)


def allpairs_allreduce(n: int, chunks: int = 1, nops: bool = True) -> IR:
    """All-pairs allreduce through scratch (MSCCL's allreduce_1step): every rank sends its whole
    input to each peer's scratch, then one threadblock copies its input to the output and chains
    ``re`` steps over the scratch copies. Its dependencies on the receiving threadblocks are ``nop``
    steps as the XML writer folds them (``nops=False``: all on the copy, as the IR allows)."""
    c = chunks
    tbs = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        rank_tbs = [
            Threadblock(
                t,
                p,
                p,
                0,
                (
                    _op(OpType.SEND, Ref(IN, 0), count=c),
                    _op(OpType.RECV, dst=Ref(SCR, t * c), count=c, has_dep=True),
                ),
            )
            for t, p in enumerate(peers)
        ]
        waits = [Dep(t, 1) for t in range(len(peers))]
        if nops:
            ops = [Op(OpType.NOP, deps=(d,)) for d in waits[:-1]]
            ops.append(_op(OpType.COPY, Ref(IN, 0), Ref(OUT, 0), count=c, deps=(waits[-1],)))
        else:
            ops = [_op(OpType.COPY, Ref(IN, 0), Ref(OUT, 0), count=c, deps=tuple(waits))]
        ops += [_op(OpType.REDUCE, Ref(SCR, t * c), Ref(OUT, 0), count=c) for t in range(len(peers))]
        rank_tbs.append(Threadblock(len(peers), None, None, 0, tuple(ops)))
        tbs.append(rank_tbs)
    name = f"allpairs-allreduce-n{n}-c{c}" + ("" if nops else "-multideps")
    return _ir(name, "allreduce", n, c, tbs, scratch=(n - 1) * c)


def allpairs_alltoall(n: int, chunks: int = 1) -> IR:
    """All-pairs alltoall: rank r sends its block for p straight to p; out of place only."""
    c = chunks
    tbs = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        rank_tbs = [
            Threadblock(
                t,
                p,
                p,
                0,
                (
                    _op(OpType.SEND, Ref(IN, p * c), count=c),
                    _op(OpType.RECV, dst=Ref(OUT, p * c), count=c),
                ),
            )
            for t, p in enumerate(peers)
        ]
        copy = _op(OpType.COPY, Ref(IN, r * c), Ref(OUT, r * c), count=c)
        rank_tbs.append(Threadblock(len(peers), None, None, 0, (copy,)))
        tbs.append(rank_tbs)
    return _ir(f"allpairs-alltoall-n{n}-c{c}", "alltoall", n, c, tbs, inplace=False)

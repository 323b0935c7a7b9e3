"""Expand chunk operations into instructions (chunk DAG -> instruction DAG).

A remote copy becomes a send ``s`` matched with a receive ``r``; a remote reduce a send matched
with a receive-reduce-copy ``rrc`` (its local operand in ``src``, the result in ``dst``); local ops
become ``cpy`` and ``re`` (a reduce into another slot: ``cpy`` then ``re``). Each chunk dependency
becomes an edge between the instructions that touch the slot on either side.
"""

from __future__ import annotations

from codegen.chunk_dag import ChunkDAG, ChunkOp, DepKind, Side
from codegen.instr_dag import Instr, InstrDAG, InstrEdge
from codegen.ir import OpType, evolve

__all__ = ["expand_instructions"]


Sides = dict[Side, int]
"""Per side of a chunk op, the instruction a dependency on that side attaches to."""


def expand_instructions(dag: ChunkDAG) -> InstrDAG:
    """Expand each chunk op into ``s``/``r``/``rrc``/``cpy``/``re`` instructions."""
    instrs: list[Instr] = []
    edges: list[InstrEdge] = []
    # per op and side: (the instruction edges into the side go to, the one edges out of it leave)
    entry: list[Sides] = []
    exit_: list[Sides] = []
    for op in dag.ops:
        expand = _remote if op.remote else _copy if op.kind == "copy" else _reduce
        into, out_of = expand(op, instrs, edges)
        entry.append(into)
        exit_.append(out_of)
    for d in dag.deps:
        edges.append(InstrEdge(exit_[d.pred][d.pred_side], entry[d.succ][d.succ_side], d.kind))
    return InstrDAG.build(dag.info, instrs, edges, list(range(len(instrs))))


def _add(instrs: list[Instr], ins: Instr) -> int:
    instrs.append(ins)
    return len(instrs) - 1


def _common(op: ChunkOp) -> dict:
    return {"count": op.count, "instance": op.instance, "channel_hint": op.channel}


def _local(op: ChunkOp) -> dict:
    """What a local instruction carries: the op's count and hints, and the time it ends."""
    return {**_common(op), "time": None if op.time is None else op.time[1]}


_SEND = Instr(0, OpType.SEND)
"""What every instruction of a remote op is made from: a copy with its fields (half a million at
512 ranks, where the frozen ``__init__`` of each was a tenth of this pass)."""


def _remote(op: ChunkOp, instrs: list[Instr], edges: list[InstrEdge]) -> tuple[Sides, Sides]:
    """A send on the source rank matched with a receive (``r``, or ``rrc`` for a reduce)."""
    send, recv = len(instrs), len(instrs) + 1
    time = op.time
    instrs.append(
        evolve(
            _SEND,
            rank=op.src.rank,
            src=op.src.ref,
            send_to=op.dst.rank,
            send_match=recv,
            tb_hint=op.sendtb,
            time=None if time is None else time[0],
            count=op.count,
            instance=op.instance,
            channel_hint=op.channel,
        )
    )
    reduces = op.kind == "reduce"
    instrs.append(
        evolve(
            _SEND,
            rank=op.dst.rank,
            type=OpType.RECV_REDUCE_COPY if reduces else OpType.RECV,
            src=op.local_operand.ref if reduces else None,
            dst=op.dst.ref,
            recv_from=op.src.rank,
            recv_match=send,
            tb_hint=op.recvtb,
            time=None if time is None else time[1],
            count=op.count,
            instance=op.instance,
            channel_hint=op.channel,
        )
    )
    edges.append(InstrEdge(send, recv, DepKind.MATCH))
    sides = {Side.SRC: send, Side.DST: recv}
    return sides, dict(sides)


def _copy(op: ChunkOp, instrs: list[Instr], edges: list[InstrEdge]) -> tuple[Sides, Sides]:
    cpy = _add(instrs, Instr(op.dst.rank, OpType.COPY, src=op.src.ref, dst=op.dst.ref, tb_hint=op.sendtb, **_local(op)))
    return {Side.SRC: cpy, Side.DST: cpy}, {Side.SRC: cpy, Side.DST: cpy}


def _reduce(op: ChunkOp, instrs: list[Instr], edges: list[InstrEdge]) -> tuple[Sides, Sides]:
    """``re`` into the destination; into another slot than the operand, a ``cpy`` of the operand
    there first."""
    first = None
    if op.operand is not None and op.operand != op.dst:
        first = _add(
            instrs,
            Instr(op.dst.rank, OpType.COPY, src=op.operand.ref, dst=op.dst.ref, tb_hint=op.sendtb, **_local(op)),
        )
    red = _add(instrs, Instr(op.dst.rank, OpType.REDUCE, src=op.src.ref, dst=op.dst.ref, tb_hint=op.sendtb, **_local(op)))
    if first is not None:
        edges.append(InstrEdge(first, red, DepKind.RAW))
    return {Side.SRC: red, Side.DST: red if first is None else first}, {Side.SRC: red, Side.DST: red}

"""Expand chunk operations into instructions (chunk DAG -> instruction DAG).

A remote copy becomes a send ``s`` matched with a receive ``r``; a remote reduce a send matched
with a receive-reduce-copy ``rrc`` (its local operand in ``src``, the result in ``dst``); local ops
become ``cpy`` and ``re`` (a reduce into another slot: ``cpy`` then ``re``). Each chunk dependency
becomes an edge between the instructions that touch the slot on either side.

At 512 ranks this is half a million ops, a million instructions: each instruction and edge is
made from a dict of its fields (:func:`codegen.ir.made`, :func:`codegen.instr_dag.new_edge`) rather than through the frozen
dataclasses' ``__init__``, equal locations share one :class:`~codegen.ir.Ref`, and each op
records by index, not in a dict per op, which instruction each of its sides attaches to.
"""

from __future__ import annotations

from codegen.chunk_dag import ChunkDAG, ChunkOp, DepKind, Loc, Side
from codegen.instr_dag import Instr, InstrDAG, InstrEdge, new_edge
from codegen.ir import Buffer, OpType, Ref, made

__all__ = ["expand_instructions"]


class _Expansion:
    """The instructions and edges made so far, and per op the instruction each side attaches to:
    ``src_side`` (edges into and out of the source side), ``dst_in`` and ``dst_out`` (into and
    out of the destination side: a local reduce into another slot is entered at its ``cpy``)."""

    def __init__(self) -> None:
        self.instrs: list[Instr] = []
        self.edges: list[InstrEdge] = []
        self.src_side: list[int] = []
        self.dst_in: list[int] = []
        self.dst_out: list[int] = []
        self.refs: dict[tuple[Buffer, int], Ref] = {}

    def ref(self, loc: Loc) -> Ref:
        """``loc.ref``, one object per location (a Ref is frozen: sharing it changes nothing)."""
        key = (loc.buffer, loc.index)
        ref = self.refs.get(key)
        if ref is None:
            ref = self.refs[key] = Ref(loc.buffer, loc.index)
        return ref

    def sides(self, src: int, dst_in: int, dst_out: int) -> None:
        self.src_side.append(src)
        self.dst_in.append(dst_in)
        self.dst_out.append(dst_out)


def expand_instructions(dag: ChunkDAG) -> InstrDAG:
    """Expand each chunk op into ``s``/``r``/``rrc``/``cpy``/``re`` instructions."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass

    x = _Expansion()
    for op in dag.ops:
        if op.src.rank != op.dst.rank:
            _remote(op, x)
        elif op.kind == "copy":
            _copy(op, x)
        else:
            _reduce(op, x)
    src_side, dst_in, dst_out, edges = x.src_side, x.dst_in, x.dst_out, x.edges
    for d in dag.deps:
        pred = src_side[d.pred] if d.pred_side is Side.SRC else dst_out[d.pred]
        succ = src_side[d.succ] if d.succ_side is Side.SRC else dst_in[d.succ]
        edges.append(new_edge(pred, succ, d.kind))
    return InstrDAG.build(dag.info, x.instrs, edges, np.arange(len(x.instrs)))


def _instr(fields: dict) -> Instr:
    """An :class:`Instr` with ``fields``, every one of its fields (:func:`codegen.ir.made`)."""
    return made(Instr, fields)


def _remote(op: ChunkOp, x: _Expansion) -> None:
    """A send on the source rank matched with a receive (``r``, or ``rrc`` for a reduce)."""
    instrs, time = x.instrs, op.time
    send = len(instrs)
    src, dst, count, instance, channel = op.src, op.dst, op.count, op.instance, op.channel
    instrs.append(
        _instr(
            {
                "rank": src.rank,
                "type": OpType.SEND,
                "src": x.ref(src),
                "dst": None,
                "count": count,
                "send_to": dst.rank,
                "recv_from": None,
                "send_match": send + 1,
                "recv_match": None,
                "tb_hint": op.sendtb,
                "channel_hint": channel,
                "instance": instance,
                "time": None if time is None else time[0],
            }
        )
    )
    reduces = op.kind == "reduce"
    instrs.append(
        _instr(
            {
                "rank": dst.rank,
                "type": OpType.RECV_REDUCE_COPY if reduces else OpType.RECV,
                "src": x.ref(op.local_operand) if reduces else None,
                "dst": x.ref(dst),
                "count": count,
                "send_to": None,
                "recv_from": src.rank,
                "send_match": None,
                "recv_match": send,
                "tb_hint": op.recvtb,
                "channel_hint": channel,
                "instance": instance,
                "time": None if time is None else time[1],
            }
        )
    )
    x.edges.append(new_edge(send, send + 1, DepKind.MATCH))
    x.sides(send, send + 1, send + 1)


def _local(op: ChunkOp, x: _Expansion, type_: OpType, src: Loc) -> int:
    """A local instruction of ``op`` (``src`` into its destination): its count and hints, and the
    time the op ends."""
    x.instrs.append(
        Instr(
            op.dst.rank,
            type_,
            src=x.ref(src),
            dst=x.ref(op.dst),
            tb_hint=op.sendtb,
            count=op.count,
            instance=op.instance,
            channel_hint=op.channel,
            time=None if op.time is None else op.time[1],
        )
    )
    return len(x.instrs) - 1


def _copy(op: ChunkOp, x: _Expansion) -> None:
    cpy = _local(op, x, OpType.COPY, op.src)
    x.sides(cpy, cpy, cpy)


def _reduce(op: ChunkOp, x: _Expansion) -> None:
    """``re`` into the destination; into another slot than the operand, a ``cpy`` of the operand
    there first."""
    first = None
    if op.operand is not None and op.operand != op.dst:
        first = _local(op, x, OpType.COPY, op.operand)
    red = _local(op, x, OpType.REDUCE, op.src)
    if first is not None:
        x.edges.append(new_edge(first, red, DepKind.RAW))
    x.sides(red, red if first is None else first, red)

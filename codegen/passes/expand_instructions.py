"""Expand chunk operations into instructions (chunk DAG -> instruction DAG).

A remote copy becomes a send ``s`` matched with a receive ``r``; a remote reduce a send matched
with a receive-reduce-copy ``rrc`` (its local operand in ``src``, the result in ``dst``); local ops
become ``cpy`` and ``re`` (a reduce into another slot: ``cpy`` then ``re``). Each chunk dependency
becomes an edge between the instructions that touch the slot on either side.
"""

from __future__ import annotations

from codegen.chunk_dag import ChunkDAG, DepKind, Side
from codegen.instr_dag import Instr, InstrDAG, InstrEdge
from codegen.ir import OpType

__all__ = ["expand_instructions"]


def expand_instructions(dag: ChunkDAG) -> InstrDAG:
    """Expand each chunk op into ``s``/``r``/``rrc``/``cpy``/``re`` instructions."""
    instrs: list[Instr] = []
    edges: list[InstrEdge] = []
    # per op and side: (the instruction edges into the side go to, the one edges out of it leave)
    entry: list[dict[Side, int]] = []
    exit_: list[dict[Side, int]] = []

    def add(ins: Instr) -> int:
        instrs.append(ins)
        return len(instrs) - 1

    for op in dag.ops:
        common = {"count": op.count, "instance": op.instance, "channel_hint": op.channel}
        local = {**common, "time": None if op.time is None else op.time[1]}
        if op.remote:
            send, recv = len(instrs), len(instrs) + 1
            add(
                Instr(
                    op.src.rank,
                    OpType.SEND,
                    src=op.src.ref,
                    send_to=op.dst.rank,
                    send_match=recv,
                    tb_hint=op.sendtb,
                    time=None if op.time is None else op.time[0],
                    **common,
                )
            )
            reduces = op.kind == "reduce"
            add(
                Instr(
                    op.dst.rank,
                    OpType.RECV_REDUCE_COPY if reduces else OpType.RECV,
                    src=op.local_operand.ref if reduces else None,
                    dst=op.dst.ref,
                    recv_from=op.src.rank,
                    recv_match=send,
                    tb_hint=op.recvtb,
                    time=None if op.time is None else op.time[1],
                    **common,
                )
            )
            edges.append(InstrEdge(send, recv, DepKind.MATCH))
            entry.append({Side.SRC: send, Side.DST: recv})
            exit_.append({Side.SRC: send, Side.DST: recv})
        elif op.kind == "copy":
            cpy = add(
                Instr(op.dst.rank, OpType.COPY, src=op.src.ref, dst=op.dst.ref, tb_hint=op.sendtb, **local)
            )
            entry.append({Side.SRC: cpy, Side.DST: cpy})
            exit_.append({Side.SRC: cpy, Side.DST: cpy})
        else:
            first = None
            if op.operand is not None and op.operand != op.dst:
                first = add(
                    Instr(
                        op.dst.rank,
                        OpType.COPY,
                        src=op.operand.ref,
                        dst=op.dst.ref,
                        tb_hint=op.sendtb,
                        **local,
                    )
                )
            red = add(
                Instr(op.dst.rank, OpType.REDUCE, src=op.src.ref, dst=op.dst.ref, tb_hint=op.sendtb, **local)
            )
            if first is not None:
                edges.append(InstrEdge(first, red, DepKind.RAW))
            entry.append({Side.SRC: red, Side.DST: red if first is None else first})
            exit_.append({Side.SRC: red, Side.DST: red})
    for d in dag.deps:
        edges.append(InstrEdge(exit_[d.pred][d.pred_side], entry[d.succ][d.succ_side], d.kind))
    return InstrDAG.build(dag.info, instrs, edges, list(range(len(instrs))))

"""Fuse a receive with the send that forwards what it received (instruction DAG -> itself).

``r`` then ``s`` of the same chunks becomes ``rcs`` (receive, copy, send); ``rrc`` then ``s``
becomes ``rrcs``, or ``rrs`` (no local write) when nothing else reads the result and the slots are
scratch or written again later. The send must read exactly what the receive wrote, on the same
rank, with the same hints (threadblock and channel), and depend on nothing else. The fused op
runs where the receive ran, takes over the send's receiver, and the send disappears. Fusions whose
peer pairs could not share threadblocks on one channel are left out (see ``_compatible``).
"""

from __future__ import annotations

from collections import defaultdict

from codegen.chunk_dag import DepKind
from codegen.instr_dag import Instr, InstrDAG, InstrEdge
from codegen.ir import Buffer, OpType, evolve

__all__ = ["fuse_recv_send"]


def _slots(dag: InstrDAG, ins: Instr, ref) -> set:
    return {dag.info.canonical(ins.rank, ref.buffer, ref.index + k) for k in range(ins.count)}


def _result_is_dead(dag: InstrDAG, w: int, s: int) -> bool:
    """Whether only ``s`` reads what ``w`` writes, and each slot is scratch or overwritten later."""
    ins = dag.instrs[w]
    if any(e.kind is DepKind.RAW and e.succ != s for e in dag.succs[w]):
        return False
    later = [e.succ for e in dag.succs[w] if e.kind is DepKind.WAW]
    later += [e.succ for e in dag.succs[s] if e.kind is DepKind.WAR]
    covered: set = set()
    for x in later:
        other = dag.instrs[x]
        if other.dst is not None and other.type.writes_dst:
            covered |= _slots(dag, other, other.dst)
    needed = {slot for slot in _slots(dag, ins, ins.dst) if slot[1] is not Buffer.SCRATCH}
    return needed <= covered


def _partner(dag: InstrDAG, w: int, taken: set[int]) -> int | None:
    ins = dag.instrs[w]
    for e in sorted(dag.succs[w], key=lambda e: dag.position[e.succ]):
        s = e.succ
        cand = dag.instrs[s]
        if (
            e.kind is DepKind.RAW
            and s not in taken
            and cand.type is OpType.SEND
            and cand.rank == ins.rank
            and cand.src == ins.dst
            and cand.count == ins.count
            and cand.tb_hint == ins.tb_hint
            and cand.channel_hint == ins.channel_hint
            and all(p.pred == w for p in dag.preds[s])
        ):
            return s
    return None


def _compatible(dag: InstrDAG, fused: dict[int, int]) -> dict[int, int]:
    """Keep fusions whose (send peer, receive peer) pairs fit in threadblocks together.

    A fused op needs a threadblock with both peers, and a rank has one threadblock per (channel,
    peer) and direction: pairs (b, a) and (b, a') with a != a' cannot share a channel. Per rank,
    instance and channel hint, the most frequent pairs win; the rest stay unfused (a receive and
    a send in two threadblocks) rather than costing a channel each.
    """
    count: dict[tuple, int] = defaultdict(int)
    first: dict[tuple, int] = {}
    for w, s in fused.items():
        ins = dag.instrs[w]
        if ins.tb_hint is None:
            key = (ins.rank, ins.instance, ins.channel_hint, dag.instrs[s].send_to, ins.recv_from)
            count[key] += 1
            first.setdefault(key, dag.position[w])
    allowed = set()
    used: set[tuple] = set()
    for key in sorted(count, key=lambda k: (-count[k], first[k])):
        rank, inst, ch, send, recv = key
        if (rank, inst, ch, "send", send) not in used and (rank, inst, ch, "recv", recv) not in used:
            allowed.add(key)
            used |= {(rank, inst, ch, "send", send), (rank, inst, ch, "recv", recv)}
    return {
        w: s
        for w, s in fused.items()
        if dag.instrs[w].tb_hint is not None
        or (
            dag.instrs[w].rank,
            dag.instrs[w].instance,
            dag.instrs[w].channel_hint,
            dag.instrs[s].send_to,
            dag.instrs[w].recv_from,
        )
        in allowed
    }


def fuse_recv_send(dag: InstrDAG) -> InstrDAG:
    """Fuse ``r``+``s`` into ``rcs`` and ``rrc``+``s`` into ``rrcs`` or ``rrs``; not in a timed
    program (``InstrDAG.times``), where a fused op would tie a send peer to a receive peer in one
    threadblock and every other send to that peer would wait behind its receives (on NDv2 x2 the
    MILP allgather at 1 GiB took 1.09x its model fused, 1.02x not).
    """
    if dag.times is not None:
        return dag
    fused: dict[int, int] = {}  # receive -> send
    taken: set[int] = set()
    for w in dag.order:
        if dag.instrs[w].type in (OpType.RECV, OpType.RECV_REDUCE_COPY) and w not in taken:
            s = _partner(dag, w, taken)
            if s is not None:
                fused[w] = s
                taken |= {w, s}
    fused = _compatible(dag, fused)
    if not fused:
        return dag
    gone = {s: w for w, s in fused.items()}
    new_index: dict[int, int] = {}
    kept = [i for i in range(len(dag.instrs)) if i not in gone]
    for k, i in enumerate(kept):
        new_index[i] = k
    for s, w in gone.items():
        new_index[s] = new_index[w]

    def remap(x: int | None) -> int | None:
        return None if x is None else new_index[x]

    instrs = []
    for i in kept:
        ins = dag.instrs[i]
        if i in fused:
            send = dag.instrs[fused[i]]
            if ins.type is OpType.RECV:
                kind, src, dst = OpType.RECV_COPY_SEND, None, ins.dst
            elif _result_is_dead(dag, i, fused[i]):
                kind, src, dst = OpType.RECV_REDUCE_SEND, ins.src, None
            else:
                kind, src, dst = OpType.RECV_REDUCE_COPY_SEND, ins.src, ins.dst
            ins = evolve(ins, type=kind, src=src, dst=dst, send_to=send.send_to, send_match=send.send_match)
        instrs.append(evolve(ins, send_match=remap(ins.send_match), recv_match=remap(ins.recv_match)))
    edges = [InstrEdge(new_index[e.pred], new_index[e.succ], e.kind) for e in dag.edges]
    hint = [dag.position[i] for i in kept]
    return InstrDAG.build(dag.info, instrs, edges, hint)

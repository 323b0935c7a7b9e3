"""What the IR built from a placement will be, known from the placed threadblocks without building it
(3-4 s at 512 ranks): the steps of its threadblocks (:func:`step_bounds`), and whether it deadlocks.

The compiler asks :func:`codegen.check.find_deadlock` of a layout's IR only to choose its order:
a deadlock-free IR keeps the reference compiler's order. Where the layout's steps per threadblock
are known already to pass the runtime's (:func:`step_bounds`), that IR would be
built (3-4 s at 512 ranks: the hierarchical alltoall's default layout) for this question alone.

Why the answer is the same. ``find_deadlock`` searches the graph of the IR's primitive calls
(:class:`codegen.call_graph.CallGraph`: a call per chunk of a step that sends or receives, else one;
each call waits for the one before it in its threadblock, a step's first call for the last call of
each step it depends on, a receive for its send, and a send for the receive ``depth`` calls back on
its connection). The IR ``insert_dependencies`` builds from a placement has a step per instruction
in the threadblock's order, and a dependency on the last needed step of each other threadblock
holding a predecessor the instruction waits on (all but a receive's send), less those implied:
every dependency it drops, and every earlier step of a threadblock it keeps one on, is reached
through the ones it keeps. ``fold_deps_into_nops`` moves all but one of a step's dependencies onto
nops just before it, in its threadblock: a nop is reached only through its dependency or the step
before it, and reaches only the step after it. So the graph below, with a wait on each such
predecessor itself and no nops, reaches from every call the calls the IR's reaches: it has a cycle
exactly where the IR's has one.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from codegen.chunk_dag import DepKind
from codegen.protocols import PROTOCOLS, fifo_calls
from common.memo import SameObjects

if TYPE_CHECKING:
    from codegen.instr_dag import InstrDAG
    from codegen.schedule import ScheduledDAG

__all__ = ["placed_deadlock_free", "step_bounds", "waiting_edges"]


def placed_deadlock_free(sched: ScheduledDAG) -> bool:
    """Whether the IR built from ``sched`` by the default passes after the placement has no
    deadlock with the runtime's FIFOs (``find_deadlock`` of it is None)."""
    import numpy as np  # not loaded by building the CLI's parser

    from codegen.call_graph import find_cycle

    dag = sched.dag
    flags, calls = _SAME_DAG.get([dag], "calls", lambda: _calls(dag))
    plans = [plan for tbs in sched.threadblocks for plan in tbs]
    sizes = np.fromiter((len(plan.instrs) for plan in plans), np.int64, len(plans))
    run = np.fromiter(
        itertools.chain.from_iterable(plan.instrs for plan in plans), np.int64, int(sizes.sum())
    )
    at = np.empty(len(dag.instrs), np.int64)  # each instruction's place in ``run``
    at[run] = np.arange(run.size)
    tb_of = np.repeat(np.arange(len(plans), dtype=np.int64), sizes)[at]
    first = np.zeros(run.size + 1, np.int64)  # where each placed step's calls start
    np.cumsum(calls[run], out=first[1:])
    n = int(first[-1])
    tb_first = np.zeros(len(plans) + 1, np.int64)
    np.cumsum(sizes, out=tb_first[1:])
    starts = np.zeros(n + 1, bool)  # a threadblock's first call waits for none of its own
    starts[first[tb_first]] = True
    chain = np.flatnonzero(~starts[:n])
    pred, succ = waiting_edges(dag)
    crossing = tb_of[pred] != tb_of[succ]
    src = [chain - 1, first[at[pred[crossing]] + 1] - 1]
    dst = [chain, first[at[succ[crossing]]]]
    depth = fifo_calls(dag.info.protocol) if dag.info.protocol in PROTOCOLS else None
    _moves(sched, np.repeat(flags[run], calls[run]), first[tb_first], depth, src, dst)
    src_all, dst_all = np.concatenate(src), np.concatenate(dst)
    return find_cycle(n, src_all, dst_all, np.zeros(src_all.size, np.int64)) is None


def _moves(sched: ScheduledDAG, call_flags, tb_calls, depth: int | None, src: list, dst: list) -> None:
    """Add the waits across each connection of the placement, as ``CallGraph.edges`` finds them
    (:func:`codegen.call_graph.connection_waits`; ``tb_calls``: where each threadblock's calls
    start, and the end)."""
    import numpy as np

    from codegen.call_graph import connection_waits

    ends: dict[tuple[int, int, int], list[int]] = {}  # (sender, receiver, channel) -> [send tb, recv tb]
    t = 0
    for rank, tbs in enumerate(sched.threadblocks):
        for plan in tbs:
            if plan.send is not None:
                ends.setdefault((rank, plan.send, plan.channel), [-1, -1])[0] = t
            if plan.recv is not None:
                ends.setdefault((plan.recv, rank, plan.channel), [-1, -1])[1] = t
            t += 1
    pairs = np.asarray([e for e in ends.values() if e[0] >= 0 and e[1] >= 0], np.int64).reshape(-1, 2)
    sends, recvs = np.flatnonzero(call_flags & 1), np.flatnonzero(call_flags & 2)
    send_at, recv_at = np.searchsorted(sends, tb_calls), np.searchsorted(recvs, tb_calls)
    send_lo, send_hi = send_at[pairs[:, 0]], send_at[pairs[:, 0] + 1]
    recv_lo, recv_hi = recv_at[pairs[:, 1]], recv_at[pairs[:, 1] + 1]
    for waits in connection_waits(sends, recvs, send_lo, send_hi, recv_lo, recv_hi, depth):
        if waits is not None:
            src.append(waits[0])
            dst.append(waits[1])


_SAME_DAG = SameObjects()
"""Per DAG what every placement of it reads: each instruction's calls, and the waits."""


def _calls(dag: InstrDAG):
    """Per instruction, as NumPy arrays: its flags (1 sends, 2 receives) and its calls (a call per
    chunk where it sends or receives, else one)."""
    import numpy as np

    from codegen.columns import TYPE_CODE, instr_columns

    c = instr_columns(dag)
    flag = np.zeros(len(TYPE_CODE), np.int64)  # by type code
    for t, code in TYPE_CODE.items():
        flag[code] = t.sends + 2 * t.receives
    flags = flag[c.type]
    return flags, np.where(flags > 0, np.maximum(c.count, 1), 1)


def step_bounds(sched: ScheduledDAG) -> tuple[tuple[int, int], ...]:
    """Per rank, the most steps one of its threadblocks takes in the IR that ``insert_dependencies``
    and ``fold_deps_into_nops`` build from ``sched``: (at least, at most); where the two agree, the
    count itself. Known from the placement alone, so the compiler widens a layout whose threadblocks
    take more steps than the runtime's without building its IR (at 512 ranks the trees allgather's
    layout 2 at one channel, 129 steps, and the hierarchical alltoall's default layout at one and
    two, 65: a build each, 3-5 s).

    Why it holds. ``insert_dependencies`` makes each instruction one op of its threadblock and gives
    it at most one dependency per other threadblock holding one of its waiting predecessors (every
    predecessor but a receive's send): the last step it needs of each, less those already implied.
    ``fold_deps_into_nops`` puts all but one of an op's ``k`` dependencies into ``k - 1`` nops in
    front of it, and the passes after it add no step. So a threadblock takes at least a step per
    instruction, and at most, per instruction, the number of other threadblocks its waiting
    predecessors sit in, or one where that is less."""
    import numpy as np  # not loaded by building the CLI's parser

    from topologies.numeric import distinct

    dag = sched.dag
    plans = [plan for tbs in sched.threadblocks for plan in tbs]
    least = np.fromiter(map(len, (plan.instrs for plan in plans)), np.int64, len(plans))
    run = np.fromiter(itertools.chain.from_iterable(p.instrs for p in plans), np.int64, int(least.sum()))
    owner = np.repeat(np.arange(len(plans), dtype=np.int64), least)
    tb_of = np.full(len(dag.instrs), -1, np.int64)  # each instruction's threadblock, over all ranks
    tb_of[run] = owner
    pred, succ = waiting_edges(dag)
    crossing = tb_of[pred] != tb_of[succ]
    pairs = distinct(succ[crossing] * max(len(plans), 1) + tb_of[pred[crossing]])  # (instruction, other tb)
    waits = np.bincount(pairs // max(len(plans), 1), minlength=len(dag.instrs))
    most = np.bincount(owner, weights=np.maximum(waits[run], 1), minlength=len(plans)).astype(np.int64)
    out, start = [], 0
    for tbs in sched.threadblocks:
        end = start + len(tbs)
        out.append((int(least[start:end].max(initial=0)), int(most[start:end].max(initial=0))))
        start = end
    return tuple(out)


def waiting_edges(dag: InstrDAG):
    """The ends of the edges an instruction may wait on (all but a receive's on its send), as
    NumPy arrays (once per DAG)."""
    return _SAME_DAG.get([dag], "waits", lambda: _waiting_edges(dag))


def _waiting_edges(dag: InstrDAG):
    import numpy as np

    pred, succ = dag.ends
    match = DepKind.MATCH
    kept = np.fromiter((e.kind is not match for e in dag.edges), bool, len(dag.edges))
    return pred[kept], succ[kept]

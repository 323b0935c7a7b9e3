"""Make each send of a timed schedule wait for the send before it through the same port
(instruction DAG -> itself).

A synthesized schedule says in which order a rank's sends take its port (its link to a switch, its
NIC); the runtime does not: every send whose data is ready competes for the port, and the one that
has waited longest goes first. Where the schedule keeps a port busy from start to end, that order
is the schedule's only by chance: on DGX H100 x2 the MILP reducescatter's forwards to the NIC
started 224 us late each (1.22x its Algorithm at 1 GiB), its reduction chains having waited behind
sends the schedule put later. With ``port_order`` a send depends on the previous send (in the
global order, which follows the schedule's times) that leaves its rank through the same physical
edge (``ProgramInfo.ports``; through an edge of k parallel links, the k-th send before it: DGX-1's
double NVLinks carry two sends at once, and a chain of one served them at half their rate, 1.95x
the trees allgather's Algorithm), so the port serves them as planned; the edges point forward in the
order, which stays a deadlock-free witness. A rigid chain also passes every delay on (DGX-A100 x2
allgather 1.00x -> 1.02x), so the compiler keeps it only where the IR simulator finds it faster
(``runtime.choice``). Untimed programs, and programs without ports, are returned unchanged.

A chained send waits for the whole call before it, per-call cost included, where the timing model
holds the port for the bytes only: sends to different peers (and, in the IR simulator, to one
peer on different channels: a connection is per channel) overlap their calls' costs. So in a
schedule made in the calibrated model the chain serializes what the schedule overlaps (DGX H100
x2 allreduce: 1.34x its Algorithm chained, 1.12x unordered). With ``port_overlap`` a send waits
instead for the latest send through its port whose call, in the schedule's times, ended before it
starts (its data's arrival less the link's latency): the order the schedule has, and no wait it
does not have. In a schedule that keeps a port busy one send after another the two are the same.
"""

from __future__ import annotations

from codegen.chunk_dag import DepKind
from codegen.columns import instr_columns
from codegen.instr_dag import InstrDAG, InstrEdge

__all__ = ["order_ports"]


def order_ports(dag: InstrDAG, port_order: bool = False, port_overlap: bool = False) -> InstrDAG:
    """Chain each rank's sends through one port in the schedule's order (``port_order``; with
    ``port_overlap`` only those the schedule does not overlap)."""
    if not port_order or dag.times is None or not dag.info.ports:
        return dag
    port = {(src, dst): (p, alpha, lanes) for src, dst, p, alpha, lanes in dag.info.ports}
    sent: dict[tuple[int, int], list[int]] = {}
    added = []
    for i in _through_ports(dag, port):
        ins = dag.instrs[i]
        key = port[(ins.rank, ins.send_to)]
        before = sent.setdefault((ins.rank, key[0]), [])
        lanes = key[2]  # an edge of k parallel links carries k sends at once: wait for the k-th before
        last = _ended_before(dag, before, i, port) if port_overlap else (before[-lanes] if len(before) >= lanes else None)
        if last is not None:
            added.append(InstrEdge(last, i, DepKind.ORDER))
        before.append(i)
    if not added:
        return dag
    return InstrDAG.build(dag.info, dag.instrs, (*dag.edges, *added), dag.position)


def _through_ports(dag: InstrDAG, port: dict) -> list[int]:
    """The sends that leave their rank through one of ``port``'s edges, in the DAG's order: found
    by NumPy (a tenth of a 512-rank allreduce's million instructions, the sends between machines;
    a Python step per instruction was most of this pass)."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass

    instrs, c = dag.instrs, instr_columns(dag)
    sends = np.flatnonzero(c.send_to >= 0)
    if not sends.size or not port:
        return []
    src, dst = c.rank[sends], c.send_to[sends]
    edges = np.array(sorted(port), np.int64).reshape(-1, 2)
    scale = int(max(edges.max(), src.max(), dst.max())) + 1
    codes, wanted = edges[:, 0] * scale + edges[:, 1], src * scale + dst  # (sorted: the edges were)
    at = np.minimum(np.searchsorted(codes, wanted), codes.size - 1)
    through = np.asarray(sends, np.int64)[codes[at] == wanted]
    place = np.empty(len(instrs), np.int64)
    place[np.asarray(dag.order, np.int64).reshape(len(instrs))] = np.arange(len(instrs))
    return through[np.argsort(place[through], kind="stable")].tolist()


SCAN = 64
"""How many of a port's earlier sends ``port_overlap`` looks back through for one that ended."""


def _ended_before(dag: InstrDAG, before: list[int], i: int, port: dict) -> int | None:
    """The latest of ``before`` (sends through ``i``'s port, in order) whose call ends, in the
    schedule's times, by the time ``i`` starts (its receive's arrival less the link's latency)."""
    times, instrs = dag.times, dag.instrs
    start = times[i] + 1e-9 * max(1.0, abs(times[i]))
    for j in reversed(before[-SCAN:]):
        alpha = port[(instrs[j].rank, instrs[j].send_to)][1]
        if times[instrs[j].send_match] - alpha <= start:
            return j
    return None

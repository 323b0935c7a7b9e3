"""Make each send of a timed schedule wait for the send before it through the same port
(instruction DAG -> itself).

A synthesized schedule says in which order a rank's sends take its port (its link to a switch, its
NIC); the runtime does not: every send whose data is ready competes for the port, and the one that
has waited longest goes first. Where the schedule keeps a port busy from start to end, that order
is the schedule's only by chance: on DGX H100 x2 the MILP reducescatter's forwards to the NIC
started 224 us late each (1.22x its Algorithm at 1 GiB), its reduction chains having waited behind
sends the schedule put later. With ``port_order`` a send depends on the previous send (in the
global order, which follows the schedule's times) that leaves its rank through the same physical
edge (``ProgramInfo.ports``), so the port serves them as planned; the edges point forward in the
order, which stays a deadlock-free witness. A rigid chain also passes every delay on (DGX-A100 x2
allgather 1.00x -> 1.02x), so the compiler keeps it only where the IR simulator finds it faster
(``runtime.choice``). Untimed programs, and programs without ports, are returned unchanged.
"""

from __future__ import annotations

from codegen.chunk_dag import DepKind
from codegen.instr_dag import InstrDAG, InstrEdge

__all__ = ["order_ports"]


def order_ports(dag: InstrDAG, port_order: bool = False) -> InstrDAG:
    """Chain each rank's sends through one port in the schedule's order (``port_order``)."""
    if not port_order or dag.times is None or not dag.info.ports:
        return dag
    port = {(src, dst): p for src, dst, p in dag.info.ports}
    last: dict[tuple[int, int], int] = {}
    added = []
    for i in dag.order:
        ins = dag.instrs[i]
        key = None if ins.send_to is None else port.get((ins.rank, ins.send_to))
        if key is None:
            continue
        if (ins.rank, key) in last:
            added.append(InstrEdge(last[(ins.rank, key)], i, DepKind.ORDER))
        last[(ins.rank, key)] = i
    if not added:
        return dag
    return InstrDAG.build(dag.info, dag.instrs, (*dag.edges, *added), dag.position)

"""Choose the global order the schedule follows (instruction DAG -> itself).

A topological order taking, among the ready instructions, the one of least depth (its step in the
dataflow), then the one with the longest path still ahead of it (the critical path), then the
lowest index. Every threadblock later runs its instructions in this order, so sends and receives
on each connection come in the same order and the schedule cannot deadlock.
"""

from __future__ import annotations

from dataclasses import replace

from codegen.instr_dag import InstrDAG, topological_order

__all__ = ["order_by_critical_path"]


def order_by_critical_path(dag: InstrDAG) -> InstrDAG:
    """Order by (depth, -critical path, index)."""
    depth, height = dag.depth, dag.height
    order = topological_order(len(dag.instrs), dag.edges, lambda i: (depth[i], -height[i], i))
    return replace(dag, order=order)

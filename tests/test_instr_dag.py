"""InstrDAG's structure computed on arrays is the structure its definitions give, edge by edge."""

from __future__ import annotations

import random

import pytest
from codegen_helpers import heap_order

from codegen.chunk_dag import DepKind, ProgramInfo
from codegen.errors import CodegenError
from codegen.instr_dag import Instr, InstrDAG, InstrEdge
from codegen.ir import OpType

INFO = ProgramInfo("random", "custom", 1, None, 1, 1, (0,), 1)


def _random(seed: int) -> tuple[list[Instr], list[InstrEdge], list[int]]:
    """Instructions, forward edges between them with repeats and self-loops, and a shuffled hint."""
    rnd = random.Random(seed)
    n = rnd.randint(1, 40)
    rank = list(range(n))
    rnd.shuffle(rank)  # the edges go forward in this order, not in the indices'
    edges = []
    for a in range(n):
        for b in range(a, n):
            if rnd.random() < (0.3 if a == b else 0.12):
                kind = rnd.choice([DepKind.RAW, DepKind.WAR, DepKind.WAW])
                edges.extend([InstrEdge(rank[a], rank[b], kind)] * rnd.choice([1, 1, 2]))
    rnd.shuffle(edges)
    hint = [rnd.randint(0, n) for _ in range(n)]
    return [Instr(0, OpType.NOP) for _ in range(n)], edges, hint


@pytest.mark.parametrize("seed", range(30))
def test_build_and_structure_are_their_definitions(seed):
    instrs, edges, hint = _random(seed)
    dag = InstrDAG.build(INFO, instrs, edges, hint)
    n = len(instrs)
    unique: dict = {}
    for e in edges:
        if e.pred != e.succ:
            unique.setdefault((e.pred, e.succ), e)  # the first of equal ends, its kind kept
    assert [(e.pred, e.succ, e.kind) for e in dag.edges] == [
        (e.pred, e.succ, e.kind) for e in sorted(unique.values())
    ]
    assert dag.order == heap_order(n, dag.edges, lambda i: (hint[i], i))
    assert dag.position == tuple(dag.order.index(i) for i in range(n))
    assert dag.preds == tuple(tuple(e for e in dag.edges if e.succ == i) for i in range(n))
    assert dag.succs == tuple(tuple(e for e in dag.edges if e.pred == i) for i in range(n))
    depth, height = [0] * n, [0] * n
    for i in dag.order:
        depth[i] = max((depth[e.pred] + 1 for e in dag.preds[i]), default=0)
    for i in reversed(dag.order):
        height[i] = max((height[e.succ] + 1 for e in dag.succs[i]), default=0)
    assert (dag.depth, dag.height) == (tuple(depth), tuple(height))


def test_a_cycle_names_the_first_instruction_left_waiting():
    instrs = [Instr(0, OpType.NOP) for _ in range(5)]
    edges = [InstrEdge(0, 1, DepKind.RAW), InstrEdge(3, 2, DepKind.RAW), InstrEdge(2, 3, DepKind.RAW)]
    edges.append(InstrEdge(3, 4, DepKind.RAW))
    with pytest.raises(CodegenError, match=r"dependency cycle through instruction 2$"):
        InstrDAG.build(INFO, instrs, edges, [4, 3, 2, 1, 0])

"""The deadlock check's array cycle search finds the same cycle as the list-based Kahn it replaced, and
the steps it reads in bulk are those read step by step."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest

from codegen.call_graph import _WIDE, find_cycle


def _reference(preds: list[list[int]]) -> list[int] | None:
    """The former ``codegen.check._find_cycle``: Kahn's algorithm, then a walk back from the first
    call left along each call's first wait that is left too."""
    succs: list[list[int]] = [[] for _ in preds]
    indegree = [0] * len(preds)
    for me, ps in enumerate(preds):
        for p in ps:
            succs[p].append(me)
            indegree[me] += 1
    queue = deque(i for i, d in enumerate(indegree) if d == 0)
    done = 0
    while queue:
        i = queue.popleft()
        done += 1
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                queue.append(j)
    if done == len(preds):
        return None
    node = next(i for i, d in enumerate(indegree) if d > 0)
    path: list[int] = []
    seen: dict[int, int] = {}
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(p for p in preds[node] if indegree[p] > 0)
    return list(reversed(path[seen[node] :]))


def _arrays(preds: list[list[int]]) -> tuple[np.ndarray, ...]:
    """(src, dst, seq) in a shuffled order: the search must not depend on how the edges are listed."""
    edges = [(p, me, k) for me, ps in enumerate(preds) for k, p in enumerate(ps)]
    random.Random(len(edges)).shuffle(edges)
    src, dst, seq = (np.asarray(col, dtype=np.int64).reshape(-1) for col in zip(*edges, strict=True)) if edges else (
        np.zeros(0, np.int64),
    ) * 3
    return src, dst, seq


def _random_graph(rng: random.Random, n: int, back: int, width: int) -> list[list[int]]:
    """Chains of calls (threadblocks) with waits across them, mostly forward, ``back`` of them
    backward (which may close cycles), duplicates allowed."""
    preds: list[list[int]] = [[] for _ in range(n)]
    for me in range(n):
        if me % width:
            preds[me].append(me - 1)
        for _ in range(rng.randrange(3)):
            preds[me].append(rng.randrange(me) if me else 0)
    for _ in range(back):
        me = rng.randrange(n)
        preds[me].append(rng.randrange(me, n))
    preds[0] = [p for p in preds[0] if p != 0] if back == 0 else preds[0]
    return preds


@pytest.mark.parametrize("seed", range(40))
def test_same_cycle_as_the_list_form(seed):
    rng = random.Random(seed)
    n = rng.choice([1, 5, 40, 300, 3 * _WIDE * 20])
    preds = _random_graph(rng, n, back=rng.choice([0, 0, 1, 3]), width=rng.choice([1, 7, 50]))
    assert find_cycle(n, *_arrays(preds)) == _reference(preds)


def test_long_chain_is_searched_node_by_node():
    # one call wide for 50,000 levels: a NumPy step per level would take seconds
    n = 50_000
    preds = [[me - 1] if me else [] for me in range(n)]
    preds[n // 2].append(n - 1)
    assert find_cycle(n, *_arrays(preds)) == _reference(preds)


def test_each_call_is_named_by_its_step_past_empty_threadblocks():
    """A call's name (rank, threadblock, step) is found from where its threadblock's ops start: a
    threadblock with no ops starts where the next one does and names no call."""
    from codegen.call_graph import CallGraph
    from codegen.ir import IR, Buffer, Gpu, Op, OpType, Ref, Threadblock

    def send(count: int) -> Op:
        return Op(OpType.SEND, src=Ref(Buffer.INPUT, 0), count=count)

    def recv(count: int) -> Op:
        return Op(OpType.RECV, dst=Ref(Buffer.OUTPUT, 0), count=count)

    empty = Threadblock(0, None, None, 0, ())
    gpus = (
        Gpu(0, 4, 4, 0, (empty, Threadblock(1, 1, None, 0, (send(2), send(1))), Threadblock(2, None, None, 0, ()))),
        Gpu(1, 4, 4, 0, (Threadblock(0, None, 0, 0, (recv(2), recv(1))), Threadblock(1, None, None, 0, ()))),
    )
    graph = CallGraph(IR("names", "custom", 2, 4, gpus))
    names = [graph.name(i) for i in range(graph.n)]
    assert names == [(0, 1, 0), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 0), (1, 0, 1)]


def _steps_reference(ir):
    """Per step (flags, count), per dependency (waiting step, awaited step), in the IR's order,
    read step by step: what ``Steps`` reads once per distinct op object."""
    start, at = {}, 0
    for g in ir.gpus:
        for tb in g.threadblocks:
            start[(g.rank, tb.id)] = at
            at += len(tb.ops)
    steps, deps = [], []
    for g in ir.gpus:
        for tb in g.threadblocks:
            for k, op in enumerate(tb.ops):
                steps.append((op.type.sends + 2 * op.type.receives, op.count))
                deps += [(start[(g.rank, tb.id)] + k, start[(g.rank, d.tb)] + d.op) for d in op.deps]
    return steps, deps


def _connections_reference(ir, links):
    """Per connection: whether its sent counts differ from its received ones (in number or order)."""
    tbs = {(g.rank, tb.id): tb for g in ir.gpus for tb in g.threadblocks}

    def counts(rank, tb, sends):
        ops = () if tb is None else tbs[(rank, tb)].ops
        return [op.count for op in ops if (op.type.sends if sends else op.type.receives)]

    return [counts(a, s, True) != counts(b, r, False) for (a, b, _), (s, r) in links]


def test_steps_read_in_bulk_as_step_by_step():
    """Ops shared by many steps (as the XML reader and the passes share them) are read once and
    spread to every step; connections whose counts differ are the ones found."""
    import dataclasses

    from codegen.call_graph import Steps
    from codegen.compiler import compile_program
    from codegen.examples import allpairs_allreduce
    from codegen.formats.xml_reader import read_xml
    from codegen.formats.xml_writer import write_xml
    from codegen.rules import connections

    ir = read_xml(write_xml(compile_program(allpairs_allreduce.program(4)), "azure"))  # 60 steps, 39 ops
    gpu = ir.gpus[1]
    tb = gpu.threadblocks[0]
    changed = dataclasses.replace(tb.ops[0], count=tb.ops[0].count + 1)  # one transfer's count differs
    tbs = (dataclasses.replace(tb, ops=(changed, *tb.ops[1:])), *gpu.threadblocks[1:])
    broken = dataclasses.replace(
        ir, gpus=(ir.gpus[0], dataclasses.replace(gpu, threadblocks=tbs), *ir.gpus[2:])
    )
    for case in (ir, broken):
        steps, deps = _steps_reference(case)
        got = Steps(case)
        assert list(zip(got.flags.tolist(), got.counts.tolist(), strict=True)) == steps
        assert list(zip(got.dep_at.tolist(), got.dep_of.tolist(), strict=True)) == deps
        links = sorted(connections(case).items())
        assert got.unmatched(links).tolist() == _connections_reference(case, links)
    assert any(_connections_reference(case, links)) and deps

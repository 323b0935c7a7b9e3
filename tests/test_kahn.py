"""codegen.kahn: Kahn's algorithm, least ready node first, compiled; the order a plain heap-based
Kahn's algorithm gives, on DAGs and on graphs with a cycle."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from codegen.chunk_dag import DepKind
from codegen.errors import CodegenError
from codegen.instr_dag import InstrEdge, prioritized_order
from codegen.kahn import kahn


def _reference(n: int, edges: list[tuple[int, int]]) -> list[int]:
    indegree = [0] * n
    out_edges: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        indegree[b] += 1
        out_edges[a].append(b)
    ready = [v for v in range(n) if not indegree[v]]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in out_edges[v]:
            indegree[w] -= 1
            if not indegree[w]:
                heapq.heappush(ready, w)
    return order


@pytest.mark.parametrize("seed", range(20))
def test_the_least_ready_node_first(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    rank = list(range(n))
    rng.shuffle(rank)  # a DAG whose edges go forward in a hidden order, backwards in places' order
    edges = [(a, b) for a in range(n) for b in range(n) if rank[a] < rank[b] and rng.random() < 0.08]
    if seed % 4 == 0 and n > 2:  # a cycle: the order stops short
        a, b = rng.sample(range(n), 2)
        edges += [(a, b), (b, a)]
    pred = np.array([a for a, _ in edges], np.int64)
    succ = np.array([b for _, b in edges], np.int64)
    assert kahn(n, pred, succ).tolist() == _reference(n, edges)


def test_prioritized_order_follows_the_priority_and_names_a_cycle():
    edges = [InstrEdge(2, 0, DepKind.RAW), InstrEdge(1, 0, DepKind.RAW), InstrEdge(3, 1, DepKind.RAW)]
    assert prioritized_order([0, 1, 2, 3], edges) == (2, 3, 1, 0)
    assert prioritized_order([3, 2, 1, 0], edges) == (3, 2, 1, 0)  # every edge forward already
    with pytest.raises(CodegenError, match="dependency cycle"):
        prioritized_order([0, 1], [InstrEdge(0, 1, DepKind.RAW), InstrEdge(1, 0, DepKind.RAW)])

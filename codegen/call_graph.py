"""The deadlock check's graph of primitive calls, held as arrays, and its cycle search.

A 512-rank schedule has about a million calls and two million "waits for" edges; as Python lists
of lists the check took seconds per graph and ran six times per compile. Here each edge is one entry
of two integer arrays, the topological sort removes a whole level of calls per NumPy step while the
levels are wide (node by node once they are narrow, where Python is faster), and the preds of a
call are put in order only when a cycle has to be named. What is checked and what a deadlock message
says is :func:`codegen.check._check_deadlock`'s, unchanged.
"""

from __future__ import annotations

import bisect
from collections import deque

import numpy as np

from codegen.ir import IR
from codegen.rules import connections

__all__ = ["CallGraph", "find_cycle"]

_WIDE = 64
"""Levels at least this wide are removed in one NumPy step; narrower ones count against a budget."""


class CallGraph:
    """Each step's calls (one per chunk for steps that send or receive: how a step runs at large sizes,
    which is also when it needs most FIFO room), built once for both graphs of the deadlock check:
    ``name(i)`` is call ``i``'s step (rank, threadblock, op index)."""

    def __init__(self, ir: IR) -> None:
        ncalls: list[int] = []
        flags: list[int] = []  # 1 sends, 2 receives
        deps: list[tuple[int, int, int]] = []  # (op, rank, tb) of the dep, then its op index
        dep_ops: list[int] = []
        tb_start: dict[tuple[int, int], int] = {}
        tb_first: list[int] = []
        self._tbs: list[tuple[int, int]] = []  # (rank, id) of each threadblock, for ``name``
        for gpu in ir.gpus:
            rank = gpu.rank
            for tb in gpu.threadblocks:
                at = tb_start[(rank, tb.id)] = len(flags)
                tb_first.append(at)
                self._tbs.append((rank, tb.id))
                for k, op in enumerate(tb.ops):
                    kind = op.type
                    flag = kind.sends + 2 * kind.receives
                    flags.append(flag)
                    ncalls.append(max(1, op.count) if flag else 1)
                    if op.deps:
                        for d in op.deps:
                            deps.append((at + k, rank, d.tb))
                            dep_ops.append(d.op)
        self._first = tb_first
        counts = np.asarray(ncalls, dtype=np.int64)
        self.op_of = np.repeat(np.arange(len(flags), dtype=np.int64), counts)
        first = np.zeros(len(flags) + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        self.n = int(first[-1])
        self._edges(first, tb_first, deps, dep_ops, tb_start)
        self._moves(ir, first, np.asarray(flags, dtype=np.int8), tb_first, len(flags))

    def _edges(self, first, tb_first, deps, dep_ops, tb_start) -> None:
        """What each call waits for on its rank: the previous call of its threadblock, then (its step's
        first call) the last calls of its dependencies, in their order."""
        starts = np.zeros(self.n + 1, dtype=bool)  # a threadblock without steps starts at the next one's
        starts[first[np.asarray(tb_first, dtype=np.int64)]] = True
        chain = np.flatnonzero(~starts[: self.n])
        dep_at = np.asarray([d[0] for d in deps], dtype=np.int64)
        dep_of = np.asarray([tb_start[(r, t)] + k for (_, r, t), k in zip(deps, dep_ops, strict=True)], dtype=np.int64)
        self.base_src = np.concatenate([chain - 1, first[dep_of + 1] - 1])
        self.base_dst = np.concatenate([chain, first[dep_at]])
        self.base_seq = np.concatenate([np.zeros(chain.size, np.int64), np.arange(1, dep_at.size + 1)])

    def _moves(self, ir: IR, first, flags, tb_first, nops: int) -> None:
        """The calls on each end of every connection, in order: ``links`` pairs (sent, got) arrays."""
        op_calls = flags[self.op_of]
        send_calls = np.flatnonzero(op_calls & 1)
        recv_calls = np.flatnonzero(op_calls & 2)
        ends = first[np.append(np.asarray(tb_first, dtype=np.int64), nops)]
        send_at = np.searchsorted(send_calls, ends)
        recv_at = np.searchsorted(recv_calls, ends)
        index = {}
        for gpu in ir.gpus:
            for tb in gpu.threadblocks:
                index[(gpu.rank, tb.id)] = len(index)
        empty = np.zeros(0, dtype=np.int64)
        self.links = []
        for (a, b, _ch), (stb, rtb) in connections(ir).items():
            s = empty if stb is None else send_calls[send_at[index[(a, stb)]] : send_at[index[(a, stb)] + 1]]
            r = empty if rtb is None else recv_calls[recv_at[index[(b, rtb)]] : recv_at[index[(b, rtb)] + 1]]
            self.links.append((s, r))

    def name(self, call: int) -> tuple[int, int, int]:
        """Call ``call``'s step: (rank, threadblock id, op index); the threadblock is the last one
        starting at or before its op (one with no ops starts where the next one does)."""
        op = int(self.op_of[call])
        t = bisect.bisect_right(self._first, op) - 1
        return (*self._tbs[t], op - self._first[t])

    def edges(self, depth: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, seq): call ``dst`` waits for call ``src``; ``seq`` orders one call's waits as the
        list-of-lists form did (its rank's first, then by connection, transfer and kind). Beyond the
        rank: the matching call on its connection and, with a ``depth``, the call received ``depth``
        calls earlier on the connection it sends on."""
        src, dst, seq = [self.base_src], [self.base_dst], [self.base_seq]
        offset = int(self.base_seq.max(initial=0)) + 1
        for sent, got in self.links:
            m = min(sent.size, got.size)
            src.append(sent[:m])
            dst.append(got[:m])
            seq.append(offset + 2 * np.arange(m, dtype=np.int64))
            if depth is not None and sent.size > depth:
                k = min(m, sent.size - depth)
                src.append(got[:k])
                dst.append(sent[depth : depth + k])
                seq.append(offset + 2 * np.arange(k, dtype=np.int64) + 1)
            offset += 2 * m
        return np.concatenate(src), np.concatenate(dst), np.concatenate(seq)


def find_cycle(n: int, src: np.ndarray, dst: np.ndarray, seq: np.ndarray) -> list[int] | None:
    """The calls of one cycle in order, or None: Kahn's algorithm; from the first call it cannot
    remove, follow each call's first wait that is not removed either until a call repeats."""
    indegree = _kahn(n, src, dst)
    left = np.flatnonzero(indegree > 0)
    if not left.size:
        return None
    order = np.lexsort((seq, dst))
    waits, callers = src[order], dst[order]
    kept = (indegree[waits] > 0) & (indegree[callers] > 0)
    callers, at = np.unique(callers[kept], return_index=True)
    first_left = dict(zip(callers.tolist(), waits[kept][at].tolist(), strict=True))
    node = int(left[0])
    path: list[int] = []
    seen: dict[int, int] = {}
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = first_left[node]
    return list(reversed(path[seen[node] :]))


def _kahn(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Each call's waits left once every call that can be removed is (which calls those are does not
    depend on the order of removal): zero everywhere when the graph has no cycle."""
    indegree = np.bincount(dst, minlength=n)
    order = np.argsort(src, kind="stable")
    succs = dst[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    frontier = np.flatnonzero(indegree == 0)
    budget = n // _WIDE + 16  # narrow levels NumPy may take before Python is cheaper
    while frontier.size:
        if frontier.size < _WIDE:
            budget -= 1
            if budget < 0:
                return _kahn_rest(indegree, ptr, succs, frontier)
        lens = ptr[frontier + 1] - ptr[frontier]
        total = int(lens.sum())
        if not total:
            break
        shift = np.repeat(ptr[frontier] - np.cumsum(lens) + lens, lens)
        targets = succs[shift + np.arange(total)]
        np.subtract.at(indegree, targets, 1)
        targets = np.unique(targets)
        frontier = targets[indegree[targets] == 0]
    return indegree


def _kahn_rest(indegree: np.ndarray, ptr: np.ndarray, succs: np.ndarray, frontier: np.ndarray) -> np.ndarray:
    """The rest of :func:`_kahn` call by call, where the levels are too narrow for NumPy."""
    left, at, to = indegree.tolist(), ptr.tolist(), succs.tolist()
    queue = deque(frontier.tolist())
    while queue:
        i = queue.popleft()
        for j in to[at[i] : at[i + 1]]:
            left[j] -= 1
            if not left[j]:
                queue.append(j)
    return np.asarray(left, dtype=np.int64)

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
from collections.abc import Iterable

import numpy as np

from codegen.ir import IR, Op
from codegen.rules import connections
from topologies.numeric import ranges

__all__ = ["CallGraph", "Steps", "find_cycle"]

_WIDE = 64
"""Levels at least this wide are removed in one NumPy step; narrower ones count against a budget."""


class Steps:
    """An IR's steps in bulk, in its order (rank, threadblock, step): per threadblock its (rank, id)
    (``names``) and where its steps start (``first``, and one past the last step); per step its kind
    (``flags``: 1 sends, 2 receives) and count; per dependency, in order, the step waiting
    (``dep_at``) and the step it waits for (``dep_of``). Read once per distinct ``Op`` object (the
    IR shares one among every step written alike: some 30,000 for half a million steps at 512
    ranks), then spread to the steps by NumPy. The IR is structurally sound."""

    def __init__(self, ir: IR) -> None:
        tbs = [(gpu.rank, tb) for gpu in ir.gpus for tb in gpu.threadblocks]
        self.names = [(rank, tb.id) for rank, tb in tbs]
        ops = [op for _, tb in tbs for op in tb.ops]
        self.first = np.zeros(len(tbs) + 1, dtype=np.int64)
        np.cumsum(np.fromiter((len(tb.ops) for _, tb in tbs), np.int64, len(tbs)), out=self.first[1:])
        self.flags, self.counts, self.dep_at, dep_tb, dep_op = _steps(ops)
        ranks = np.fromiter((rank for rank, _ in tbs), np.int64, len(tbs))
        self.tb_of = _TbIndex(ranks, np.fromiter((tb.id for _, tb in tbs), np.int64, len(tbs)))
        op_rank = np.repeat(ranks, np.diff(self.first))
        self.dep_of = self.first[self.tb_of.find(op_rank[self.dep_at], dep_tb)] + dep_op

    def unmatched(
        self, links: Iterable[tuple[tuple[int, int, int], tuple[int | None, int | None]]]
    ) -> np.ndarray:
        """Per connection of ``links`` (as :func:`codegen.rules.connections` gives them): whether
        the counts its sending steps send differ from those its receiving steps receive, in number
        or in order."""
        ends = _ends(links)
        sends, recvs = np.flatnonzero(self.flags & 1), np.flatnonzero(self.flags & 2)
        send_lo, send_hi = _spans(np.searchsorted(sends, self.first), self.tb_of, ends[:, 0], ends[:, 2])
        recv_lo, recv_hi = _spans(np.searchsorted(recvs, self.first), self.tb_of, ends[:, 1], ends[:, 3])
        m = np.minimum(send_hi - send_lo, recv_hi - recv_lo)
        differ = self.counts[sends[ranges(send_lo, m)]] != self.counts[recvs[ranges(recv_lo, m)]]
        out = (send_hi - send_lo) != (recv_hi - recv_lo)
        out[np.repeat(np.arange(m.size), m)[differ]] = True
        return out


class CallGraph:
    """Each step's calls (one per chunk for steps that send or receive: how a step runs at large sizes,
    which is also when it needs most FIFO room), built once for both graphs of the deadlock check
    (from ``steps``, the IR's :class:`Steps`, where they were read already): ``name(i)`` is call
    ``i``'s step (rank, threadblock, op index)."""

    def __init__(self, ir: IR, steps: Steps | None = None) -> None:
        steps = Steps(ir) if steps is None else steps
        self._tbs = steps.names  # for ``name``
        self._first = steps.first[:-1].tolist()
        counts = np.where(steps.flags > 0, np.maximum(steps.counts, 1), 1)
        self.op_of = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        first = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        self.n = int(first[-1])
        self._edges(first, steps.first, steps.dep_at, steps.dep_of)
        self._moves(ir, first, steps.flags, steps.first, steps.tb_of)

    def _edges(self, first, tb_first, dep_at, dep_of) -> None:
        """What each call waits for on its rank: the previous call of its threadblock, then (its step's
        first call) the last calls of its dependencies, in their order."""
        starts = np.zeros(self.n + 1, dtype=bool)  # a threadblock without steps starts at the next one's
        starts[first[tb_first[:-1]]] = True
        chain = np.flatnonzero(~starts[: self.n])
        self.base_src = np.concatenate([chain - 1, first[dep_of + 1] - 1])
        self.base_dst = np.concatenate([chain, first[dep_at]])
        self.base_seq = np.concatenate([np.zeros(chain.size, np.int64), np.arange(1, dep_at.size + 1)])

    def _moves(self, ir: IR, first, flags, tb_first, tb_of: _TbIndex) -> None:
        """The calls on each end of every connection, in order: the sending calls ``sends``, the
        receiving ones ``recvs``, and per connection where its calls start and end in them."""
        op_calls = flags[self.op_of]
        self.sends = np.flatnonzero(op_calls & 1)
        self.recvs = np.flatnonzero(op_calls & 2)
        ends = first[tb_first]
        send_at = np.searchsorted(self.sends, ends)
        recv_at = np.searchsorted(self.recvs, ends)
        keys = _ends(connections(ir).items())
        self.send_lo, self.send_hi = _spans(send_at, tb_of, keys[:, 0], keys[:, 2])
        self.recv_lo, self.recv_hi = _spans(recv_at, tb_of, keys[:, 1], keys[:, 3])

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
        spans = (self.send_lo, self.send_hi, self.recv_lo, self.recv_hi)
        matched, room = connection_waits(self.sends, self.recvs, *spans, depth)
        m = matched[2]
        offset = int(self.base_seq.max(initial=0)) + 1 + np.cumsum(2 * m) - 2 * m
        src, dst, seq = [self.base_src, matched[0]], [self.base_dst, matched[1]], [self.base_seq]
        seq.append(np.repeat(offset, m) + 2 * _within(m))
        if room is not None:
            k = room[2]
            src.append(room[0])
            dst.append(room[1])
            seq.append(np.repeat(offset, k) + 2 * _within(k) + 1)
        return np.concatenate(src), np.concatenate(dst), np.concatenate(seq)


Waits = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(src, dst, count): call ``dst`` waits for call ``src``, connection after connection, ``count``
of them per connection."""


def connection_waits(
    sends: np.ndarray,
    recvs: np.ndarray,
    send_lo: np.ndarray,
    send_hi: np.ndarray,
    recv_lo: np.ndarray,
    recv_hi: np.ndarray,
    depth: int | None,
) -> tuple[Waits, Waits | None]:
    """The waits across connections: each one's k-th receiving call for its k-th sending call,
    and (with a ``depth``) its k-th sending call for the receiving call ``depth`` calls back (else
    None). A connection's sending calls are ``sends[send_lo:send_hi]``, its receiving ones
    ``recvs[recv_lo:recv_hi]`` (one entry per connection in each bound); shared by
    :meth:`CallGraph.edges` and the check of a placement (``codegen.placed_ir``)."""
    sent, got = send_hi - send_lo, recv_hi - recv_lo
    m = np.minimum(sent, got)
    matched = (sends[ranges(send_lo, m)], recvs[ranges(recv_lo, m)], m)
    if depth is None:
        return matched, None
    k = np.where(sent > depth, np.minimum(m, sent - depth), 0)
    return matched, (recvs[ranges(recv_lo, k)], sends[ranges(send_lo + depth, k)], k)


def _steps(ops: list[Op]) -> tuple[np.ndarray, ...]:
    """Per op: its flags (1 sends, 2 receives) and count; per dependency, in order: the op waiting,
    the threadblock and op index it waits for. Read once per distinct op object."""
    ids = np.fromiter(map(id, ops), np.int64, len(ops))
    _, at, which = np.unique(ids, return_index=True, return_inverse=True)
    distinct = [ops[i] for i in at.tolist()]
    flag = np.fromiter((op.type.sends + 2 * op.type.receives for op in distinct), np.int64, len(distinct))
    count = np.fromiter((op.count for op in distinct), np.int64, len(distinct))
    ndeps = np.fromiter((len(op.deps) for op in distinct), np.int64, len(distinct))
    deps = [dep for op in distinct for dep in op.deps]
    dep_tb = np.fromiter((d.tb for d in deps), np.int64, len(deps))
    dep_op = np.fromiter((d.op for d in deps), np.int64, len(deps))
    per_op = ndeps[which]
    dep_at = np.repeat(np.arange(len(ops), dtype=np.int64), per_op)
    picked = ranges((np.cumsum(ndeps) - ndeps)[which], per_op)
    return flag[which].astype(np.int8), count[which], dep_at, dep_tb[picked], dep_op[picked]


def _ends(links: Iterable[tuple[tuple[int, int, int], tuple[int | None, int | None]]]) -> np.ndarray:
    """Per connection: sender, receiver, and their threadblocks (-1: none)."""
    rows = [(a, b, -1 if s is None else s, -1 if r is None else r) for (a, b, _), (s, r) in links]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4)


class _TbIndex:
    """Each threadblock's place in the IR's order by (rank, id) (the last one, were one repeated)."""

    def __init__(self, ranks: np.ndarray, ids: np.ndarray) -> None:
        self._scale = int(ids.max(initial=0)) + 1
        keys = ranks * self._scale + ids
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]

    def find(self, ranks: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The places of the threadblocks (``ranks``, ``ids``), which exist."""
        at = np.searchsorted(self._keys, ranks * self._scale + ids, side="right") - 1
        return self._order[at]


def _spans(
    at: np.ndarray, tb_of: _TbIndex, ranks: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Where each threadblock (``ranks``, ``ids``; id -1: none) starts and ends in ``at``'s calls."""
    has = ids >= 0
    lo, hi = np.zeros(ids.size, np.int64), np.zeros(ids.size, np.int64)
    t = tb_of.find(ranks[has], ids[has])
    lo[has], hi[has] = at[t], at[t + 1]
    return lo, hi


def _within(n: np.ndarray) -> np.ndarray:
    """0 .. n[j] - 1 for each j, concatenated."""
    total = int(n.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)


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
    owner = np.empty(n, dtype=np.int64)
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
        targets = succs[ranges(ptr[frontier], lens)]
        np.subtract.at(indegree, targets, 1)
        freed = targets[indegree[targets] == 0]  # a call freed by several of the level: once each
        order = np.arange(freed.size)
        owner[freed] = order  # one entry per call holds, whichever it is
        frontier = freed[owner[freed] == order]
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

"""Races and deadlocks of an MSCCL++ plan by happens-before, over consecutive launches.

Part of the independent validator (:mod:`mscclpp_validator`); it follows the executor's
synchronization model (shared/reference/mscclpp-plan-and-torch.md, 1.10 and 4.5 item 10):

- a threadblock's ops between two ``nop``s (or ``barrier``s) form a *segment*: different threads
  may be in different ops of it, so its ops are unordered with each other; a segment is complete
  once the next ``nop`` is reached. A signal publishes only what completed before its segment; a
  wait orders only the segments after it;
- the k-th signal reaching a channel (``signal`` or ``rlxsignal`` on its partner) precedes the k-th
  wait on it, counted across launches (the counters persist); the k-th release of a semaphore
  precedes the (k + init)-th acquire; the k-th use of a barrier joins the threadblocks that use it;
- a rank's launch ends when all its threadblocks end; then the host may rewrite the rank's input
  and output (the next call), and only then does the rank's next launch start; peers may still be
  in the earlier launch.

Two accesses to overlapping chunks of one rank's memory (``inplace`` aliases the smaller buffer
into the larger), one a write, must be ordered; a cycle of waits is a deadlock. Relaxed signals and
waits order execution, not data, so they may only come before a threadblock's first data op (the
start-of-launch handshake mscclpp's DSL writes). The clocks are vector clocks over threadblocks.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from codegen.formats.mscclpp_validator import DATA, SIGNALS, WAITS, Op, Plan

__all__ = ["UNITS", "accesses_of", "canonical", "races"]

UNITS = 16
"""Units a chunk is split into, so that ``tbg_info`` parts of an op can be told apart."""
SHOWN = 5


def canonical(plan: Plan, owner: int, buffer: str, lo: int) -> tuple[tuple[int, str], int]:
    """Where unit ``lo`` of ``buffer`` of ``owner`` lies: an in-place call's smaller buffer is part of
    the larger one (allgather, gather: input at output chunk rank x share; reducescatter, scatter:
    output at input chunk rank x share; allreduce, reduce, broadcast: the same buffer)."""
    if plan.inplace:
        chunks = plan.chunks[owner]
        if plan.collective in ("allgather", "gather") and buffer == "i":
            return (owner, "o"), owner * chunks["i"] * UNITS + lo
        if plan.collective in ("reducescatter", "scatter") and buffer == "o":
            return (owner, "i"), owner * chunks["o"] * UNITS + lo
        if plan.collective in ("allreduce", "reduce", "broadcast") and buffer == "i":
            return (owner, "o"), lo
    return (owner, buffer), lo


def part(lo: int, hi: int, tbg: tuple[int, int] | None) -> tuple[int, int]:
    """The units of ``lo..hi`` a threadblock-group member handles (balanced split, as the executor)."""
    if tbg is None:
        return lo, hi
    t, g = tbg
    n = hi - lo
    start = lambda i: i * (n // g) + min(i, n % g)  # noqa: E731
    return lo + start(t), lo + start(t + 1)


def accesses_of(op: Op) -> list[tuple[object, int, int, bool]]:
    """(ref, first unit, end unit, writes) for each buffer the data op ``op`` touches."""
    writes = {id(ref) for ref in op.dst}
    out = []
    for ref in (*op.src, *op.dst):
        lo, hi = part(ref.index * UNITS, (ref.index + ref.size) * UNITS, op.tbg)
        out.append((ref, lo, hi, id(ref) in writes))
    return out


@dataclass(frozen=True)
class _Access:
    key: tuple[int, str]
    lo: int
    hi: int
    write: bool
    comp: int
    seg: int
    entry: int
    op: tuple
    label: str


class _Graph:
    """Nodes: segment boundaries, sync ops, barrier meetings, launch ends; each may advance one
    component (a threadblock's boundary count, or a rank's host between launches)."""

    def __init__(self, plan: Plan, launches: int) -> None:
        self.plan, self.launches = plan, launches
        self.preds: list[list[int]] = []
        self.own: list[tuple[int, int] | None] = []
        self.label: list[str] = []
        self.comp: dict[tuple[int, int], int] = {}
        for r, tbs in enumerate(plan.tbs):
            for t in range(len(tbs)):
                self.comp[(r, t)] = len(self.comp)
        self.host = {r: len(self.comp) + r for r in range(plan.ranks)}
        self.sync: list[tuple[int, str, str, tuple]] = []  # (node, signals|waits, kind, key)
        self.seg_of: dict[int, tuple[int, int, int]] = {}  # sync node -> (comp, seg, entry node)
        self.accesses: list[_Access] = []
        self.problems: list[str] = []

    def node(self, preds: list[int], own: tuple[int, int] | None, label: str) -> int:
        self.preds.append(preds)
        self.own.append(own)
        self.label.append(label)
        return len(self.preds) - 1

    def build(self) -> None:
        start = {r: [] for r in range(self.plan.ranks)}
        meets: dict[tuple, int] = {}
        for launch in range(self.launches):
            for r, tbs in enumerate(self.plan.tbs):
                ends = [self._threadblock(r, t, ops, launch, start[r], meets) for t, ops in enumerate(tbs)]
                end = self.node(ends, None, f"rank {r} end of launch {launch}")
                host = self.node([end], (self.host[r], launch + 1), f"rank {r} host after launch {launch}")
                spans: dict[tuple[int, str], tuple[int, int]] = {}
                for buffer in ("i", "o"):
                    key, lo = canonical(self.plan, r, buffer, 0)
                    hi = lo + self.plan.chunks[r][buffer] * UNITS
                    old = spans.get(key, (lo, hi))
                    spans[key] = (min(lo, old[0]), max(hi, old[1]))
                label = (
                    f"the host between launches {launch} and {launch + 1} (it rewrites rank {r}'s buffers)"
                )
                for key, (lo, hi) in spans.items():
                    self.accesses.append(
                        _Access(key, lo, hi, True, self.host[r], launch, end, ("host", r, launch), label)
                    )
                start[r] = [host]

    def _threadblock(self, r: int, t: int, ops: list[Op], launch: int, start: list[int], meets: dict) -> int:
        comp = self.comp[(r, t)]
        size = 2 + sum(op.name in ("nop", "barrier") for op in ops)
        seg = launch * size
        entry = self.node(list(start), (comp, seg), f"rank {r} tb {t} start of launch {launch}")
        pending: list[int] = []
        uses: dict[int, int] = defaultdict(int)
        seen_data = False
        for op in ops:
            k = op.where[2]
            label = f"rank {r} tb {t} op {k} ({op.name}, launch {launch})"
            if op.name in ("nop", "barrier"):
                seg += 1
                entry = self.node([entry, *pending], (comp, seg), label)
                pending = []
                if op.barrier:
                    bid = op.barrier[0]
                    at = (r, launch, bid, uses[bid])
                    if at not in meets:
                        meets[at] = self.node([], None, f"barrier {bid}")
                    meet = meets[at]
                    uses[bid] += 1
                    self.preds[meet].append(entry)
                    entry = self.node([entry, meet], (comp, seg), label)
            elif op.name in DATA:
                seen_data = True
                for ref, lo, hi, write in accesses_of(op):
                    key, start_unit = canonical(self.plan, ref.owner, ref.buffer, lo)
                    where = (r, t, k, launch)
                    self.accesses.append(
                        _Access(key, start_unit, start_unit + hi - lo, write, comp, seg, entry, where, label)
                    )
            else:
                if op.name.startswith("rlx") and seen_data and launch == 0:
                    self.problems.append(
                        f"{label}: a relaxed {op.name[3:]} after data ops orders no data (use {op.name[3:]})"
                    )
                n = self.node([entry], None, label)
                pending.append(n)
                self.seg_of[n] = (comp, seg, entry)
                self._sync_keys(r, op, n)
        return self.node([entry, *pending], (comp, seg + 1), f"rank {r} tb {t} end of launch {launch}")

    def _sync_keys(self, r: int, op: Op, n: int) -> None:
        if op.name in SIGNALS:
            self.sync.extend((n, "signals", "channel", self.plan.partner(r, c)) for c in op.channels)
        elif op.name in WAITS:
            self.sync.extend((n, "waits", "channel", (r, c)) for c in op.channels)
        elif op.name == "sem_release":
            self.sync.extend((n, "signals", "semaphore", (r, s)) for s in op.semaphores)
        else:
            self.sync.extend((n, "waits", "semaphore", (r, s)) for s in op.semaphores)

    def order(self) -> list[int] | None:
        """A topological order (Kahn's, smallest node first), or None on a cycle."""
        succs: list[list[int]] = [[] for _ in self.preds]
        indegree = [len(p) for p in self.preds]
        for n, ps in enumerate(self.preds):
            for p in ps:
                succs[p].append(n)
        ready = [n for n, d in enumerate(indegree) if d == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            n = heapq.heappop(ready)
            out.append(n)
            for s in succs[n]:
                indegree[s] -= 1
                if indegree[s] == 0:
                    heapq.heappush(ready, s)
        return out if len(out) == len(self.preds) else None

    def pair(self, order: list[int]) -> dict[tuple, tuple[list[int], list[int]]]:
        """Match the k-th signal (release) to the k-th wait (acquire, after the initial value)."""
        place = {n: i for i, n in enumerate(order)}
        lists: dict[tuple, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for n, side, kind, key in self.sync:
            lists[(kind, key)][0 if side == "signals" else 1].append(n)
        for (kind, key), (signals, waits) in lists.items():
            signals.sort(key=place.__getitem__)
            waits.sort(key=place.__getitem__)
            skip = self.plan.semaphores[key[0]][key[1]] if kind == "semaphore" else 0
            for i, w in enumerate(waits):
                if 0 <= i - skip < len(signals):
                    self.preds[w].append(signals[i - skip])
        return lists

    def clocks(self, order: list[int]) -> np.ndarray:
        width = len(self.comp) + self.plan.ranks
        vc = np.zeros((len(self.preds), width), dtype=np.int32)
        for n in order:
            if self.preds[n]:
                vc[n] = vc[self.preds[n]].max(axis=0)
            if self.own[n] is not None:
                c, v = self.own[n]
                vc[n, c] = max(vc[n, c], v)
        return vc


def _before(vc: np.ndarray, comp: int, seg: int, entry: int) -> bool:
    """Whether segment ``seg`` of component ``comp`` completed before the node ``entry``."""
    return bool(vc[entry, comp] >= seg + 1)


def races(plan: Plan, launches: int = 2) -> list[str]:
    """Deadlocks (a cycle of waits), unordered signals or waits of one channel, and races."""
    g = _Graph(plan, launches)
    g.build()
    if g.problems:
        return g.problems[:SHOWN]
    base = g.order()
    lists = g.pair(base)
    order = g.order()
    if order is None:
        return [f"deadlock: a cycle of waits among {_cycle(g)}"]
    vc = g.clocks(order)
    out = _unordered_sync(g, vc, lists)
    if out:
        return out[:SHOWN]
    return _races(g, vc)[:SHOWN]


def _cycle(g: _Graph) -> str:
    order = g.order() or []
    done = set(order)
    stuck = [g.label[n] for n in range(len(g.preds)) if n not in done and "op" in g.label[n]]
    return "; ".join(stuck[:4]) + (f" and {len(stuck) - 4} more" if len(stuck) > 4 else "")


def _unordered_sync(g: _Graph, vc: np.ndarray, lists: dict) -> list[str]:
    """Consecutive signals (or waits) of one channel or semaphore must be ordered, else which wait
    a signal satisfies depends on timing."""
    out = []
    for (kind, key), sides in sorted(lists.items()):
        for side in sides:
            for a, b in itertools.pairwise(side):
                comp, seg, _ = g.seg_of[a]
                if comp == g.seg_of[b][0]:
                    continue  # one threadblock: program order
                if not _before(vc, comp, seg, g.seg_of[b][2]):
                    out.append(
                        f"{kind} {key[1]} of rank {key[0]}: {g.label[a]} and {g.label[b]} are not ordered"
                    )
    return out


def _races(g: _Graph, vc: np.ndarray) -> list[str]:
    out = []
    by_key: dict[tuple, list[_Access]] = defaultdict(list)
    for a in g.accesses:
        by_key[a.key].append(a)
    for key, items in sorted(by_key.items()):
        items.sort(key=lambda a: a.lo)
        active: list[_Access] = []
        for b in items:
            active = [a for a in active if a.hi > b.lo]
            for a in active:
                if (a.write or b.write) and a.lo < b.hi:
                    found = _race(a, b, vc, key)
                    if found:
                        out.append(found)
                        if len(out) >= SHOWN:
                            return out
            active.append(b)
    return out


def _race(a: _Access, b: _Access, vc: np.ndarray, key: tuple) -> str | None:
    chunks = f"chunk {min(a.lo, b.lo) // UNITS} of {key[1]} on rank {key[0]}"
    if a.op == b.op:
        same = (a.lo, a.hi) == (b.lo, b.hi)
        return None if same else f"race: {a.label} reads and writes shifted ranges of {chunks}"
    if a.comp == b.comp and a.seg == b.seg:
        return f"race: {a.label} and {b.label} touch {chunks} with no nop between them"
    if _before(vc, a.comp, a.seg, b.entry) or _before(vc, b.comp, b.seg, a.entry):
        return None
    verbs = ("writes" if a.write else "reads", "writes" if b.write else "reads")
    return f"race: {a.label} {verbs[0]} {chunks} unordered with {b.label}, which {verbs[1]} it"

"""A NumPy interpreter of MSCCL++ plans, compared with the collective's result.

Part of the independent validator (:mod:`mscclpp_validator`). Each rank's buffers are integer
arrays (a chunk is :data:`mscclpp_hb.UNITS` units; integers make every sum exact in any order); an
in-place call's smaller buffer is a view into the larger one. Threadblocks run their ops in order,
interleaved at random (a seed per run): ``wait``/``rlxwait`` block until the channel's counter
exceeds what the threadblock has consumed, ``sem_acquire`` until the semaphore is positive,
``barrier`` until as many threadblocks as it names have reached it; data ops act as the executor's
handlers do (``put`` writes a peer's memory, ``re``/``res``/``rre``/``rres`` sum their sources; only
sums exist). Two launches run back to back, a rank starting its second as soon as its first ended
(peers may still be in theirs), with fresh inputs and garbage in its output; after each launch
every rank's output is compared with the collective's result on that launch's inputs. Nothing
runnable with work left is a deadlock.
"""

from __future__ import annotations

import random

import numpy as np

from codegen.formats.mscclpp_hb import UNITS, part
from codegen.formats.mscclpp_validator import Op, Plan, Ref

__all__ = ["expected", "run"]

GARBAGE = -(1 << 40)


def expected(plan: Plan, inputs: list[np.ndarray]) -> list[np.ndarray | None]:
    """Each rank's output (chunks x units) after the collective on ``inputs``; None: not defined."""
    n, coll, root = plan.ranks, plan.collective, plan.root
    x = [a.reshape(-1, UNITS) for a in inputs]
    total = np.sum(x, axis=0) if coll in ("allreduce", "reduce", "reducescatter") else None
    share = plan.chunks[0]["o" if coll in ("reducescatter", "scatter") else "i"]
    if coll in ("allgather", "gather"):
        return [np.concatenate(x) if coll == "allgather" or r == root else None for r in range(n)]
    if coll == "reducescatter":
        return [total[r * share : (r + 1) * share] for r in range(n)]
    if coll == "scatter":
        return [x[root][r * share : (r + 1) * share] for r in range(n)]
    if coll in ("allreduce", "reduce"):
        return [total if coll == "allreduce" or r == root else None for r in range(n)]
    if coll == "broadcast":
        return [x[root] for _ in range(n)]
    c = share // n  # alltoall
    return [np.concatenate([x[q][r * c : (r + 1) * c] for q in range(n)]) for r in range(n)]


class _Memory:
    """Every rank's input, output and scratch, the smaller buffer of an in-place call inside the larger."""

    def __init__(self, plan: Plan, rng: np.random.Generator) -> None:
        self.plan = plan
        self.arrays: dict[tuple[int, str], np.ndarray] = {}
        for r, chunks in enumerate(plan.chunks):
            for b in ("i", "o", "s"):
                self.arrays[(r, b)] = rng.integers(GARBAGE, GARBAGE // 2, chunks[b] * UNITS)
            if plan.inplace:
                self._alias(r, chunks)

    def _alias(self, r: int, chunks: dict[str, int]) -> None:
        coll = self.plan.collective
        if coll in ("allgather", "gather"):
            lo = r * chunks["i"] * UNITS
            self.arrays[(r, "i")] = self.arrays[(r, "o")][lo : lo + chunks["i"] * UNITS]
        elif coll in ("reducescatter", "scatter"):
            lo = r * chunks["o"] * UNITS
            self.arrays[(r, "o")] = self.arrays[(r, "i")][lo : lo + chunks["o"] * UNITS]
        else:
            self.arrays[(r, "i")] = self.arrays[(r, "o")]

    def view(self, ref: Ref, tbg: tuple[int, int] | None) -> np.ndarray:
        lo, hi = part(ref.index * UNITS, (ref.index + ref.size) * UNITS, tbg)
        return self.arrays[(ref.owner, ref.buffer)][lo:hi]

    def start(self, r: int, values: np.ndarray, rng: np.random.Generator) -> None:
        """The host's part of a call: garbage in the output, then the new input."""
        out = self.arrays[(r, "o")]
        out[:] = rng.integers(GARBAGE, GARBAGE // 2, out.size)
        self.arrays[(r, "i")][:] = values


def _data(mem: _Memory, op: Op) -> None:
    src = [mem.view(ref, op.tbg).copy() for ref in op.src]
    dst = [mem.view(ref, op.tbg) for ref in op.dst]
    if op.name in ("put", "get", "copy"):
        for s, d in zip(src, dst, strict=True):
            d[:] = s
        return
    total = np.sum(src, axis=0)
    for d in dst:
        d[:] = total


class _Run:
    def __init__(self, plan: Plan, seed: int, launches: int) -> None:
        self.plan, self.launches = plan, launches
        self.rng = np.random.default_rng(seed)
        self.pick = random.Random(seed)
        self.mem = _Memory(plan, self.rng)
        self.inputs = [
            [self.rng.integers(0, 1000, c["i"] * UNITS) for c in plan.chunks] for _ in range(launches)
        ]
        self.want = [expected(plan, launch) for launch in self.inputs]
        self.inbound: dict[tuple[int, int], int] = {}
        self.consumed: dict[tuple[int, int], int] = {}
        self.sems = {(r, s): v for r, inits in enumerate(plan.semaphores) for s, v in enumerate(inits)}
        self.barriers: dict[tuple[int, int], tuple[set[int], set[int]]] = {}
        self.launch = [0] * plan.ranks
        self.pc: dict[tuple[int, int], int] = {}
        self.problems: list[str] = []
        for r in range(plan.ranks):
            self._begin(r)

    def _begin(self, r: int) -> None:
        self.mem.start(r, self.inputs[self.launch[r]][r], self.rng)
        for t in range(len(self.plan.tbs[r])):
            self.pc[(r, t)] = 0

    def _end(self, r: int) -> None:
        launch = self.launch[r]
        want = self.want[launch][r]
        got = self.mem.arrays[(r, "o")].reshape(-1, UNITS)
        if want is not None and not np.array_equal(got, want):
            chunk = int(np.argmax((got != want).any(axis=1)))
            what = "never written" if (got[chunk] < 0).all() else "wrong values"
            self.problems.append(f"wrong result: rank {r} output chunk {chunk} after launch {launch}: {what}")
        self.launch[r] += 1
        if self.launch[r] < self.launches:
            self._begin(r)

    def ready(self, r: int, op: Op, t: int) -> bool:
        if op.name in ("wait", "rlxwait"):
            return all(self.inbound.get((r, c), 0) > self.consumed.get((r, c), 0) for c in op.channels)
        if op.name == "sem_acquire":
            return all(self.sems[(r, s)] >= op.semaphores.count(s) for s in op.semaphores)
        if op.name == "barrier":
            state = self.barriers.setdefault((r, op.barrier[0]), ({*()}, {*()}))  # (waiting, released)
            waiting, released = state
            if t not in released:
                waiting.add(t)
                if len(waiting) < op.barrier[1]:
                    return False
                released |= waiting
                waiting.clear()
            released.discard(t)
        return True

    def step(self, r: int, op: Op) -> None:
        if op.name in ("signal", "rlxsignal"):
            for c in op.channels:
                key = self.plan.partner(r, c)
                self.inbound[key] = self.inbound.get(key, 0) + 1
        elif op.name in ("wait", "rlxwait"):
            for c in op.channels:
                self.consumed[(r, c)] = self.consumed.get((r, c), 0) + 1
        elif op.name in ("sem_acquire", "sem_release"):
            for s in op.semaphores:
                self.sems[(r, s)] += 1 if op.name == "sem_release" else -1
        elif op.name not in ("nop", "barrier"):
            _data(self.mem, op)

    def go(self) -> list[str]:
        while not self.problems:
            for r in range(self.plan.ranks):
                while self.launch[r] < self.launches and self._done(r):
                    self._end(r)
            live = [
                (r, t)
                for (r, t), k in self.pc.items()
                if self.launch[r] < self.launches and k < len(self.plan.tbs[r][t])
            ]
            if not live:
                return []
            self.pick.shuffle(live)
            if not any(self._burst(r, t) for r, t in live):
                return [self._deadlock(live)]
        return self.problems

    def _burst(self, r: int, t: int) -> bool:
        """Run up to a few ops of threadblock (r, t); whether it ran any."""
        ops = self.plan.tbs[r][t]
        ran = False
        for _ in range(self.pick.randint(1, 6)):
            k = self.pc[(r, t)]
            if k == len(ops) or not self.ready(r, ops[k], t):
                break
            self.step(r, ops[k])
            self.pc[(r, t)] = k + 1
            ran = True
        return ran

    def _done(self, r: int) -> bool:
        return all(self.pc[(r, u)] == len(tb) for u, tb in enumerate(self.plan.tbs[r]))

    def _deadlock(self, live: list[tuple[int, int]]) -> str:
        stuck = []
        for r, t in sorted(live)[:4]:
            op = self.plan.tbs[r][t][self.pc[(r, t)]]
            on = (
                f" on channel {op.channels[0]} (to rank {self.plan.peers[r][op.channels[0]]})"
                if op.channels
                else ""
            )
            stuck.append(f"rank {r} tb {t} op {self.pc[(r, t)]} ({op.name}{on}, launch {self.launch[r]})")
        more = f" and {len(live) - 4} more" if len(live) > 4 else ""
        return "deadlock: nothing can run; waiting: " + "; ".join(stuck) + more


def run(plan: Plan, seed: int, launches: int = 2) -> list[str]:
    """Problems of ``launches`` runs of ``plan`` under the random schedule ``seed`` (empty: right)."""
    return _Run(plan, seed, launches).go()

"""Give every op at most one dependency, as the runtimes require (IR -> IR).

An op with ``k > 1`` dependencies gets ``k - 1`` ``nop`` steps in front of it, each carrying one
of them; the op keeps the last. The runtimes attach a nop's dependency to the next real step,
which must itself carry one (it does). Steps shift, so every dependency on the rank is renumbered.
``insert_dependencies`` builds its IR so already (in bulk): this pass leaves that one as it is and
folds an IR read from a file or written by hand.
"""

from __future__ import annotations

from itertools import accumulate, chain, compress, repeat
from operator import attrgetter, sub

from codegen.ir import IR, Dep, Gpu, Op, OpType, Threadblock, evolve

__all__ = ["fold_deps_into_nops"]


def fold_deps_into_nops(ir: IR) -> IR:
    """Move all but one dependency of each op into preceding nops."""
    made: dict[tuple, Op] = {}  # the nops and ops made, by what they are made of (see _shifted)
    return evolve(ir, gpus=tuple(_folded(gpu, made) for gpu in ir.gpus))


def _folded(gpu: Gpu, made: dict[tuple, Op]) -> Gpu:
    """``gpu`` with its extra dependencies in nops: only threadblocks with an op of several shift
    their steps, and only those and the threadblocks with a dependency into one change (the rank
    as it is where none has several). The dependencies' lengths and threadblocks are read through
    ``map``, in C: a million steps at 512 ranks, most in threadblocks that stay as they are."""
    shifts = {}  # threadblock -> per op, the nops in front of it and the ops before it
    for tb in gpu.threadblocks:
        counts = list(map(len, map(_DEPS, tb.ops)))
        if max(counts, default=0) > 1:
            shifts[tb.id] = list(accumulate(map(max, map(sub, counts, repeat(1)), repeat(0))))
    if not shifts:
        return gpu
    return evolve(
        gpu,
        threadblocks=tuple(
            _shifted(tb, shifts, made) if tb.id in shifts or not _untouched(tb, shifts) else tb
            for tb in gpu.threadblocks
        ),
    )


def _untouched(tb: Threadblock, shifts: dict[int, list[int]]) -> bool:
    """Whether no dependency of ``tb``'s ops names a threadblock whose steps shift."""
    return shifts.keys().isdisjoint(map(_TB, chain.from_iterable(map(_DEPS, tb.ops))))


def _shifted(tb: Threadblock, shifts: dict[int, list[int]], made: dict[tuple, Op]) -> Threadblock:
    """``tb`` with each op's dependencies renumbered by ``shifts`` and all but its last in nops
    in front of it (itself where nothing changes). Only the ops with dependencies are visited
    (found through ``compress``, in C: half the steps have none), the runs between them kept as
    slices. Each nop and op is made once per IR, kept in ``made`` by its dependency (a nop) or by
    the id of the op it copies and its dependency: the IR shares one op among the steps written
    alike (``insert_dependencies``) and holds it alive."""
    steps = tb.ops
    ops: list[Op] = []
    kept = 0  # the steps before it are in ops
    for k in compress(range(len(steps)), map(_DEPS, steps)):
        op = steps[k]
        if len(op.deps) == 1:
            d = op.deps[0]
            shift = shifts.get(d.tb)
            if shift is None:
                continue  # as it is (the copy would equal it)
            deps = [(d.tb, d.op + shift[d.op])]
        else:
            deps = [(d.tb, d.op + shifts[d.tb][d.op]) if d.tb in shifts else (d.tb, d.op) for d in op.deps]
        ops.extend(steps[kept:k])
        kept = k + 1
        for d in deps[:-1]:
            nop = made.get(d)
            if nop is None:
                nop = made[d] = Op(OpType.NOP, count=0, deps=(Dep(*d),))
            ops.append(nop)
        key = (id(op), *deps[-1])
        last = made.get(key)
        if last is None:
            last = made[key] = evolve(op, deps=(Dep(*deps[-1]),))
        ops.append(last)
    if not kept:
        return tb
    ops.extend(steps[kept:])
    return evolve(tb, ops=tuple(ops))


_DEPS, _TB = attrgetter("deps"), attrgetter("tb")

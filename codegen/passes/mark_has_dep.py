"""Mark every op some dependency names (IR -> IR).

The runtimes publish a threadblock's progress only after steps with ``hasdep=1``; a step another
threadblock waits for without the mark would never be seen, and the waiter would spin forever.
Marks on steps nobody waits for are removed (each costs a memory fence and a flag store).
"""

from __future__ import annotations

from operator import attrgetter

from codegen.ir import IR, Op, Threadblock, evolve

__all__ = ["mark_has_dep"]


def mark_has_dep(ir: IR) -> IR:
    """``has_dep`` exactly on the ops named by some dependency."""
    gpus = []
    marked: dict[int, Op] = {}  # by the id of an op whose mark changes, its copy (see _marks)
    for gpu in ir.gpus:
        awaited: dict[int, set[int]] = {}  # threadblock -> the indices of its awaited ops
        for tb in gpu.threadblocks:
            for deps in filter(None, map(_DEPS, tb.ops)):  # the ops without any skipped in C
                for d in deps:
                    awaited.setdefault(d.tb, set()).add(d.op)
        tbs = tuple(_marks(tb, awaited.get(tb.id, ()), marked) for tb in gpu.threadblocks)
        gpus.append(evolve(gpu, threadblocks=tbs))
    return evolve(ir, gpus=tuple(gpus))


def _marks(tb: Threadblock, awaited: set[int] | tuple, marked: dict[int, Op]) -> Threadblock:
    """``tb`` with ``has_dep`` on the ops at ``awaited`` (itself where no mark changes: every
    threadblock of a compiled IR, whose ops ``insert_dependencies`` marks as it makes them). The
    marks are read through ``map`` and compared with those wanted as lists, in C: no Python step
    per op unless one changes."""
    ops = tb.ops
    marks = list(map(_HAS_DEP, ops))
    wanted = [False] * len(ops)
    for k in awaited:
        if 0 <= k < len(ops):
            wanted[k] = True
    if marks == wanted:
        return tb
    return evolve(
        tb,
        ops=tuple(
            op if mark == want else _flipped(op, marked)
            for op, mark, want in zip(ops, marks, wanted, strict=True)
        ),
    )


def _flipped(op: Op, marked: dict[int, Op]) -> Op:
    """``op`` with its mark changed, copied once per pass, not once per step: the IR shares one op
    among the steps written alike (``insert_dependencies``); ``marked`` holds the copies by the
    op's id (the IR holds it alive)."""
    copy = marked.get(id(op))
    if copy is None:
        copy = marked[id(op)] = evolve(op, has_dep=not op.has_dep)
    return copy


_DEPS, _HAS_DEP = attrgetter("deps"), attrgetter("has_dep")

"""Mark every op some dependency names (IR -> IR).

The runtimes publish a threadblock's progress only after steps with ``hasdep=1``; a step another
threadblock waits for without the mark would never be seen, and the waiter would spin forever.
Marks on steps nobody waits for are removed (each costs a memory fence and a flag store).
"""

from __future__ import annotations

from codegen.ir import IR, Op, Threadblock, evolve

__all__ = ["mark_has_dep"]


def mark_has_dep(ir: IR) -> IR:
    """``has_dep`` exactly on the ops named by some dependency."""
    gpus = []
    for gpu in ir.gpus:
        awaited: dict[int, set[int]] = {}  # threadblock -> the indices of its awaited ops
        for tb in gpu.threadblocks:
            for op in tb.ops:
                if op.deps:
                    for d in op.deps:
                        awaited.setdefault(d.tb, set()).add(d.op)
        tbs = tuple(_marks(tb, awaited.get(tb.id, ())) for tb in gpu.threadblocks)
        gpus.append(evolve(gpu, threadblocks=tbs))
    return evolve(ir, gpus=tuple(gpus))


def _marks(tb: Threadblock, awaited: set[int] | tuple) -> Threadblock:
    """``tb`` with ``has_dep`` on the ops at ``awaited`` (itself where no mark changes: most
    threadblocks at 512 ranks, each op looked at once more than an awaited set needs)."""
    if not awaited and not any(op.has_dep for op in tb.ops):
        return tb
    return evolve(tb, ops=tuple(_marked(op, k in awaited) for k, op in enumerate(tb.ops)))


def _marked(op: Op, has_dep: bool) -> Op:
    """``op`` with ``has_dep`` (itself where it has it already: half a million copies at 512 ranks)."""
    return op if op.has_dep == has_dep else evolve(op, has_dep=has_dep)

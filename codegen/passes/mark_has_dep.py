"""Mark every op some dependency names (IR -> IR).

The runtimes publish a threadblock's progress only after steps with ``hasdep=1``; a step another
threadblock waits for without the mark would never be seen, and the waiter would spin forever.
Marks on steps nobody waits for are removed (each costs a memory fence and a flag store).
"""

from __future__ import annotations

from codegen.ir import IR, Op, evolve

__all__ = ["mark_has_dep"]


def mark_has_dep(ir: IR) -> IR:
    """``has_dep`` exactly on the ops named by some dependency."""
    gpus = []
    for gpu in ir.gpus:
        awaited = {(d.tb, d.op) for tb in gpu.threadblocks for op in tb.ops for d in op.deps}
        tbs = tuple(
            evolve(tb, ops=tuple(_marked(op, (tb.id, k) in awaited) for k, op in enumerate(tb.ops)))
            for tb in gpu.threadblocks
        )
        gpus.append(evolve(gpu, threadblocks=tbs))
    return evolve(ir, gpus=tuple(gpus))


def _marked(op: Op, has_dep: bool) -> Op:
    """``op`` with ``has_dep`` (itself where it has it already: half a million copies at 512 ranks)."""
    return op if op.has_dep == has_dep else evolve(op, has_dep=has_dep)

"""Mark every op some dependency names (IR -> IR).

The runtimes publish a threadblock's progress only after steps with ``hasdep=1``; a step another
threadblock waits for without the mark would never be seen, and the waiter would spin forever.
Marks on steps nobody waits for are removed (each costs a memory fence and a flag store).
"""

from __future__ import annotations

from operator import attrgetter

from codegen.ir import IR, Threadblock, evolve

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
    threadblocks at 512 ranks; an op is copied only where its mark changes, half a million
    copies saved there; the marks read through ``map``, no Python call per op)."""
    ops = tb.ops
    if not awaited and not any(map(_HAS_DEP, ops)):
        return tb
    return evolve(
        tb,
        ops=tuple(
            op if op.has_dep == (k in awaited) else evolve(op, has_dep=k in awaited) for k, op in enumerate(ops)
        ),
    )


_HAS_DEP = attrgetter("has_dep")

"""Give every op at most one dependency, as the runtimes require (IR -> IR).

An op with ``k > 1`` dependencies gets ``k - 1`` ``nop`` steps in front of it, each carrying one
of them; the op keeps the last. The runtimes attach a nop's dependency to the next real step,
which must itself carry one (it does). Steps shift, so every dependency on the rank is renumbered.
"""

from __future__ import annotations

from codegen.ir import IR, Dep, Op, OpType, evolve

__all__ = ["fold_deps_into_nops"]


def fold_deps_into_nops(ir: IR) -> IR:
    """Move all but one dependency of each op into preceding nops."""
    gpus = []
    for gpu in ir.gpus:
        if all(len(op.deps) <= 1 for tb in gpu.threadblocks for op in tb.ops):
            gpus.append(gpu)  # nothing to fold, no step moves: the rank as it is
            continue
        new_pos: dict[tuple[int, int], int] = {}
        for tb in gpu.threadblocks:
            at = 0
            for k, op in enumerate(tb.ops):
                at += max(len(op.deps) - 1, 0)
                new_pos[(tb.id, k)] = at
                at += 1

        tbs = []
        for tb in gpu.threadblocks:
            ops: list[Op] = []
            for op in tb.ops:
                if len(op.deps) <= 1 and all(new_pos[(d.tb, d.op)] == d.op for d in op.deps):
                    ops.append(op)  # as it is (the copy would equal it)
                    continue
                deps = [Dep(d.tb, new_pos[(d.tb, d.op)]) for d in op.deps]
                ops.extend(Op(OpType.NOP, count=0, deps=(d,)) for d in deps[:-1])
                ops.append(evolve(op, deps=tuple(deps[-1:])))
            tbs.append(evolve(tb, ops=tuple(ops)))
        gpus.append(evolve(gpu, threadblocks=tuple(tbs)))
    return evolve(ir, gpus=tuple(gpus))

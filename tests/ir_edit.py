"""Editing IRs in tests: break one op on purpose."""

from __future__ import annotations

import dataclasses

from codegen.ir import IR


def edit_op(ir: IR, rank: int, tb: int, index: int, **changes) -> IR:
    """``ir`` with op ``index`` of threadblock ``tb`` on ``rank`` replaced by a copy with ``changes``."""
    gpu = ir.gpus[rank]
    block = gpu.threadblock(tb)
    ops = list(block.ops)
    ops[index] = dataclasses.replace(ops[index], **changes)
    blocks = tuple(dataclasses.replace(b, ops=tuple(ops)) if b.id == tb else b for b in gpu.threadblocks)
    gpus = list(ir.gpus)
    gpus[rank] = dataclasses.replace(gpu, threadblocks=blocks)
    return dataclasses.replace(ir, gpus=tuple(gpus))

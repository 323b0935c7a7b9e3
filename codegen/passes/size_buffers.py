"""Size every rank's buffers (IR -> IR).

Input and output are the whole buffers of the collective (the research runtime rejects other
sizes: ``i_chunks * (ngpus for allgather) == nchunksperloop``), derived from ``nchunksperloop``;
scratch is the highest scratch chunk any op touches, plus one. A collective we do not know
(``custom``) gets, for every buffer, the highest chunk used plus one.
"""

from __future__ import annotations

from codegen.ir import IR, Buffer, Gpu, evolve
from codegen.rules import buffer_sizes

__all__ = ["size_buffers"]


def size_buffers(ir: IR) -> IR:
    """Whole-buffer input/output sizes; scratch as far as it is used."""
    known = buffer_sizes(ir.collective, ir.num_ranks, ir.nchunksperloop)
    gpus = []
    for gpu in ir.gpus:
        used = _used(gpu)
        inputs, outputs = known if known is not None else (used[Buffer.INPUT], used[Buffer.OUTPUT])
        gpus.append(
            evolve(gpu, input_chunks=inputs, output_chunks=outputs, scratch_chunks=used[Buffer.SCRATCH])
        )
    return evolve(ir, gpus=tuple(gpus))


def _used(gpu: Gpu) -> dict[Buffer, int]:
    """Per buffer the highest chunk an op of ``gpu`` touches, plus one (0: none). Each op's operand
    ends are compared with the buffer's highest so far, in locals (a million ops per IR at 512
    ranks, and the compiler sizes one IR per width and layout it tries)."""
    used = dict.fromkeys(Buffer, 0)
    for tb in gpu.threadblocks:
        for op in tb.ops:
            src, dst = op.src, op.dst
            if src is not None:
                end = src.index + op.count
                if end > used[src.buffer]:
                    used[src.buffer] = end
            if dst is not None:
                end = dst.index + op.count
                if end > used[dst.buffer]:
                    used[dst.buffer] = end
    return used

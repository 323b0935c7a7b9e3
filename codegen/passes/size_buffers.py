"""Size every rank's buffers (IR -> IR).

Input and output are the whole buffers of the collective (the research runtime rejects other
sizes: ``i_chunks * (ngpus for allgather) == nchunksperloop``), derived from ``nchunksperloop``;
scratch is the highest scratch chunk any op touches, plus one. A collective we do not know
(``custom``) gets, for every buffer, the highest chunk used plus one.
"""

from __future__ import annotations

from codegen.ir import IR, Buffer, evolve
from codegen.rules import buffer_sizes

__all__ = ["size_buffers"]


def size_buffers(ir: IR) -> IR:
    """Whole-buffer input/output sizes; scratch as far as it is used."""
    known = buffer_sizes(ir.collective, ir.num_ranks, ir.nchunksperloop)
    gpus = []
    for gpu in ir.gpus:
        used = dict.fromkeys(Buffer, 0)
        for tb in gpu.threadblocks:
            for op in tb.ops:
                if op.src is not None and op.src.index + op.count > used[op.src.buffer]:
                    used[op.src.buffer] = op.src.index + op.count
                if op.dst is not None and op.dst.index + op.count > used[op.dst.buffer]:
                    used[op.dst.buffer] = op.dst.index + op.count
        inputs, outputs = known if known is not None else (used[Buffer.INPUT], used[Buffer.OUTPUT])
        gpus.append(
            evolve(gpu, input_chunks=inputs, output_chunks=outputs, scratch_chunks=used[Buffer.SCRATCH])
        )
    return evolve(ir, gpus=tuple(gpus))

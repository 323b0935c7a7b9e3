"""Size every rank's buffers (IR -> IR).

Input and output are the whole buffers of the collective (the research runtime rejects other
sizes: ``i_chunks * (ngpus for allgather) == nchunksperloop``), derived from ``nchunksperloop``;
scratch is the highest scratch chunk any op touches, plus one. A collective we do not know
(``custom``) gets, for every buffer, the highest chunk used plus one.
"""

from __future__ import annotations

from dataclasses import replace

from codegen.ir import IR, Buffer

__all__ = ["buffer_sizes", "size_buffers"]

_SMALL_INPUT = frozenset({"allgather", "gather"})
_SMALL_OUTPUT = frozenset({"reducescatter", "scatter"})
_KNOWN = frozenset({"allreduce", "alltoall", "broadcast", "reduce"}) | _SMALL_INPUT | _SMALL_OUTPUT


def buffer_sizes(collective: str, num_ranks: int, nchunksperloop: int) -> tuple[int, int] | None:
    """(input chunks, output chunks) of a known collective, else None."""
    if collective not in _KNOWN:
        return None
    small = nchunksperloop // num_ranks
    return (
        small if collective in _SMALL_INPUT else nchunksperloop,
        small if collective in _SMALL_OUTPUT else nchunksperloop,
    )


def size_buffers(ir: IR) -> IR:
    """Whole-buffer input/output sizes; scratch as far as it is used."""
    known = buffer_sizes(ir.collective, ir.num_ranks, ir.nchunksperloop)
    gpus = []
    for gpu in ir.gpus:
        used = {b: 0 for b in Buffer}
        for tb in gpu.threadblocks:
            for op in tb.ops:
                for ref in (op.src, op.dst):
                    if ref is not None:
                        used[ref.buffer] = max(used[ref.buffer], ref.index + op.count)
        inputs, outputs = known if known is not None else (used[Buffer.INPUT], used[Buffer.OUTPUT])
        gpus.append(
            replace(gpu, input_chunks=inputs, output_chunks=outputs, scratch_chunks=used[Buffer.SCRATCH])
        )
    return replace(ir, gpus=tuple(gpus))

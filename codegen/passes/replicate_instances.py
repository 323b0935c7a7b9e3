"""Replicate the program over ``instances`` interleaved slices of every chunk (chunk DAG -> chunk DAG).

Every chunk ``x`` of every buffer becomes ``instances`` chunks ``x * instances + i``; instance ``i``
runs the whole program on its slice ``i``. The mapping is the same for every buffer, so buffer
layouts (allgather's output blocks, in-place aliasing) keep their meaning. An op of several
chunks becomes one op per chunk, since an instance's chunks are no longer adjacent. Each op
carries its instance, so channel assignment gives every instance its own channels.
"""

from __future__ import annotations

from dataclasses import replace

from codegen.chunk_dag import ChunkDAG, ChunkOp, Loc, build_chunk_dag
from codegen.errors import CodegenError

__all__ = ["replicate_instances"]


def _slice(loc: Loc, k: int, instances: int, i: int) -> Loc:
    return Loc(loc.rank, loc.buffer, (loc.index + k) * instances + i)


def replicate_instances(dag: ChunkDAG, instances: int = 1) -> ChunkDAG:
    """Replicate the program over ``instances`` interleaved chunk slices."""
    if instances < 1:
        raise CodegenError(f"{dag.info.name}: instances: expected at least 1, got {instances}")
    if instances == 1:
        return dag
    if dag.info.instances != 1:
        raise CodegenError(f"{dag.info.name}: the program is already replicated {dag.info.instances} times")
    ops = []
    for op in dag.ops:
        for i in range(instances):
            for k in range(op.count):
                ops.append(
                    ChunkOp(
                        op.kind,
                        _slice(op.src, k, instances, i),
                        _slice(op.dst, k, instances, i),
                        1,
                        None if op.operand is None else _slice(op.operand, k, instances, i),
                        op.sendtb,
                        op.recvtb,
                        op.channel,
                        i,
                        op.time,
                    )
                )
    info = dag.info
    info = replace(
        info,
        input_chunks=info.input_chunks * instances,
        output_chunks=info.output_chunks * instances,
        scratch_chunks=tuple(s * instances for s in info.scratch_chunks),
        nchunksperloop=info.nchunksperloop * instances,
        aliases=tuple(None if a is None else replace(a, offset=a.offset * instances) for a in info.aliases),
        instances=instances,
    )
    return build_chunk_dag(info, tuple(ops))

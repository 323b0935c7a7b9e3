"""Execute an IR on random inputs and check it against the NumPy reference of its collective."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from codegen.ir import IR
from runtime.errors import ExecutionError
from runtime.numpy.executor import NumpyExecutor
from runtime.program import collective_of
from runtime.reference import check_outputs, executor_inputs, reference
from synth.collectives import Collective

__all__ = ["RunResult", "execute", "run"]


@dataclass(frozen=True)
class RunResult:
    """One checked execution. ``size_bytes`` and ``count`` as nccl-tests reports them (the larger
    buffer; ``count`` its elements); ``checked`` is False only for ``custom`` IRs with no declared
    collective, or ``check=False``."""

    ir_name: str
    collective: str
    num_ranks: int
    size_bytes: int
    count: int
    dtype: str
    op: str
    inplace: bool
    chunk_elems: int
    tiles: int
    max_count: int
    calls: int
    bytes_written: int
    wall_s: float
    checked: bool

    def to_json(self) -> dict:
        return asdict(self)


def run(
    ir: IR,
    size_bytes: int,
    dtype: str | np.dtype = "float32",
    op: str = "sum",
    *,
    inplace: bool = False,
    seed: int = 0,
    check: bool = True,
    tile_bytes: int | None = None,
    fifo_depth: int | None = None,
    schedule_seed: int | None = None,
    declared: Collective | None = None,
    max_memory: int | str | None = None,
) -> RunResult:
    """Run ``ir`` once at ``size_bytes`` (nccl-tests' size) on seeded random inputs and compare every
    output with the NumPy reference; raises ``ExecutionMismatch``, ``DeadlockError``,
    ``UninitializedRead`` or ``ExecutionError`` (``MemoryLimitError`` before allocating above
    ``max_memory``). A ``custom`` IR is compared with the collective ``declared`` for it; without
    one its outputs are not compared (``checked`` False).

    >>> from codegen import compile_algorithm
    >>> from synth.baselines import make_baseline
    >>> from synth.collectives import make_collective
    >>> from topologies import load
    >>> ring4 = load("ring:4")
    >>> ir = compile_algorithm(make_baseline("ring", ring4, make_collective("allgather", 4)), ring4)
    >>> result = run(ir, 4096, "float32")
    >>> result.checked, result.count, result.chunk_elems
    (True, 1024, 256)
    """
    ex = NumpyExecutor(
        ir,
        size_bytes,
        dtype,
        op,
        inplace=inplace,
        tile_bytes=tile_bytes,
        fifo_depth=fifo_depth,
        schedule_seed=schedule_seed,
        declared=declared,
        max_memory=max_memory,
    )
    coll = ex.collective
    inputs = executor_inputs(ex, seed)
    ex.load(inputs)
    start = time.perf_counter()
    stats = ex.execute()
    wall = time.perf_counter() - start
    checked = check and coll is not None
    if checked:
        check_outputs(reference(coll, inputs, ex.chunk_elems, ex.op), ex.outputs(), ir.name)
    return RunResult(
        ir_name=ir.name,
        collective=ir.collective,
        num_ranks=ir.num_ranks,
        size_bytes=size_bytes,
        count=size_bytes // ex.dtype.itemsize,
        dtype=ex.dtype.name,
        op=ex.op,
        inplace=inplace,
        chunk_elems=ex.chunk_elems,
        tiles=ex.layout.ntiles,
        max_count=ex.layout.max_count,
        calls=stats.calls,
        bytes_written=stats.bytes_written,
        wall_s=wall,
        checked=checked,
    )


def execute(
    ir: IR,
    inputs: Sequence[np.ndarray],
    op: str = "sum",
    *,
    inplace: bool = False,
    tile_bytes: int | None = None,
    fifo_depth: int | None = None,
    schedule_seed: int | None = None,
    declared: Collective | None = None,
) -> list[np.ndarray]:
    """Run ``ir`` on the given per-rank inputs (1-D, one dtype) and return every rank's output
    (``declared``: the collective of a ``custom`` IR, which sizes its buffers)."""
    arrays = [np.asarray(x).reshape(-1) for x in inputs]
    if not arrays:
        return []
    dtype = arrays[0].dtype
    elems = arrays[0].size
    in_chunks = _input_chunks(ir, declared)
    if in_chunks < 1 or elems % in_chunks:
        raise ExecutionError(f"{ir.name}: inputs of {elems} elements do not split into {in_chunks} chunks")
    size = elems // in_chunks * ir.nchunksperloop * dtype.itemsize
    ex = NumpyExecutor(
        ir,
        size,
        dtype,
        op,
        inplace=inplace,
        tile_bytes=tile_bytes,
        fifo_depth=fifo_depth,
        schedule_seed=schedule_seed,
        declared=declared,
    )
    ex.load(arrays)
    ex.execute()
    return [out.copy() for out in ex.outputs()]


def _input_chunks(ir: IR, declared: Collective | None) -> int:
    coll = collective_of(ir, declared)
    if coll is not None:
        return coll.input_chunks
    return max(g.input_chunks for g in ir.gpus)

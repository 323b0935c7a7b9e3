"""Execute an IR on random inputs and check it against the NumPy reference of its collective."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TypedDict, Unpack

import numpy as np

from codegen.ir import IR
from runtime.backends import NumpyTrial
from runtime.errors import ExecutionError
from runtime.numpy.executor import NumpyExecutor
from runtime.program import collective_of
from synth.collectives import Collective

__all__ = ["ExecutorOptions", "RunResult", "execute", "run"]


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


class ExecutorOptions(TypedDict, total=False):
    """How :func:`run` and :func:`execute` call the :class:`NumpyExecutor` (its keywords, passed on):
    ``inplace`` (default False), ``tile_bytes`` and ``fifo_depth`` (default: the IR protocol's),
    ``schedule_seed`` (another interleaving), ``declared`` (the expected result of a ``custom`` IR)
    and ``max_memory`` (the host-memory limit)."""

    inplace: bool
    tile_bytes: int | None
    fifo_depth: int | None
    schedule_seed: int | None
    declared: Collective | None
    max_memory: int | str | None


def run(
    ir: IR,
    size_bytes: int,
    dtype: str | np.dtype = "float32",
    op: str = "sum",
    *,
    seed: int = 0,
    check: bool = True,
    **options: Unpack[ExecutorOptions],
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
    ex = NumpyExecutor(ir, size_bytes, dtype, op, **options)
    trial = NumpyTrial(ex, seed)
    trial.reset()
    wall_us = trial.run()
    checked = check and trial.check()
    return RunResult(
        ir_name=ir.name,
        collective=ir.collective,
        num_ranks=ir.num_ranks,
        size_bytes=size_bytes,
        count=size_bytes // ex.dtype.itemsize,
        dtype=ex.dtype.name,
        op=ex.op,
        inplace=ex.inplace,
        chunk_elems=ex.chunk_elems,
        tiles=ex.layout.ntiles,
        max_count=ex.layout.max_count,
        calls=trial.stats.calls,
        bytes_written=trial.stats.bytes_written,
        wall_s=wall_us / 1e6,
        checked=checked,
    )


def execute(
    ir: IR, inputs: Sequence[np.ndarray], op: str = "sum", **options: Unpack[ExecutorOptions]
) -> list[np.ndarray]:
    """Run ``ir`` on the given per-rank inputs (1-D, one dtype) and return every rank's output
    (``declared``: the collective of a ``custom`` IR, which sizes its buffers)."""
    arrays = [np.asarray(x).reshape(-1) for x in inputs]
    if not arrays:
        return []
    dtype = arrays[0].dtype
    elems = arrays[0].size
    in_chunks = _input_chunks(ir, options.get("declared"))
    if in_chunks < 1 or elems % in_chunks:
        raise ExecutionError(f"{ir.name}: inputs of {elems} elements do not split into {in_chunks} chunks")
    size = elems // in_chunks * ir.nchunksperloop * dtype.itemsize
    ex = NumpyExecutor(ir, size, dtype, op, **options)
    ex.load(arrays)
    ex.execute()
    return [out.copy() for out in ex.outputs()]


def _input_chunks(ir: IR, declared: Collective | None) -> int:
    coll = collective_of(ir, declared)
    if coll is not None:
        return coll.input_chunks
    return max(g.input_chunks for g in ir.gpus)

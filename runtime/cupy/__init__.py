"""The CuPy GPU executor: one persistent kernel per device interprets the IR with peer-to-peer FIFOs.

Importing this package never imports CuPy (so ``import runtime`` works without a GPU); the executor
does, and raises :class:`~runtime.cupy.executor.GpuUnavailable` with a clear message when CuPy or a
GPU is missing. :func:`run` executes an IR once on seeded random inputs and checks the outputs
against the NumPy reference and, bit for bit, against the NumPy executor for integer dtypes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from codegen.ir import IR

__all__ = ["GpuRunResult", "run"]


@dataclass(frozen=True)
class GpuRunResult:
    ir_name: str
    size_bytes: int
    dtype: str
    op: str
    inplace: bool
    time_us: float
    checked: bool
    matches_numpy: bool | None
    """Integer dtypes: outputs equal the NumPy executor's bit for bit (None for floats)."""

    def to_json(self) -> dict:
        return asdict(self)


def run(
    ir: IR,
    size_bytes: int,
    dtype: str = "float32",
    op: str = "sum",
    *,
    inplace: bool = False,
    seed: int = 0,
    check: bool = True,
    devices: list[int] | None = None,
    tile_bytes: int | None = None,
    timeout_s: float = 10.0,
    declared=None,
) -> GpuRunResult:
    """Run ``ir`` once on the GPU(s); raises ``ExecutionMismatch`` or ``GpuExecutionError``.
    ``declared``: the expected result of a ``custom`` IR (see ``runtime.program.collective_of``)."""
    from runtime.cupy.executor import CupyExecutor
    from runtime.numpy import execute
    from runtime.reference import check_outputs, executor_inputs, reference

    ex = CupyExecutor(
        ir,
        size_bytes,
        dtype,
        op,
        inplace=inplace,
        devices=devices,
        tile_bytes=tile_bytes,
        timeout_s=timeout_s,
        declared=declared,
    )
    coll = ex.collective
    inputs = executor_inputs(ex, seed)
    ex.load(inputs)
    time_us = ex.time_us(repeats=1, warmup=0)[0]
    outputs = ex.outputs()
    checked = check and coll is not None
    if checked:
        check_outputs(reference(coll, inputs, ex.chunk_elems, ex.op), outputs, ir.name)
    matches = None
    if check and ex.dtype.kind in "iu":
        expected = execute(ir, inputs, ex.op, inplace=inplace, tile_bytes=tile_bytes, declared=declared)
        matches = all(np.array_equal(a, b) for a, b in zip(outputs, expected, strict=True))
    return GpuRunResult(ir.name, size_bytes, ex.dtype.name, ex.op, inplace, time_us, checked, matches)

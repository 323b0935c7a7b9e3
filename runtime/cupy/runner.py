"""Execute an IR once on the GPU(s) on seeded random inputs and check it against the NumPy reference
and, bit for bit, against the NumPy executor for integer dtypes."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from codegen.ir import IR
from runtime.cupy.backend import CupyTrial
from runtime.cupy.executor import CupyExecutor
from synth.collectives import Collective

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
    declared: Collective | None = None,
) -> GpuRunResult:
    """Run ``ir`` once on the GPU(s); raises ``ExecutionMismatch`` or ``GpuExecutionError``.
    ``declared``: the expected result of a ``custom`` IR (see ``runtime.program.collective_of``)."""
    from runtime.numpy import execute

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
    trial = CupyTrial(ex, seed)
    trial.reset()
    time_us = trial.run()
    checked = check and trial.check()
    matches = None
    if check and ex.dtype.kind in "iu":
        expected = execute(ir, trial.inputs, ex.op, inplace=inplace, tile_bytes=tile_bytes, declared=declared)
        matches = all(np.array_equal(a, b) for a, b in zip(ex.outputs(), expected, strict=True))
    return GpuRunResult(ir.name, size_bytes, ex.dtype.name, ex.op, inplace, time_us, checked, matches)

"""Execute an IR once on the GPU(s) on seeded random inputs and check it against the NumPy reference
and, bit for bit, against the NumPy executor for integer dtypes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TypedDict, Unpack

import numpy as np

from codegen.ir import IR
from runtime.cupy.backend import CupyTrial
from runtime.cupy.executor import CupyExecutor
from synth.collectives import Collective

__all__ = ["GpuOptions", "GpuRunResult", "run"]


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


class GpuOptions(TypedDict, total=False):
    """How :func:`run` calls the :class:`CupyExecutor` (its keywords, passed on): ``inplace``
    (default False), ``devices`` (default: every visible GPU), ``tile_bytes`` (default: the IR
    protocol's), ``timeout_s`` (a wait longer than this is an error) and ``declared`` (the expected
    result of a ``custom`` IR, see ``runtime.program.collective_of``)."""

    inplace: bool
    devices: list[int] | None
    tile_bytes: int | None
    timeout_s: float
    declared: Collective | None


def run(
    ir: IR,
    size_bytes: int,
    dtype: str = "float32",
    op: str = "sum",
    *,
    seed: int = 0,
    check: bool = True,
    **options: Unpack[GpuOptions],
) -> GpuRunResult:
    """Run ``ir`` once on the GPU(s); raises ``ExecutionMismatch`` or ``GpuExecutionError``."""
    from runtime.numpy import execute

    ex = CupyExecutor(ir, size_bytes, dtype, op, **options)
    trial = CupyTrial(ex, seed)
    trial.reset()
    time_us = trial.run()
    checked = check and trial.check()
    matches = None
    if check and ex.dtype.kind in "iu":
        same = {key: options[key] for key in ("tile_bytes", "declared") if key in options}
        expected = execute(ir, trial.inputs, ex.op, inplace=ex.inplace, **same)
        matches = all(np.array_equal(a, b) for a, b in zip(ex.outputs(), expected, strict=True))
    return GpuRunResult(ir.name, size_bytes, ex.dtype.name, ex.op, ex.inplace, time_us, checked, matches)

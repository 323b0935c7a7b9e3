"""What every executor of the IR shares, so that they validate and size a call the same way.

An executor (``runtime.numpy.NumpyExecutor``, ``runtime.cupy.executor.CupyExecutor``) runs one IR
at one size, element type and reduction: it loads the IR as the MSCCL runtime would
(``runtime.program.build_program``; ``declared`` is the expected result of a ``custom`` IR), sizes
its chunks for nccl-tests' size, and then holds its own buffers: ``load`` puts one input per rank
in place, a run executes the collective, ``outputs`` reads every rank's output back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from codegen.ir import IR, Buffer
from runtime.program import Program, build_program, chunk_elems
from runtime.reference import parse_dtype, parse_op

if TYPE_CHECKING:
    from synth.collectives import Collective

__all__ = ["Executor"]


class Executor:
    """The program, dtype, reduction, placement and chunk size of one call."""

    def __init__(
        self,
        ir: IR,
        size_bytes: int,
        dtype: str | np.dtype,
        op: str,
        inplace: bool,
        declared: Collective | None,
    ) -> None:
        self.ir = ir
        self.program: Program = build_program(ir, declared)
        self.dtype = parse_dtype(dtype)
        self.op = parse_op(op)
        self.check_dtype()
        self.inplace = inplace
        self.size_bytes = size_bytes
        self.chunk_elems = chunk_elems(ir, size_bytes, self.dtype)

    def check_dtype(self) -> None:
        """Raise ``ExecutionError`` for an element type this executor cannot run (every one here)."""

    @property
    def collective(self) -> Collective | None:
        return self.program.collective

    def input_elems(self, rank: int) -> int:
        """Elements of ``rank``'s input buffer."""
        return self.program.chunks[rank][Buffer.INPUT] * self.chunk_elems

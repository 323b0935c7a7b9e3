"""The CuPy GPU executor: one persistent kernel per device interprets the IR with peer-to-peer FIFOs.

Importing this package never imports CuPy (so ``import runtime`` works without a GPU, and the
backend registry stays light); the executor does, and raises
:class:`~runtime.cupy.executor.GpuUnavailable` with a clear message when CuPy or a GPU is missing.
:func:`run` (``runtime.cupy.runner``) executes an IR once on seeded random inputs and checks the
outputs against the NumPy reference and, bit for bit, against the NumPy executor for integer dtypes.
"""

from __future__ import annotations

from common.lazy import lazy_exports

__all__ = ["GpuRunResult", "run"]

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "runtime.cupy.runner"))

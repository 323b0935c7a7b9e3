"""The ``cupy`` benchmark backend: the GPU executor timed with CUDA events, checked like NumPy's.

Light to import, as the registry must be (``runtime.backends``): CuPy and the executor are
imported when a trial is prepared or an IR is run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtime.backends import ExecutorBackend, ExecutorTrial, ThreadblockBound, register_backend

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["CupyBackend", "CupyTrial"]


class CupyTrial(ExecutorTrial):
    """Timed by CUDA events around one launch."""

    def run(self) -> float:
        return self.ex.time_us(repeats=1, warmup=0)[0]


@register_backend
class CupyBackend(ExecutorBackend):
    name = "cupy"
    description = "the CuPy GPU executor (peer-to-peer kernels), timed with CUDA events"
    timing = "device"
    checks = True
    trial = CupyTrial

    def __init__(
        self, devices: list[int] | None = None, tile_bytes: int | None = None, seed: int = 0
    ) -> None:
        super().__init__(seed, devices=devices, tile_bytes=tile_bytes)

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("cupy") is not None

    def device(self, topology: Topology | None) -> str:
        import cupy

        names = {
            cupy.cuda.runtime.getDeviceProperties(d)["name"].decode()
            for d in range(cupy.cuda.runtime.getDeviceCount())
        }
        return f"CuPy {cupy.__version__} on {', '.join(sorted(names))}"

    def rank_threadblocks(self, num_ranks: int, dtype: str, op: str) -> ThreadblockBound | None:
        """Every rank of an IR runs on these GPUs at once (several on one GPU where there are fewer
        GPUs than ranks), each device's blocks all resident: its capacity over its ranks. None for
        a dtype the kernel lacks: the executor refuses the call, as it does for an IR file."""
        from runtime.cupy.executor import DTYPES, threadblock_bound

        if dtype not in DTYPES:
            return None
        bound = threadblock_bound(num_ranks, dtype, op, self.options.get("devices"))
        return ThreadblockBound(bound.threadblocks, bound.describe())

    def executor(self) -> Callable[..., Any]:
        from runtime.cupy.executor import CupyExecutor

        return CupyExecutor

    def runner(self) -> Callable[..., Any]:
        from runtime.cupy.runner import run

        return run

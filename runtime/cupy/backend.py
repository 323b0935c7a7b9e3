"""The ``cupy`` benchmark backend: the GPU executor timed with CUDA events, checked like NumPy's."""

from __future__ import annotations

import importlib.util

from codegen.ir import IR
from runtime.bench import Backend, BenchCase, ExecutorTrial, Trial, register_backend
from topologies.model import Topology

__all__ = ["CupyBackend"]


class _CupyTrial(ExecutorTrial):
    def run(self) -> float:
        return self.ex.time_us(repeats=1, warmup=0)[0]


@register_backend
class CupyBackend(Backend):
    name = "cupy"
    description = "the CuPy GPU executor (peer-to-peer kernels), timed with CUDA events"
    timing = "device"
    checks = True

    def __init__(
        self, devices: list[int] | None = None, tile_bytes: int | None = None, seed: int = 0
    ) -> None:
        self.devices, self.tile_bytes, self.seed = devices, tile_bytes, seed

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

    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None) -> Trial:
        from runtime.cupy.executor import CupyExecutor

        ex = CupyExecutor(
            ir,
            case.size_bytes,
            case.dtype,
            case.op,
            inplace=case.inplace,
            devices=self.devices,
            tile_bytes=self.tile_bytes,
            declared=case.declared,
        )
        return _CupyTrial(ex, self.seed)

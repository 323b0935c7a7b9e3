"""The ``cupy`` benchmark backend: the GPU executor timed with CUDA events, checked like NumPy's."""

from __future__ import annotations

import importlib.util

from codegen.ir import IR
from runtime.bench import Backend, BenchCase, Trial, register_backend
from runtime.reference import check_outputs, make_inputs, reference
from topologies.model import Topology

__all__ = ["CupyBackend"]


class _CupyTrial(Trial):
    def __init__(self, ex, seed: int) -> None:
        self.ex = ex
        coll = ex.collective
        self.inputs = make_inputs(coll, ex.chunk_elems, ex.dtype, ex.op, seed) if coll is not None else None
        self._reference = None

    def reset(self) -> None:
        if self.inputs is not None:
            self.ex.load(self.inputs)

    def run(self) -> float:
        return self.ex.time_us(repeats=1, warmup=0)[0]

    def check(self) -> None:
        coll = self.ex.collective
        if coll is None:
            return
        if self._reference is None:
            self._reference = reference(coll, self.inputs, self.ex.chunk_elems, self.ex.op)
        check_outputs(self._reference, self.ex.outputs(), self.ex.ir.name)


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
        )
        return _CupyTrial(ex, self.seed)

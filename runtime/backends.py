"""The benchmark backends that need no GPU: ``numpy`` (wall-clock time of the reference executor,
with its check; ``max_memory`` its host-memory limit) and ``sim`` (the alpha-beta timing simulator
on a topology: no data, so no memory limit and nothing to check)."""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from codegen.ir import IR
from runtime.bench import Backend, BenchCase, ExecutorTrial, Trial, register_backend
from runtime.numpy.executor import NumpyExecutor
from runtime.sim import simulate
from topologies.model import Topology

__all__ = ["NumpyBackend", "SimBackend"]


class _NumpyTrial(ExecutorTrial):
    def run(self) -> float:
        start = time.perf_counter()
        self.ex.execute()
        return (time.perf_counter() - start) * 1e6


@register_backend
class NumpyBackend(Backend):
    name = "numpy"
    description = "the NumPy reference executor on this CPU (every rank in one process)"
    timing = "wall"
    checks = True

    def __init__(
        self,
        tile_bytes: int | None = None,
        fifo_depth: int | None = None,
        seed: int = 0,
        max_memory: int | str | None = None,
    ) -> None:
        self.tile_bytes, self.fifo_depth, self.seed = tile_bytes, fifo_depth, seed
        self.max_memory = max_memory

    def device(self, topology: Topology | None) -> str:
        cpu = platform.processor() or platform.machine()
        return f"numpy {np.__version__}, {os.cpu_count()} CPU cores ({cpu})"

    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None) -> Trial:
        ex = NumpyExecutor(
            ir,
            case.size_bytes,
            case.dtype,
            case.op,
            inplace=case.inplace,
            tile_bytes=self.tile_bytes,
            fifo_depth=self.fifo_depth,
            declared=case.declared,
            max_memory=self.max_memory,
        )
        return _NumpyTrial(ex, self.seed)


class _SimTrial(Trial):
    def __init__(self, ir: IR, topology: Topology, size: int, tile_bytes: int | None, depth: int | None):
        self.args = (ir, topology, size)
        self.kwargs = {"tile_bytes": tile_bytes, "fifo_depth": depth}

    def reset(self) -> None:
        """The model keeps no state between runs."""

    def run(self) -> float:
        return simulate(*self.args, **self.kwargs).time_us

    def check(self) -> bool:
        """The model moves no data, so there is nothing to compare."""
        return False


@register_backend
class SimBackend(Backend):
    name = "sim"
    description = "the alpha-beta timing simulator (model time, no data)"
    timing = "model"
    checks = False
    needs_topology = True

    def __init__(self, tile_bytes: int | None = None, fifo_depth: int | None = None) -> None:
        self.tile_bytes, self.fifo_depth = tile_bytes, fifo_depth

    def device(self, topology: Topology | None) -> str:
        name = topology.name if topology is not None else "no topology"
        return f"alpha-beta model of {name}"

    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None) -> Trial:
        return _SimTrial(ir, topology, case.size_bytes, self.tile_bytes, self.fifo_depth)

"""The registry of benchmark backends, with the two that need no GPU: ``numpy`` (wall-clock time of
the reference executor, with its check; ``max_memory`` its host-memory limit) and ``sim`` (the
alpha-beta timing simulator on a topology: no data, so no memory limit and nothing to check).

A backend is a class registered with :func:`register_backend` in one of ``BACKEND_MODULES``: it
names itself, says how it times (``wall``: host clock, ``device``: GPU events, ``model``: the
simulator), whether it checks results, whether it needs a topology and whether it holds every rank
in host memory (``max_memory`` then applies), and :meth:`Backend.prepare` returns a :class:`Trial`
for one size. A backend that checks results also runs an IR once (:meth:`Backend.run_once`, what
``xccl.api.run`` calls). A new backend (CuPy) only has to register itself in its module.

The command line builds its ``--backend`` choices and their help from this registry, so importing
it, and every module of ``BACKEND_MODULES``, loads no array, graph or solver library: a backend
imports its executor when it prepares or runs one.
"""

from __future__ import annotations

import importlib
import os
import platform
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from common.errors import XcclError

if TYPE_CHECKING:
    from codegen.ir import IR
    from synth.collectives import Collective
    from topologies.model import Topology

__all__ = [
    "BACKENDS",
    "BACKEND_MODULES",
    "TIMINGS",
    "Backend",
    "BenchCase",
    "BenchError",
    "ExecutorBackend",
    "ExecutorTrial",
    "NumpyBackend",
    "NumpyTrial",
    "SimBackend",
    "ThreadblockBound",
    "Trial",
    "backends",
    "get_backend",
    "register_backend",
]

BACKEND_MODULES = ("runtime.backends", "runtime.cupy.backend", "runtime.torch.backend")
"""Modules whose import registers backends; absent ones are skipped."""

TIMINGS = ("wall", "device", "model")


class BenchError(XcclError):
    """An unknown or unavailable backend, or a benchmark that cannot be set up."""


@dataclass(frozen=True)
class BenchCase:
    """One benchmarked call: nccl-tests' size (the larger buffer), dtype name, reduction, placement,
    and for a ``custom`` IR the collective declared as its expected result (None: the IR's own)."""

    size_bytes: int
    dtype: str
    op: str
    inplace: bool
    declared: Collective | None = None


@dataclass(frozen=True)
class ThreadblockBound:
    """What :meth:`Backend.rank_threadblocks` gives: the bound, and why (for people)."""

    per_rank: int
    why: str


class Trial(ABC):
    """One IR prepared at one size on one backend."""

    peer_note: str | None = None
    """Why :meth:`peer` is None for this call, where the backend has peers (``Backend.peer_label``)."""

    @abstractmethod
    def reset(self) -> None:
        """Put the inputs back (untimed; in-place calls overwrite them)."""

    @abstractmethod
    def run(self) -> float:
        """Execute once; the time it took (or the model says it takes), in microseconds."""

    @abstractmethod
    def check(self) -> bool:
        """Compare the last run's outputs with the expected result: True when they match, False
        when nothing states the expected result; raise ``ExecutionMismatch`` when they differ
        (backends whose ``checks`` is True; the harness does not call it on the others)."""

    def peer(self) -> Trial | None:
        """The same call by the library this backend runs on (torch's own collective), measured
        beside ours in the same run; None when the backend has no such peer."""
        return None


class ExecutorTrial(Trial):
    """A trial on an executor (NumPy's or CuPy's): seeded inputs loaded before each run, outputs
    checked against the NumPy reference of the IR's collective (or the one declared for a custom
    IR; nothing to compare with without one)."""

    def __init__(self, ex: Any, seed: int) -> None:
        from runtime.reference import executor_inputs

        self.ex = ex
        self.inputs = executor_inputs(ex, seed)
        self._reference = None

    def reset(self) -> None:
        self.ex.load(self.inputs)

    def check(self) -> bool:
        from runtime.reference import check_outputs, reference

        coll = self.ex.collective
        if coll is None:
            return False
        if self._reference is None:
            self._reference = reference(coll, self.inputs, self.ex.chunk_elems, self.ex.op)
        check_outputs(self._reference, self.ex.outputs(), self.ex.ir.name)
        return True


class Backend(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    timing: ClassVar[str]
    checks: ClassVar[bool]
    needs_topology: ClassVar[bool] = False
    host_memory: ClassVar[bool] = False
    """Holds every rank in host memory: takes ``max_memory``, its limit."""
    processes: ClassVar[bool] = False
    """Runs one process per rank: takes ``ranks``, ``timeout_s`` and ``dist``."""
    peer_label: ClassVar[str | None] = None
    """The short name of the peer its trials measure beside ours (``Trial.peer``), if any."""

    @classmethod
    def available(cls) -> bool:
        """Whether it can run here; must not import heavy libraries."""
        return True

    @classmethod
    def reporting(cls) -> bool:
        """Whether this process prints the report (under a launcher, only one rank's does)."""
        return True

    def device(self, topology: Topology | None) -> str:
        """What the times are measured on, for the report."""
        return self.description

    def peer_description(self) -> str | None:
        """What the peer of the last prepared call is, for the report (None: no peer)."""
        return None

    def close(self) -> None:
        """Release what :meth:`prepare` started (processes); the harness calls it when done."""
        return None

    def rank_threadblocks(self, num_ranks: int, dtype: str, op: str) -> ThreadblockBound | None:
        """The threadblocks each rank of an IR of ``num_ranks`` ranks may have to run here with
        ``dtype`` (a NumPy name) and ``op``, known before the IR is compiled, so that a compile
        made to run here keeps within it; None where only the runtime dialect's limit applies."""
        return None

    @abstractmethod
    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None) -> Trial: ...

    def run_once(self, ir: IR, case: BenchCase) -> Any:
        """Execute ``ir`` once on seeded random inputs and check every output (its executor's
        ``run``); only backends that move data can."""
        raise BenchError(f"backend {self.name} moves no data: it cannot execute {ir.name} and check it")


class ExecutorBackend(Backend):
    """A backend on an executor: a trial around the executor built for each case, and the
    executor package's ``run`` for one checked execution; ``options`` go to both."""

    trial: ClassVar[type[ExecutorTrial]]

    def __init__(self, seed: int = 0, **options: Any) -> None:
        self.seed, self.options = seed, options

    @abstractmethod
    def executor(self) -> Callable[..., Any]:
        """The executor class (imported on first use)."""

    @abstractmethod
    def runner(self) -> Callable[..., Any]:
        """The executor package's ``run(ir, size_bytes, dtype, op, *, inplace, declared, seed, ...)``."""

    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None) -> Trial:
        ex = self.executor()(ir, case.size_bytes, case.dtype, case.op, **self._keywords(case))
        return self.trial(ex, self.seed)

    def run_once(self, ir: IR, case: BenchCase) -> Any:
        return self.runner()(ir, case.size_bytes, case.dtype, case.op, seed=self.seed, **self._keywords(case))

    def _keywords(self, case: BenchCase) -> dict[str, Any]:
        return {"inplace": case.inplace, "declared": case.declared, **self.options}


BACKENDS: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make ``cls`` selectable by its ``name``."""
    if cls.timing not in TIMINGS:
        raise ValueError(f"backend {cls.name}: timing must be one of {TIMINGS}")
    BACKENDS[cls.name] = cls
    return cls


def backends() -> dict[str, type[Backend]]:
    """Every registered backend (importing ``BACKEND_MODULES`` first)."""
    for module in BACKEND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise
    return dict(BACKENDS)


def get_backend(name: str, **options: Any) -> Backend:
    """An instance of backend ``name`` with its options (e.g. ``tile_bytes`` for numpy)."""
    table = backends()
    if name not in table:
        raise BenchError(f"backend {name!r}: expected one of {', '.join(sorted(table))}")
    cls = table[name]
    if not cls.available():
        raise BenchError(f"backend {name} is not available here ({cls.description})")
    try:
        return cls(**options)
    except TypeError as exc:
        raise BenchError(f"backend {name}: {exc}") from None


class NumpyTrial(ExecutorTrial):
    """Timed by the host clock; ``stats`` are the last run's (``runtime.numpy.ExecStats``)."""

    stats: Any = None

    def run(self) -> float:
        start = time.perf_counter()
        self.stats = self.ex.execute()
        return (time.perf_counter() - start) * 1e6


@register_backend
class NumpyBackend(ExecutorBackend):
    name = "numpy"
    description = "the NumPy reference executor on this CPU (every rank in one process)"
    timing = "wall"
    checks = True
    host_memory = True
    trial = NumpyTrial

    def __init__(
        self,
        tile_bytes: int | None = None,
        fifo_depth: int | None = None,
        seed: int = 0,
        max_memory: int | str | None = None,
    ) -> None:
        super().__init__(seed, tile_bytes=tile_bytes, fifo_depth=fifo_depth, max_memory=max_memory)

    def device(self, topology: Topology | None) -> str:
        import numpy as np

        cpu = platform.processor() or platform.machine()
        return f"numpy {np.__version__}, {os.cpu_count()} CPU cores ({cpu})"

    def executor(self) -> Callable[..., Any]:
        from runtime.numpy.executor import NumpyExecutor

        return NumpyExecutor

    def runner(self) -> Callable[..., Any]:
        from runtime.numpy.runner import run

        return run


class _SimTrial(Trial):
    def __init__(
        self, ir: IR, topology: Topology, size: int, tile_bytes: int | None, depth: int | None, params: Any
    ):
        self.args = (ir, topology, size)
        self.kwargs = {"tile_bytes": tile_bytes, "fifo_depth": depth, "params": params}

    def reset(self) -> None:
        """The model keeps no state between runs."""

    def run(self) -> float:
        from runtime.sim import simulate

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

    def __init__(
        self, tile_bytes: int | None = None, fifo_depth: int | None = None, model: str | None = None
    ) -> None:
        self.tile_bytes, self.fifo_depth = tile_bytes, fifo_depth
        self.model = model
        """The timing model (``synth.timing.MODELS``; default the engine's, with the IR's protocol)."""

    def device(self, topology: Topology | None) -> str:
        name = topology.name if topology is not None else "no topology"
        return f"alpha-beta model of {name}"

    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None) -> Trial:
        from synth.timing import model_params

        params = None if self.model is None else model_params(self.model, ir.protocol)
        return _SimTrial(ir, topology, case.size_bytes, self.tile_bytes, self.fifo_depth, params)

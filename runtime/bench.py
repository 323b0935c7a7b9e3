"""The benchmark harness: an IR over a list of sizes on one backend, reported as nccl-tests does.

A backend is a class registered with :func:`register_backend` in one of ``BACKEND_MODULES``: it
names itself, says how it times (``wall``: host clock, ``device``: GPU events, ``model``: the
simulator) and whether it can check results, and :meth:`Backend.prepare` returns a :class:`Trial`
for one size. The harness resets the trial before every run (untimed), runs ``warmup`` times
untimed and ``repeats`` times timed, reports the median, and checks the last run's outputs against
the NumPy reference. algbw is size / time and busbw is algbw times the collective's nccl-tests
factor. A size at which the IR deadlocks or reads memory nothing wrote gets a row without times
(``deadlock`` / ``wrong``), and the next size runs. A new backend (CuPy) only has to register
itself in its module.
"""

from __future__ import annotations

import importlib
import statistics
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from codegen.ir import IR
from common.errors import XcclError
from runtime.errors import DeadlockError, ExecutionMismatch, UninitializedRead
from runtime.program import collective_of
from runtime.reference import check_outputs, executor_inputs, parse_dtype, parse_op, reference
from synth.cost import algbw_GBps
from topologies.model import Topology

__all__ = [
    "BACKENDS",
    "BACKEND_MODULES",
    "CHECKS",
    "TABLE_HEADERS",
    "TIMINGS",
    "Backend",
    "BenchCase",
    "BenchError",
    "BenchReport",
    "BenchRow",
    "ExecutorTrial",
    "Trial",
    "aligned_size",
    "backends",
    "bench",
    "get_backend",
    "register_backend",
]

BACKEND_MODULES = ("runtime.backends", "runtime.cupy.backend")
"""Modules whose import registers backends; absent ones (CuPy before its issue lands) are skipped."""

TIMINGS = ("wall", "device", "model")


class BenchError(XcclError):
    """An unknown or unavailable backend, or a benchmark that cannot be set up."""


@dataclass(frozen=True)
class BenchCase:
    """One benchmarked call: nccl-tests' size (the larger buffer), dtype name, reduction, placement."""

    size_bytes: int
    dtype: str
    op: str
    inplace: bool


class Trial(ABC):
    """One IR prepared at one size on one backend."""

    @abstractmethod
    def reset(self) -> None:
        """Put the inputs back (untimed; in-place calls overwrite them)."""

    @abstractmethod
    def run(self) -> float:
        """Execute once; the time it took (or the model says it takes), in microseconds."""

    @abstractmethod
    def check(self) -> None:
        """Raise ``ExecutionMismatch`` if the last run's outputs are wrong (backends whose
        ``checks`` is True; the harness does not call it on the others)."""


class ExecutorTrial(Trial):
    """A trial on an executor (NumPy's or CuPy's): seeded inputs loaded before each run, outputs
    checked against the NumPy reference of the IR's collective (nothing to check without one)."""

    def __init__(self, ex, seed: int) -> None:
        self.ex = ex
        self.inputs = executor_inputs(ex, seed)
        self._reference = None

    def reset(self) -> None:
        self.ex.load(self.inputs)

    def check(self) -> None:
        coll = self.ex.collective
        if coll is None:
            return
        if self._reference is None:
            self._reference = reference(coll, self.inputs, self.ex.chunk_elems, self.ex.op)
        check_outputs(self._reference, self.ex.outputs(), self.ex.ir.name)


class Backend(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    timing: ClassVar[str]
    checks: ClassVar[bool]
    needs_topology: ClassVar[bool] = False

    @classmethod
    def available(cls) -> bool:
        """Whether it can run here; must not import heavy libraries."""
        return True

    def device(self, topology: Topology | None) -> str:
        """What the times are measured on, for the report."""
        return self.description

    @abstractmethod
    def prepare(self, ir: IR, case: BenchCase, topology: Topology | None) -> Trial: ...


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


def get_backend(name: str, **options) -> Backend:
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


def aligned_size(ir: IR, size_bytes: int, dtype: str) -> int:
    """``size_bytes`` rounded down to a size the runtime selects the IR for (whole elements, divisible
    by ``nchunksperloop``), as nccl-tests rounds its sizes to whole counts."""
    item = parse_dtype(dtype).itemsize
    unit = item * ir.nchunksperloop
    if size_bytes < unit:
        raise BenchError(
            f"{ir.name}: size {size_bytes} B is below the smallest size it runs at, "
            f"{unit} B (nchunksperloop {ir.nchunksperloop} x {item}-byte elements)"
        )
    return size_bytes - size_bytes % unit


TABLE_HEADERS = ("size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check")

CHECKS = ("ok", "wrong", "deadlock", "-")
"""A row's ``check``: outputs right, wrong (or read memory nothing wrote), deadlocked, not checked."""


@dataclass(frozen=True)
class BenchRow:
    size_bytes: int
    count: int
    dtype: str
    op: str
    inplace: bool
    time_us: float | None
    algbw_GBps: float | None
    busbw_GBps: float | None
    check: str
    """One of ``CHECKS``; ``error`` says what went wrong. Times are None when the run failed."""
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.check in ("wrong", "deadlock")

    def cells(self) -> tuple:
        """The row as nccl-tests prints it (see ``TABLE_HEADERS``)."""
        times = ["-" if v is None else f"{v:.2f}" for v in (self.time_us, self.algbw_GBps, self.busbw_GBps)]
        return (self.size_bytes, self.count, self.dtype, self.op, *times, self.check)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BenchReport:
    ir_name: str
    collective: str
    num_ranks: int
    backend: str
    timing: str
    device: str
    warmup: int
    repeats: int
    rows: tuple[BenchRow, ...] = field(default=())
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not any(row.failed for row in self.rows)

    def to_json(self) -> dict:
        data = asdict(self)
        data["rows"] = [row.to_json() for row in self.rows]
        return data


def _measure(trial: Trial, warmup: int, repeats: int) -> float:
    times = []
    for i in range(warmup + repeats):
        trial.reset()
        elapsed = trial.run()
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times)


def bench(
    ir: IR,
    sizes: Iterable[int],
    *,
    backend: str = "numpy",
    dtype: str = "float32",
    op: str = "sum",
    inplace: bool = False,
    warmup: int = 1,
    repeats: int = 5,
    check: bool = True,
    topology: Topology | None = None,
    options: dict | None = None,
    on_row: Callable[[BenchRow], None] | None = None,
) -> BenchReport:
    """Benchmark ``ir`` at each size (rounded down by :func:`aligned_size`); Ctrl-C stops it and
    returns the rows finished so far (``interrupted``). ``on_row`` sees each row as it finishes."""
    if warmup < 0 or repeats < 1:
        raise BenchError(f"warmup {warmup}, repeats {repeats}: expected warmup >= 0 and repeats >= 1")
    be = get_backend(backend, **(options or {}))
    if be.needs_topology and topology is None:
        raise BenchError(f"backend {backend} needs a topology to time {ir.name} on")
    dtype_name, op = parse_dtype(dtype).name, parse_op(op)
    coll = collective_of(ir)
    factor = coll.busbw_factor if coll is not None else 1.0
    rows: list[BenchRow] = []
    interrupted = False
    try:
        for size in sizes:
            case = BenchCase(aligned_size(ir, size, dtype_name), dtype_name, op, inplace)
            count = case.size_bytes // parse_dtype(dtype_name).itemsize
            trial = be.prepare(ir, case, topology)
            try:
                time_us = _measure(trial, warmup, repeats)
            except (DeadlockError, UninitializedRead) as exc:
                status = "deadlock" if isinstance(exc, DeadlockError) else "wrong"
                row = BenchRow(
                    case.size_bytes, count, dtype_name, op, inplace, None, None, None, status, str(exc)
                )
            else:
                status, error = "-", None
                if check and be.checks:
                    try:
                        trial.check()
                        status = "ok"
                    except ExecutionMismatch as exc:
                        status, error = "wrong", str(exc)
                algbw = algbw_GBps(case.size_bytes, time_us)
                row = BenchRow(
                    case.size_bytes,
                    count,
                    dtype_name,
                    op,
                    inplace,
                    time_us,
                    algbw,
                    algbw * factor,
                    status,
                    error,
                )
            rows.append(row)
            if on_row is not None:
                on_row(row)
    except KeyboardInterrupt:
        interrupted = True
    return BenchReport(
        ir.name,
        ir.collective,
        ir.num_ranks,
        backend,
        be.timing,
        be.device(topology),
        warmup,
        repeats,
        tuple(rows),
        interrupted,
    )

"""The benchmark harness: an IR over a list of sizes on one backend, reported as nccl-tests does.

A backend is a class registered with :func:`register_backend` in one of ``BACKEND_MODULES``: it
names itself, says how it times (``wall``: host clock, ``device``: GPU events, ``model``: the
simulator) and whether it can check results, and :meth:`Backend.prepare` returns a :class:`Trial`
for one size. The harness resets the trial before every run (untimed), runs ``warmup`` times
untimed and ``repeats`` times timed, reports the median, and checks the last run's outputs against
the NumPy reference. algbw is size / time and busbw is algbw times the collective's nccl-tests
factor. A size at which the IR deadlocks or reads memory nothing wrote gets a row without times
(``deadlock`` / ``wrong``), and the next size runs; so does a size the runtime would not select the
IR for, or one above the memory limit (``skipped``, with a note saying why). Every row's ``check``
is one of :data:`CHECKS`, in the table and in the JSON alike. A new backend (CuPy) only has to
register itself in its module.
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
from common.units import parse_size
from runtime.errors import (
    DeadlockError,
    ExecutionMismatch,
    MemoryLimitError,
    SizeNotSelected,
    UninitializedRead,
)
from runtime.program import collective_of
from runtime.reference import check_outputs, executor_inputs, parse_dtype, parse_op, reference
from runtime.selection import check_window, runtime_dialect
from synth.collectives import Collective
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
    """One benchmarked call: nccl-tests' size (the larger buffer), dtype name, reduction, placement,
    and for a ``custom`` IR the collective declared as its expected result (None: the IR's own)."""

    size_bytes: int
    dtype: str
    op: str
    inplace: bool
    declared: Collective | None = None


class Trial(ABC):
    """One IR prepared at one size on one backend."""

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


class ExecutorTrial(Trial):
    """A trial on an executor (NumPy's or CuPy's): seeded inputs loaded before each run, outputs
    checked against the NumPy reference of the IR's collective (or the one declared for a custom
    IR; nothing to compare with without one)."""

    def __init__(self, ex, seed: int) -> None:
        self.ex = ex
        self.inputs = executor_inputs(ex, seed)
        self._reference = None

    def reset(self) -> None:
        self.ex.load(self.inputs)

    def check(self) -> bool:
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
    by ``nchunksperloop``), as nccl-tests rounds its sizes to whole counts; ``SizeNotSelected`` below
    the smallest such size."""
    item = parse_dtype(dtype).itemsize
    unit = item * ir.nchunksperloop
    if size_bytes < unit:
        raise SizeNotSelected(
            f"{ir.name}: size {size_bytes} B is below the smallest size it runs at, "
            f"{unit} B (nchunksperloop {ir.nchunksperloop} x {item}-byte elements)"
        )
    return size_bytes - size_bytes % unit


TABLE_HEADERS = ("size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check")

CHECKS = ("ok", "wrong", "deadlock", "not checked", "skipped")
"""A row's ``check``, the same words in the table and the JSON: ``ok`` every output compared and
right; ``wrong`` an output differs (or an op read memory nothing wrote); ``deadlock``; ``not
checked`` it ran but nothing was compared (``note`` says why: a backend that moves no data, a custom
collective with no declared result, checking turned off); ``skipped`` it did not run at this size
(``note``: outside the algorithm's window, not a whole number of its chunks, above the memory
limit)."""

NOT_DECLARED = "custom collective with no declared result; a DSL program declares one with custom_collective"
"""Why a custom IR's outputs are not compared."""


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
    """One of ``CHECKS``; ``error`` says what went wrong, ``note`` why a row is not checked or was
    skipped. Times are None when the run failed or was skipped."""
    error: str | None = None
    note: str | None = None

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
        """No size failed (skipped and unchecked sizes are not failures)."""
        return not any(row.failed for row in self.rows)

    @property
    def ran(self) -> tuple[BenchRow, ...]:
        return tuple(row for row in self.rows if row.check != "skipped")

    @property
    def all_checked(self) -> bool:
        """Every requested size ran and every output was compared and right (``--check``)."""
        return bool(self.rows) and all(row.check == "ok" for row in self.rows)

    def to_json(self) -> dict:
        data = asdict(self)
        data["rows"] = [row.to_json() for row in self.rows]
        data["all_checked"] = self.all_checked
        return data


def _measure(trial: Trial, warmup: int, repeats: int) -> float:
    times = []
    for i in range(warmup + repeats):
        trial.reset()
        elapsed = trial.run()
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times)


def _count(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BenchError(f"{name}: expected an integer {name} >= {low}, got {value!r}")
    return value


@dataclass(frozen=True)
class _Setup:
    """What stays the same for every size of one benchmark."""

    ir: IR
    backend: Backend
    dtype: str
    op: str
    inplace: bool
    warmup: int
    repeats: int
    check: bool
    topology: Topology | None
    declared: Collective | None
    dialect: str
    factor: float


def _plan(s: _Setup, size: int) -> BenchCase | SizeNotSelected:
    """The call at ``size``, rounded down, or why the runtime would not select the IR for it."""
    try:
        case = BenchCase(aligned_size(s.ir, size, s.dtype), s.dtype, s.op, s.inplace, s.declared)
        check_window(s.ir, case.size_bytes, s.dialect)
    except SizeNotSelected as exc:
        return exc
    return case


def _skipped(s: _Setup, size: int, why: Exception) -> BenchRow:
    count = size // parse_dtype(s.dtype).itemsize
    return BenchRow(size, count, s.dtype, s.op, s.inplace, None, None, None, "skipped", None, str(why))


def _row(s: _Setup, size: int, planned: BenchCase | SizeNotSelected, skip: bool) -> BenchRow:
    """One size, measured and checked (or skipped, when ``skip``; else its error is raised)."""
    try:
        if isinstance(planned, SizeNotSelected):
            raise planned
        trial = s.backend.prepare(s.ir, planned, s.topology)
    except (SizeNotSelected, MemoryLimitError) as exc:
        if not skip:
            raise
        return _skipped(s, size if isinstance(planned, SizeNotSelected) else planned.size_bytes, exc)
    size = planned.size_bytes
    head = (size, size // parse_dtype(s.dtype).itemsize, s.dtype, s.op, s.inplace)
    try:
        time_us = _measure(trial, s.warmup, s.repeats)
    except (DeadlockError, UninitializedRead) as exc:
        status = "deadlock" if isinstance(exc, DeadlockError) else "wrong"
        return BenchRow(*head, None, None, None, status, str(exc))
    status, error, note = "not checked", None, None
    if not s.check:
        note = "checking was turned off"
    elif not s.backend.checks:
        note = f"the {s.backend.name} backend moves no data"
    else:
        try:
            status, note = ("ok", None) if trial.check() else ("not checked", NOT_DECLARED)
        except ExecutionMismatch as exc:
            status, error = "wrong", str(exc)
    algbw = algbw_GBps(size, time_us)
    return BenchRow(*head, time_us, algbw, algbw * s.factor, status, error, note)


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
    declared: Collective | None = None,
    dialect: str | None = None,
    skip: bool = True,
    on_row: Callable[[BenchRow], None] | None = None,
) -> BenchReport:
    """Benchmark ``ir`` at each size (rounded down by :func:`aligned_size`); Ctrl-C stops it and
    returns the rows finished so far (``interrupted``). ``on_row`` sees each row as it finishes.

    ``declared`` is the expected result of a ``custom`` IR (a DSL program's custom collective);
    ``dialect`` the XML dialect whose ``minBytes``/``maxBytes`` window applies (default: the one of
    the runtime that runs the collective, :func:`runtime.selection.runtime_dialect`). A size the
    runtime would not select the IR for, or one above the memory limit, gets a ``skipped`` row
    (with ``skip=False`` its error is raised instead, before anything runs at that size); when the
    runtime would select the IR for none of the sizes, ``SizeNotSelected`` is raised before any runs.
    """
    warmup, repeats = _count(warmup, "warmup", 0), _count(repeats, "repeats", 1)
    sizes = [parse_size(size) for size in sizes]
    be = get_backend(backend, **(options or {}))
    if be.needs_topology and topology is None:
        raise BenchError(f"backend {backend} needs a topology to time {ir.name} on")
    dtype_name, op = parse_dtype(dtype).name, parse_op(op)
    coll = collective_of(ir, declared)
    setup = _Setup(
        ir,
        be,
        dtype_name,
        op,
        inplace,
        warmup,
        repeats,
        check,
        topology,
        declared,
        dialect or runtime_dialect(ir.collective),
        coll.busbw_factor if coll is not None and ir.collective != "custom" else 1.0,
    )
    plan = [_plan(setup, size) for size in sizes]
    refused = [p for p in plan if isinstance(p, SizeNotSelected)]
    if refused and (not skip or len(refused) == len(plan)):
        if len(plan) == 1 or len({str(p) for p in refused}) == 1:
            raise refused[0]
        raise SizeNotSelected(f"none of the {len(plan)} requested sizes can run; the first: {refused[0]}")
    rows: list[BenchRow] = []
    interrupted = False
    try:
        for size, planned in zip(sizes, plan, strict=True):
            row = _row(setup, size, planned, skip)
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

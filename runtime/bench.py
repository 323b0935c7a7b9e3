"""The benchmark harness: an IR over a list of sizes on one backend, reported as nccl-tests does.

The backends are those of the registry in ``runtime.backends`` (re-exported here): each prepares
a :class:`Trial` for one size, and the harness resets the trial before every run (untimed), runs
``warmup`` times untimed and ``repeats`` times timed, reports the median, and checks the last
run's outputs against the NumPy reference. algbw is size / time and busbw is algbw times the collective's nccl-tests
factor. A size at which the IR deadlocks or reads memory nothing wrote gets a row without times
(``deadlock`` / ``wrong``), and the next size runs; so does a size the runtime would not select the
IR for, or one above the memory limit (``skipped``, with a note saying why). Every row's ``check``
is one of :data:`CHECKS`, in the table and in the JSON alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from codegen.ir import IR
from common.fields import is_integer
from common.units import parse_size
from runtime.backends import (
    BACKEND_MODULES,
    BACKENDS,
    TIMINGS,
    Backend,
    BenchCase,
    BenchError,
    ExecutorTrial,
    Trial,
    backends,
    get_backend,
    register_backend,
)
from runtime.errors import (
    DeadlockError,
    ExecutionMismatch,
    MemoryLimitError,
    SizeNotSelected,
    UninitializedRead,
)
from runtime.program import collective_of
from runtime.reference import parse_dtype, parse_op
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
    "PeerResult",
    "Trial",
    "aligned_size",
    "backends",
    "bench",
    "get_backend",
    "register_backend",
]


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
class PeerResult:
    """The peer's measurement at a row's size (``Trial.peer``: torch's own collective on the same
    process group): times None when it could not run there (``note`` says why)."""

    time_us: float | None
    algbw_GBps: float | None
    busbw_GBps: float | None
    check: str
    error: str | None = None
    note: str | None = None

    def cells(self) -> tuple:
        times = ["-" if v is None else f"{v:.2f}" for v in (self.time_us, self.algbw_GBps, self.busbw_GBps)]
        return (*times, self.check)


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
    peer: PeerResult | None = None
    """The peer measured beside it (backends with one, ``Backend.peer_label``)."""

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
    peer: str | None = None
    """What the rows' ``peer`` measured (None: no peer)."""

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
    if not is_integer(value) or value < low:
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
    peer: bool = True


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
    status, error, note = _checked(s, trial)
    algbw = algbw_GBps(size, time_us)
    peer = _peer(s, trial, size)
    return BenchRow(*head, time_us, algbw, algbw * s.factor, status, error, note, peer)


def _checked(s: _Setup, trial: Trial) -> tuple[str, str | None, str | None]:
    """The last run's check word, with the error or the note that goes with it."""
    if not s.check:
        return "not checked", None, "checking was turned off"
    if not s.backend.checks:
        return "not checked", None, f"the {s.backend.name} backend moves no data"
    try:
        return ("ok", None, None) if trial.check() else ("not checked", None, NOT_DECLARED)
    except ExecutionMismatch as exc:
        return "wrong", str(exc), None
    except DeadlockError as exc:  # torch: right outputs, but a receive no send matches
        return "deadlock", str(exc), None


def _peer(s: _Setup, trial: Trial, size: int) -> PeerResult | None:
    """The peer of ``trial`` measured and checked as ours is, if the backend has one."""
    if not s.peer or s.backend.peer_label is None:
        return None
    peer = trial.peer()
    if peer is None:
        return PeerResult(None, None, None, "skipped", None, trial.peer_note or "no peer for this call")
    time_us = _measure(peer, s.warmup, s.repeats)
    status, error, note = _checked(s, peer)
    algbw = algbw_GBps(size, time_us)
    return PeerResult(time_us, algbw, algbw * s.factor, status, error, note)


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
    peer: bool = True,
) -> BenchReport:
    """Benchmark ``ir`` at each size (rounded down by :func:`aligned_size`); Ctrl-C stops it and
    returns the rows finished so far (``interrupted``). ``on_row`` sees each row as it finishes.

    ``declared`` is the expected result of a ``custom`` IR (a DSL program's custom collective);
    ``dialect`` the XML dialect whose ``minBytes``/``maxBytes`` window applies (default: the one of
    the runtime that runs the collective, :func:`runtime.selection.runtime_dialect`). A size the
    runtime would not select the IR for, or one above the memory limit, gets a ``skipped`` row
    (with ``skip=False`` its error is raised instead, before anything runs at that size); when the
    runtime would select the IR for none of the sizes, ``SizeNotSelected`` is raised before any runs.
    A backend with a peer (torch: its own collective on the same process group) measures it beside
    each size unless ``peer`` is False; the backend is closed (its processes end) before returning.
    """
    warmup, repeats = _count(warmup, "warmup", 0), _count(repeats, "repeats", 1)
    sizes = [parse_size(size) for size in sizes]
    be = get_backend(backend, **(options or {}))
    if be.needs_topology and topology is None:
        raise BenchError(f"backend {backend} needs a topology to time {ir.name} on")
    setup = _Setup(
        ir=ir,
        backend=be,
        dtype=parse_dtype(dtype).name,
        op=parse_op(op),
        inplace=inplace,
        warmup=warmup,
        repeats=repeats,
        check=check,
        topology=topology,
        declared=declared,
        dialect=dialect or runtime_dialect(ir.collective),
        factor=_busbw_factor(ir, declared),
        peer=peer,
    )
    try:
        plan = _plan_all(setup, sizes, skip)
        rows, interrupted = _run(setup, zip(sizes, plan, strict=True), skip, on_row)
        device = be.device(topology)
        measured = any(row.peer is not None and row.peer.time_us is not None for row in rows)
        peer_said = be.peer_description() if measured else None
    finally:
        be.close()
    return BenchReport(
        ir.name,
        ir.collective,
        ir.num_ranks,
        backend,
        be.timing,
        device,
        warmup,
        repeats,
        tuple(rows),
        interrupted,
        peer_said,
    )


def _busbw_factor(ir: IR, declared: Collective | None) -> float:
    """nccl-tests' factor from algbw to busbw for the IR's collective (1 for a custom one)."""
    coll = collective_of(ir, declared)
    return coll.busbw_factor if coll is not None and ir.collective != "custom" else 1.0


def _plan_all(s: _Setup, sizes: list[int], skip: bool) -> list[BenchCase | SizeNotSelected]:
    """Each size's call, or why the runtime would not select the IR for it; raises, before any
    runs, when a size cannot run and ``skip`` is False, or when none can."""
    plan = [_plan(s, size) for size in sizes]
    refused = [p for p in plan if isinstance(p, SizeNotSelected)]
    if refused and (not skip or len(refused) == len(plan)):
        if len(plan) == 1 or len({str(p) for p in refused}) == 1:
            raise refused[0]
        raise SizeNotSelected(f"none of the {len(plan)} requested sizes can run; the first: {refused[0]}")
    return plan


def _run(
    s: _Setup,
    plan: Iterable[tuple[int, BenchCase | SizeNotSelected]],
    skip: bool,
    on_row: Callable[[BenchRow], None] | None,
) -> tuple[list[BenchRow], bool]:
    """The row of each planned size, and whether Ctrl-C stopped them (keeping the finished ones)."""
    rows: list[BenchRow] = []
    try:
        for size, planned in plan:
            row = _row(s, size, planned, skip)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    except KeyboardInterrupt:
        return rows, True
    return rows, False

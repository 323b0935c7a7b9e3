"""``xccl bench`` (nccl-tests-style table over sizes) and ``xccl run`` (one checked execution).

Both take an IR, an algorithm or a DSL program, compile what needs compiling, and run it on a
backend of ``runtime.bench``'s registry. Every row's check is one of ``runtime.bench.CHECKS``
(the same words in the table, the progress lines and the JSON). A wrong result (or a deadlock)
exits with status 1 and one line naming rank, buffer, chunk and index (or the blocked steps); so
does ``--check`` when some output was not compared; bad input exits with 2. ``run`` refuses a size
the runtime would not select the IR for; ``bench`` skips it with a note.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from codegen.errors import DslError
from codegen.examples import example_names
from common.units import SizeError, format_size, parse_size, parse_size_range
from runtime.backends import backends
from runtime.datatypes import DTYPE_NAMES, REDUCTIONS
from runtime.torch.backend import MAX_TIMEOUT_S
from runtime.torch.launch import DEFAULT_TIMEOUT_S, DIST_BACKENDS
from synth.timing.calibration import DEFAULT_MODEL, MODELS
from xccl.cli.algorithms import algorithm_topology
from xccl.cli.common import InputFile
from xccl.cli.output import format_table, print_json, print_table, progress, slow_stage
from xccl.cli.solving import long_command

if TYPE_CHECKING:
    from codegen.ir import IR
    from codegen.rules import Dialect
    from runtime.bench import BenchReport, BenchRow
    from synth.collectives import Collective
    from topologies.model import Topology

__all__ = ["Runnable", "load_runnable", "register"]

FILE_HELP = (
    "an IR (MSCCL XML in either dialect, or xccl's JSON IR: run as written), an algorithm "
    "(.json from xccl baseline or xccl synth: compiled first) or a DSL program (.py defining "
    "program() or building one ChunkProgram, or example:NAME: compiled first)"
)
INTERRUPTED = 130
T = TypeVar("T")


@dataclass(frozen=True)
class Runnable:
    """What a FILE argument gives: the IR to run, the topology it names (if any), the expected
    result a DSL program declares for a custom collective, and the dialect whose size window
    applies (an XML file's own; else that of the runtime the IR was compiled for)."""

    ir: IR
    topology: Topology | None
    declared: Collective | None = None
    dialect: str = "azure"


PerRank = Callable[[int], int | None]
"""Given an IR's ranks, the threadblocks each rank may have where it will run (None: the runtime
dialect's limit): a backend's :meth:`~runtime.backends.Backend.rank_threadblocks`."""


def load_runnable(
    source: str,
    params: dict[str, object],
    inplace: bool = False,
    topology: str | None = None,
    per_rank: PerRank | None = None,
) -> Runnable:
    """The IR in (or compiled from) ``source``; algorithms are compiled for in-place calls when
    ``inplace``. ``topology`` overrides the one the algorithm or program names. What is compiled
    keeps within ``per_rank`` threadblocks per rank where a layout does; an IR file runs as written."""
    from topologies import load

    given = InputFile(source)
    if params and given.kind != "program":
        what = "an IR" if given.kind == "ir" else "an algorithm"
        raise DslError(f"{source}: -D applies to DSL programs, not to {what}")
    return LOADERS[given.kind](given, params, inplace, load(topology) if topology else None, per_rank or _no_bound)


def _no_bound(num_ranks: int) -> None:
    """No threadblock bound but the runtime dialect's."""
    return None


def _ir(
    given: InputFile, params: dict[str, object], inplace: bool, topology: Topology | None, per_rank: PerRank
) -> Runnable:
    """An IR file, run as written (judged by its own dialect's window)."""
    from runtime.selection import run_target

    target = run_target(given.source)
    return Runnable(target.ir, topology, target.declared, target.dialect)


def _program(
    given: InputFile, params: dict[str, object], inplace: bool, topology: Topology | None, per_rank: PerRank
) -> Runnable:
    """A DSL program, compiled for the runtime that runs its collective, on the topology it names."""
    from codegen.loader import load_program
    from runtime.selection import run_target, runtime_dialect

    prog = load_program(given.source, params)
    limit = per_rank(prog.collective.num_ranks)
    target = _within(lambda d: run_target(prog, d), runtime_dialect(prog.collective.name), limit)
    return Runnable(target.ir, topology or prog.topology, target.declared, target.dialect)


def _algorithm(
    given: InputFile, params: dict[str, object], inplace: bool, topology: Topology | None, per_rank: PerRank
) -> Runnable:
    """An algorithm file, verified on its topology and compiled (for in-place calls if ``inplace``)
    as ``xccl compile`` compiles it (a timed schedule: the port order the IR simulator finds faster)."""
    from runtime.choice import compile_fastest

    algo = given.algorithm()
    topo = algorithm_topology(algo, topology, given.source)
    algo.verify(topo)
    limit = per_rank(algo.collective.num_ranks)
    ir = _within(lambda d: compile_fastest(algo, topo, inplace=inplace, dialect=d)[0], "azure", limit)
    return Runnable(ir, topo)


def _within(compile: Callable[[Dialect], T], dialect: str, limit: int | None) -> T:
    """``runtime.selection.compiled_within``, its fallback said on stderr."""
    from runtime.selection import compiled_within

    return compiled_within(compile, dialect, limit, progress)


LOADERS: dict[str, Callable[[InputFile, dict[str, object], bool, Topology | None, PerRank], Runnable]] = {
    "ir": _ir,
    "program": _program,
    "algorithm": _algorithm,
}
"""How ``run`` and ``bench`` get an IR from each kind of FILE (``xccl.cli.common.InputFile``)."""


def _placement(ir: IR, inplace: bool) -> bool:
    """In place if asked, or if the IR allows nothing else."""
    return inplace or (ir.inplace and not ir.outofplace)


def _where(inplace: bool) -> str:
    return "in-place" if inplace else "out-of-place"


def _call(args: argparse.Namespace) -> tuple[Runnable, bool, dict]:
    """The runnable FILE, whether the call is in place, and the ``runtime.bench.bench`` arguments
    both commands share; the backend's options are refused, if they must be, before FILE is read."""
    from codegen.loader import parse_params
    from runtime.reference import parse_dtype

    options = _backend_options(args)
    parse_dtype(args.dtype)
    with slow_stage(f"loading {args.file}"):
        per_rank = _backend_bound(args, options)
        runnable = load_runnable(args.file, parse_params(args.define), args.inplace, args.topology, per_rank)
    inplace = _placement(runnable.ir, args.inplace)
    return runnable, inplace, _bench_args(args, runnable, inplace, options)


def _backend_bound(args: argparse.Namespace, options: dict) -> PerRank:
    """What a FILE compiled for this call keeps within: the threadblocks per rank the backend runs
    at once with this dtype and reduction (the cupy backend: every GPU's resident blocks over the
    ranks placed on it), asked only where something is compiled, and said on stderr."""

    def per_rank(num_ranks: int) -> int | None:
        from runtime.backends import get_backend
        from runtime.reference import parse_dtype, parse_op

        be = get_backend(args.backend, **options)
        bound = be.rank_threadblocks(num_ranks, parse_dtype(args.dtype).name, parse_op(args.op))
        if bound is not None:
            progress(
                f"compiling {args.file} for the {args.backend} backend with at most {bound.per_rank} "
                f"threadblocks per rank: {bound.why}"
            )
        return None if bound is None else bound.per_rank

    return per_rank


def _sizes(flag: str, parse: Callable[[str], T], text: str) -> T:
    """``parse(text)``, its error naming the option it came from."""
    try:
        return parse(text)
    except SizeError as exc:
        raise SizeError(f"{flag}: {exc}") from None


def _failure(row: BenchRow) -> str:
    return f"failed at {format_size(row.size_bytes)}: {row.error}"


def _report_json(args: argparse.Namespace, report: BenchReport, nccl: list[dict] | None) -> dict:
    return {"file": args.file, **report.to_json(), **({"vs_nccl": nccl} if nccl is not None else {})}


def _vs_nccl(ir: IR, topology: Topology | None, report: BenchReport, model: str) -> list[dict] | None:
    """With a model backend: per timed size, NCCL's two estimates (its layout timed by the same
    model with the IR's protocol, its own model) and the gain over each (NCCL / this IR)."""
    from synth.collectives import CollectiveError, make_collective
    from synth.nccl.compare import nccl_reference
    from synth.timing import model_params

    if topology is None or backends()[report.backend].timing != "model":
        return None
    try:
        coll = make_collective(ir.collective, ir.num_ranks, root=ir.root)
    except CollectiveError:  # a custom collective: NCCL has no such call
        return None
    params = model_params(model, ir.protocol)
    out = []
    for row in report.rows:
        if row.time_us is None:
            continue
        ref = nccl_reference(topology, coll, row.size_bytes, params)
        out.append({"size_bytes": row.size_bytes, "time_us": row.time_us, **ref.fields(row.time_us)})
    return out


def _print_vs_nccl(rows: list[dict], params_label: str) -> None:
    """The comparison with NCCL, as comment lines (``#``) under nccl-tests' table, which stays
    the only table a parser of nccl-tests output reads."""

    def cell(v: float | None, unit: str = "") -> str:
        return "-" if v is None else f"{v:.2f}{unit}"

    table = format_table(
        ["size(B)", "time(us)", "NCCL layout(us)", "NCCL model(us)", "NCCL picks", "vs layout", "vs model"],
        [
            [
                r["size_bytes"],
                cell(r["time_us"]),
                cell(r["nccl_layout_us"]),
                cell(r["nccl_model_us"]),
                r["nccl_model_pick"] or "-",
                cell(r["gain_vs_nccl_layout"], "x"),
                cell(r["gain_vs_nccl_model"], "x"),
            ]
            for r in rows
        ],
    )
    print(
        f"# against NCCL, modeled ({params_label}): NCCL layout = NCCL's channels as an algorithm in "
        "the same model; NCCL model = NCCL's own; vs = NCCL / this (above 1x: faster than NCCL)"
    )
    for line in table.splitlines():
        print(f"# {line}")


def _backend_options(args: argparse.Namespace) -> dict:
    """The backend's options; refuses, before any work, what cannot be honoured (``--check`` on a
    backend that moves no data, ``--max-memory`` where it does not apply)."""
    from runtime.bench import BenchError

    table = backends()
    backend = table[args.backend]
    if args.check and not backend.checks:
        raise BenchError(f"--check: the {args.backend} backend moves no data, so no output can be compared")
    options = {}
    if args.model is not None:
        if backend.timing != "model":
            raise BenchError(f"--model: the {args.backend} backend measures time; --model applies to sim")
        options["model"] = args.model
    if args.max_memory is not None:
        if not backend.host_memory:
            held = ", ".join(name for name, cls in table.items() if cls.host_memory)
            raise BenchError(
                f"--max-memory: the {args.backend} backend does not hold every rank in host memory "
                f"(it applies to {held})"
            )
        options["max_memory"] = _sizes("--max-memory", parse_size, args.max_memory)
    given = {flag: value for flag, value in _process_flags(args).items() if value is not None}
    if given and not backend.processes:
        takes = ", ".join(name for name, cls in table.items() if cls.processes)
        flag = next(iter(given))
        raise BenchError(f"{flag}: the {args.backend} backend runs every rank in this process (it applies to {takes})")
    if args.ranks is not None:
        if args.ranks < 1:
            raise BenchError(f"--ranks {args.ranks}: expected at least 1 process")
        options["ranks"] = args.ranks
    if args.timeout is not None:
        if not 0 < args.timeout < MAX_TIMEOUT_S:
            raise BenchError(f"--timeout {args.timeout:g}: expected seconds above 0 and below {MAX_TIMEOUT_S:g}")
        options["timeout_s"] = args.timeout
    if args.dist is not None:
        options["dist"] = args.dist
    return options


def _process_flags(args: argparse.Namespace) -> dict[str, object]:
    """The options of backends that run one process per rank, by flag."""
    return {"--ranks": args.ranks, "--timeout": args.timeout, "--dist": args.dist}


def _bench_args(args: argparse.Namespace, runnable: Runnable, inplace: bool, options: dict) -> dict:
    """The ``runtime.bench.bench`` arguments both commands share."""
    return {
        "backend": args.backend,
        "dtype": args.dtype,
        "op": args.op,
        "inplace": inplace,
        "topology": runnable.topology,
        "options": options,
        "declared": runnable.declared,
        "dialect": runnable.dialect,
    }


def _unchecked(report: BenchReport) -> str:
    """Why ``--check`` fails: how many sizes were not compared, and the first reason."""
    rows = [row for row in report.rows if row.check != "ok"]
    return (
        f"--check: {len(rows)} of {len(report.rows)} size(s) not checked; "
        f"{format_size(rows[0].size_bytes)} {rows[0].check}: {rows[0].note}"
    )


def _exit_status(report: BenchReport, check: bool, command: str) -> int:
    """130 interrupted; 1 a size failed, or (``check``) some size was not compared; else 0.
    The reason for a 1 goes to stderr as one line."""
    if report.interrupted:
        return INTERRUPTED
    failed = [row for row in report.rows if row.failed]
    if failed:
        print(f"xccl {command}: {_failure(failed[0])}", file=sys.stderr)
        return 1
    if check and not report.all_checked:
        print(f"xccl {command}: {_unchecked(report)}", file=sys.stderr)
        return 1
    return 0


def _checked_line(report: BenchReport, checks: bool) -> str:
    """What the header says about the check, from the rows themselves."""
    if not checks:
        return "outputs not checked (this backend moves no data)"
    ran = report.ran
    if ran and all(row.check == "not checked" for row in ran):
        return f"outputs not checked ({ran[0].note})"
    return "outputs checked against the NumPy reference"


def _print_table(args: argparse.Namespace, ir: IR, inplace: bool, report: BenchReport) -> None:
    from runtime.bench import TABLE_HEADERS

    print(
        f"# {ir.name}: {ir.collective} on {ir.num_ranks} ranks, {_where(inplace)}, backend {report.backend}"
    )
    print(f"# device: {report.device}")
    print(
        f"# {report.timing} time, median of {report.repeats} run(s) after {report.warmup} "
        f"warm-up run(s); {args.dtype} {args.op}; {_checked_line(report, backends()[report.backend].checks)}"
    )
    label = backends()[report.backend].peer_label if report.peer else None
    if label is None:
        print_table(TABLE_HEADERS, [row.cells() for row in report.rows])
    else:
        print(f"# beside it, columns {label}*: {report.peer}")
        headers = (*TABLE_HEADERS, f"{label}(us)", f"{label} algbw", f"{label} busbw", f"{label} check")
        print_table(headers, [row.cells() + _peer_cells(row) for row in report.rows])
    for row in report.rows:
        if row.check == "skipped":
            print(f"# skipped {format_size(row.size_bytes)}: {row.note}")
        elif row.peer is not None and row.peer.check not in ("ok", "not checked"):
            print(f"# {label} at {format_size(row.size_bytes)}: {row.peer.check}: {row.peer.error or row.peer.note}")
    _print_average("", [row.busbw_GBps for row in report.rows])
    if label is not None:
        _print_average(f" ({label})", [row.peer.busbw_GBps for row in report.rows if row.peer is not None])


def _peer_cells(row: BenchRow) -> tuple:
    return row.peer.cells() if row.peer is not None else ("-", "-", "-", "-")


def _print_average(who: str, busbw: list[float | None]) -> None:
    timed = [value for value in busbw if value is not None]
    if timed:
        print(f"# Avg bus bandwidth{who}    : {sum(timed) / len(timed):.3f} GB/s")


@long_command
def cmd_bench(args: argparse.Namespace) -> int:
    from runtime.bench import BenchError, bench

    sizes = _sizes("--sizes", parse_size_range, args.sizes)
    runnable, inplace, kwargs = _call(args)
    ir = runnable.ir
    if backends()[args.backend].needs_topology and runnable.topology is None:
        raise BenchError(
            f"{args.file}: backend {args.backend} times the IR on a topology, and this file names none: "
            "pass --topology"
        )
    done = []

    def on_row(row: BenchRow) -> None:
        done.append(row)
        progress(f"[{len(done)}/{len(sizes)}] {format_size(row.size_bytes)}: {row.check}")

    report = bench(ir, sizes, warmup=args.warmup, repeats=args.repeats, on_row=on_row, **kwargs)
    if not backends()[args.backend].reporting():
        return _exit_status(report, args.check, "bench")
    nccl = _vs_nccl(ir, runnable.topology, report, args.model or DEFAULT_MODEL)
    if args.json:
        print_json(_report_json(args, report, nccl))
    else:
        _print_table(args, ir, inplace, report)
        if nccl:
            from synth.timing import model_params

            _print_vs_nccl(nccl, model_params(args.model or DEFAULT_MODEL, ir.protocol).label)
    if report.interrupted:
        progress(f"interrupted: {len(report.rows)} of {len(sizes)} sizes done")
    if not report.interrupted and not report.ran:
        raise BenchError(f"{args.file}: no requested size ran; the first: {report.rows[0].note}")
    return _exit_status(report, args.check, "bench")


def cmd_run(args: argparse.Namespace) -> int:
    from runtime.bench import bench

    size = _sizes("--size", parse_size, args.size)
    runnable, inplace, kwargs = _call(args)
    with slow_stage(f"running {args.file} on {args.backend}"):
        report = bench(runnable.ir, [size], warmup=0, repeats=1, skip=False, peer=False, **kwargs)
    if report.interrupted:
        progress("interrupted")
        return INTERRUPTED
    if not backends()[args.backend].reporting():
        return _exit_status(report, args.check, "run")
    if args.json:
        print_json(_report_json(args, report, None))
    elif not report.rows[0].failed:
        print(_run_line(runnable.ir, inplace, report, size))
    return _exit_status(report, args.check, "run")


def _run_line(ir: IR, inplace: bool, report: BenchReport, size: int) -> str:
    """What ``xccl run`` says of a run that did not fail: the check word, the call, the time."""
    (row,) = report.rows
    rounded = "" if row.size_bytes == size else f", rounded down from {format_size(size)}"
    what = (
        f"{ir.name}: {ir.collective} on {ir.num_ranks} ranks, {format_size(row.size_bytes)} "
        f"({row.count} {row.dtype}{rounded}), {row.op}, {_where(inplace)}"
    )
    took = f"({report.backend}, {row.time_us / 1e3:.2f} ms)"
    if row.check == "ok":
        return f"ok: {what}: every output matches the NumPy reference {took}"
    return f"{row.check}: {what}: ran, outputs not compared: {row.note} {took}"


def _common(p: argparse.ArgumentParser, choices: list[str]) -> None:
    table = backends()
    p.add_argument(
        "file",
        metavar="FILE",
        help="IR (.xml, IR .json), algorithm (.json) or DSL program (.py, example:NAME)",
    )
    p.add_argument(
        "--backend",
        "-b",
        choices=choices,
        default="numpy",
        help="runtime to execute on (default numpy): "
        + "; ".join(f"{n}: {table[n].description}" for n in choices),
    )
    p.add_argument(
        "--dtype",
        "-d",
        default="f32",
        metavar="TYPE",
        help=f"element type: {', '.join(names[0] for names in DTYPE_NAMES.values())} (default f32)",
    )
    p.add_argument("--op", choices=list(REDUCTIONS), default="sum", help="reduction (default sum)")
    p.add_argument(
        "--inplace",
        action="store_true",
        help="in-place call (default: out of place, or in place when the IR allows only that); "
        "algorithms are compiled for it",
    )
    p.add_argument(
        "--topology",
        "-t",
        help="topology to time on (sim) or to compile an algorithm for; default: the one the "
        "algorithm or program names",
    )
    p.add_argument(
        "-D", "--define", action="append", default=[], metavar="NAME=VALUE", help="DSL program() parameter"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--model",
        choices=MODELS,
        default=None,
        help=f"timing model of the sim backend (default {DEFAULT_MODEL}; docs/nccl.md, Calibration)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 unless every output was compared with its expected result and matched "
        "(without it, sizes not checked or skipped are reported and exit 0)",
    )
    p.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="host memory the numpy and torch backends may use (default: $XCCL_MAX_MEMORY, else half "
        "the physical memory); larger sizes are refused before anything is allocated",
    )
    p.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help="torch: processes to run, one per rank; must be the IR's ranks (default: the IR's); "
        "under torchrun the launched job's processes are the ranks",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"torch: a rank that waits longer than this for one exchange ends the run, naming the rank "
        f"and level (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--dist",
        choices=DIST_BACKENDS,
        help="torch: the torch.distributed backend (default auto: nccl when every rank has a GPU of "
        "its own, else gloo)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    examples = ", ".join(example_names())
    p = sub.add_parser(
        "bench",
        help="benchmark an IR, algorithm or DSL program over sizes, as nccl-tests reports it",
        description=(
            f"FILE is {FILE_HELP}; examples: {examples}. For each size (rounded down to what the "
            "runtime selects the IR for) the backend runs the IR --warmup times, then --repeats "
            "times, and the median is reported with algbw and busbw (nccl-tests' definitions) and "
            "the check of the outputs against the NumPy reference. Ctrl-C keeps the finished rows."
        ),
    )
    _common(p, sorted(backends()))
    p.add_argument(
        "--sizes", "-s", default="1KiB:1MiB", help="LOW:HIGH[:FACTOR] or a,b,c (default 1KiB:1MiB, doubling)"
    )
    p.add_argument("--warmup", "-w", type=int, default=1, help="untimed runs per size (default 1)")
    p.add_argument("--repeats", "-n", type=int, default=5, help="timed runs per size (default 5)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "run",
        help="execute an IR, algorithm or DSL program once and check it against the NumPy reference",
        description=f"FILE is {FILE_HELP}; examples: {examples}.",
    )
    _common(p, sorted(name for name, cls in backends().items() if cls.checks))
    p.add_argument("--size", default="1MiB", help="nccl-tests size: the larger buffer (default 1MiB)")
    p.set_defaults(func=cmd_run)

"""``xccl bench`` (nccl-tests-style table over sizes) and ``xccl run`` (one checked execution).

Both take an IR, an algorithm or a DSL program, compile what needs compiling, and run it on a
backend of ``runtime.bench``'s registry. A wrong result (or a deadlock) exits with status 1 and
one line naming rank, buffer, chunk and index (or the blocked steps); bad input exits with 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codegen.errors import DslError
from codegen.examples import example_names
from common.units import format_size, parse_size, parse_size_range
from xccl.cli.algorithms import algorithm_topology
from xccl.cli.choices import REDUCTIONS, RUNTIME_BACKENDS
from xccl.cli.common import input_kind
from xccl.cli.output import print_json, print_table, progress

if TYPE_CHECKING:
    from codegen.ir import IR
    from runtime.bench import BenchReport, BenchRow
    from topologies.model import Topology

__all__ = ["Runnable", "load_runnable", "register"]

FILE_HELP = (
    "an IR (MSCCL XML in either dialect, or xccl's JSON IR: run as written), an algorithm "
    "(.json from xccl baseline or xccl synth: compiled first) or a DSL program (.py defining "
    "program() or building one Program, or example:NAME: compiled first)"
)
DTYPE_NAMES = ("f16", "f32", "f64", "i8", "u8", "i32", "u32", "i64", "u64")
INTERRUPTED = 130


@dataclass(frozen=True)
class Runnable:
    """What a FILE argument gives: the IR to run and the topology it names (if any)."""

    ir: IR
    topology: Topology | None


def load_runnable(
    source: str, params: dict[str, object], inplace: bool = False, topology: str | None = None
) -> Runnable:
    """The IR in (or compiled from) ``source``; algorithms are compiled for in-place calls when
    ``inplace``. ``topology`` overrides the one the algorithm or program names."""
    from codegen.compiler import compile_algorithm, compile_program
    from codegen.formats import load_ir
    from codegen.loader import load_program
    from synth.algorithm import Algorithm
    from topologies import load

    kind = input_kind(source)
    if params and kind != "program":
        what = "an IR" if kind == "ir" else "an algorithm"
        raise DslError(f"{source}: -D applies to DSL programs, not to {what}")
    topo = load(topology) if topology else None
    if kind == "ir":
        ir = load_ir(source)
    elif kind == "program":
        prog = load_program(source, params)
        ir = compile_program(prog)
        topo = topo or prog.topology
    else:
        algo = Algorithm.load(source)
        topo = algorithm_topology(algo, topology, source)
        algo.verify(topo)
        ir = compile_algorithm(algo, topo, inplace=inplace)
    return Runnable(ir, topo)


def _placement(ir: IR, inplace: bool) -> bool:
    """In place if asked, or if the IR allows nothing else."""
    return inplace or (ir.inplace and not ir.outofplace)


def _where(inplace: bool) -> str:
    return "in-place" if inplace else "out-of-place"


def _prepare(args: argparse.Namespace) -> tuple[Runnable, bool]:
    """The runnable FILE and whether the call is in place."""
    from codegen.loader import parse_params
    from runtime.reference import parse_dtype

    parse_dtype(args.dtype)
    runnable = load_runnable(args.file, parse_params(args.define), args.inplace, args.topology)
    return runnable, _placement(runnable.ir, args.inplace)


def _failure(row: BenchRow) -> str:
    return f"failed at {format_size(row.size_bytes)}: {row.error}"


def _report_json(args: argparse.Namespace, report: BenchReport) -> dict:
    return {"file": args.file, **report.to_json()}


def _exit_status(report: BenchReport) -> int:
    if report.interrupted:
        return INTERRUPTED
    return 0 if report.ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from runtime.bench import TABLE_HEADERS, BenchError, backends, bench

    sizes = parse_size_range(args.sizes)
    runnable, inplace = _prepare(args)
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

    report = bench(
        ir,
        sizes,
        backend=args.backend,
        dtype=args.dtype,
        op=args.op,
        inplace=inplace,
        warmup=args.warmup,
        repeats=args.repeats,
        topology=runnable.topology,
        on_row=on_row,
    )
    if args.json:
        print_json(_report_json(args, report))
    else:
        print(
            f"# {ir.name}: {ir.collective} on {ir.num_ranks} ranks, {_where(inplace)}, backend {report.backend}"
        )
        print(f"# device: {report.device}")
        checked = "outputs checked against the NumPy reference"
        if not backends()[report.backend].checks:
            checked = "outputs not checked (this backend moves no data)"
        print(
            f"# {report.timing} time, median of {report.repeats} run(s) after {report.warmup} "
            f"warm-up run(s); {args.dtype} {args.op}; {checked}"
        )
        print_table(TABLE_HEADERS, [row.cells() for row in report.rows])
        timed = [row.busbw_GBps for row in report.rows if row.busbw_GBps is not None]
        if timed:
            print(f"# Avg bus bandwidth    : {sum(timed) / len(timed):.3f} GB/s")
    failed = [row for row in report.rows if row.failed]
    if failed:
        print(f"xccl bench: {_failure(failed[0])}", file=sys.stderr)
    if report.interrupted:
        progress(f"interrupted: {len(report.rows)} of {len(sizes)} sizes done")
    return _exit_status(report)


def cmd_run(args: argparse.Namespace) -> int:
    from runtime.bench import bench

    size = parse_size(args.size)
    runnable, inplace = _prepare(args)
    ir = runnable.ir
    report = bench(
        ir,
        [size],
        backend=args.backend,
        dtype=args.dtype,
        op=args.op,
        inplace=inplace,
        warmup=0,
        repeats=1,
        topology=runnable.topology,
    )
    if report.interrupted:
        progress("interrupted")
        return INTERRUPTED
    (row,) = report.rows
    if args.json:
        print_json(_report_json(args, report))
    if row.failed:
        print(f"xccl run: {_failure(row)}", file=sys.stderr)
        return 1
    if not args.json:
        rounded = "" if row.size_bytes == size else f", rounded down from {format_size(size)}"
        print(
            f"ok: {ir.name}: {ir.collective} on {ir.num_ranks} ranks, {format_size(row.size_bytes)} "
            f"({row.count} {row.dtype}{rounded}), {row.op}, {_where(inplace)}: every output matches "
            f"the NumPy reference ({report.backend}, {row.time_us / 1e3:.2f} ms)"
        )
    return 0


def _common(p: argparse.ArgumentParser, choices: list[str]) -> None:
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
        + "; ".join(f"{n}: {RUNTIME_BACKENDS[n][0]}" for n in choices),
    )
    p.add_argument(
        "--dtype",
        "-d",
        default="f32",
        metavar="TYPE",
        help=f"element type: {', '.join(DTYPE_NAMES)} (default f32)",
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
    _common(p, sorted(RUNTIME_BACKENDS))
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
    _common(p, sorted(name for name, (_, checks) in RUNTIME_BACKENDS.items() if checks))
    p.add_argument("--size", default="1MiB", help="nccl-tests size: the larger buffer (default 1MiB)")
    p.set_defaults(func=cmd_run)

"""``xccl compile`` (algorithm, DSL program or IR -> MSCCL XML / JSON IR) and ``xccl check``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from codegen.errors import CodegenError, DslError
from codegen.examples import example_names
from codegen.formats import FORMATS
from codegen.passes import PASSES
from codegen.protocols import PROTOCOLS
from codegen.rules import DIALECTS
from common.errors import XcclError
from common.units import parse_size
from xccl.cli.algorithms import algorithm_topology
from xccl.cli.common import input_kind
from xccl.cli.output import format_table, slow_stage
from xccl.cli.solving import positive_int

if TYPE_CHECKING:
    from codegen.dsl import ChunkProgram
    from codegen.ir import IR
    from codegen.pipeline import PassRecord, PipelineResult

__all__ = ["register"]

IR_PASSES = ("fold_deps_into_nops", "mark_has_dep", "size_buffers")
"""What an IR read from a file goes through before it is written again (normalization)."""


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except XcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


def cmd_compile(args: argparse.Namespace) -> int:
    from codegen.formats import save_ir, write_ir

    with slow_stage(f"compiling {args.input}"):
        result = COMPILERS[input_kind(args.input)](args)
    ir = _selected(_result_ir(result), args.min_bytes, args.max_bytes)
    _report_passes(result.records, args.time_passes)
    if args.output:
        with slow_stage(f"writing {args.output}"):
            save_ir(ir, args.output, args.dialect, force=args.force)
        print(f"wrote {args.output}: {_summary(ir)}, checked for {_target(args.dialect)}")
    else:
        sys.stdout.write(write_ir(ir, args.dialect))
    return 0


def _compile_ir(args: argparse.Namespace) -> PipelineResult:
    """An IR file: checked for what it computes, then normalized and checked again."""
    from codegen.formats import load_ir
    from codegen.pipeline import run_pipeline

    for flag, value in (
        ("--instances", args.instances),
        ("--channels", args.channels),
        ("--inplace", args.inplace),
    ):
        if value:
            raise DslError(f"{args.input}: {flag} applies to programs and algorithms, not to an IR")
    ir = load_ir(args.input)
    _check_what_it_computes(ir, args.input)
    if args.protocol:
        ir = replace(ir, protocol=args.protocol)
    return run_pipeline(ir, IR_PASSES, verify_each=args.verify_each, print_after=tuple(args.print_after))


def _compile_program(args: argparse.Namespace) -> PipelineResult:
    """A DSL program (a file, or a shipped example) with its ``-D`` parameters."""
    from codegen.loader import load_program, parse_params

    prog = load_program(args.input, parse_params(args.define))
    if args.inplace:
        raise DslError(f"{args.input}: --inplace applies to algorithms; a program declares inplace itself")
    return _run_compiler(prog, args)


def _compile_algorithm(args: argparse.Namespace) -> PipelineResult:
    """An algorithm file, verified on its topology and lowered to a program first."""
    from codegen.lower import lower_algorithm
    from synth.algorithm import Algorithm

    algo = Algorithm.load(args.input)
    topo = algorithm_topology(algo, args.topology, args.input)
    algo.verify(topo)
    return _run_compiler(lower_algorithm(algo, topo, inplace=args.inplace), args)


COMPILERS: dict[str, Callable[[argparse.Namespace], PipelineResult]] = {
    "ir": _compile_ir,
    "program": _compile_program,
    "algorithm": _compile_algorithm,
}
"""What ``xccl compile`` does with each kind of input (``xccl.cli.common.input_kind``)."""


def _run_compiler(prog: ChunkProgram, args: argparse.Namespace) -> PipelineResult:
    from codegen.compiler import run_compiler

    return run_compiler(
        prog,
        channels=args.channels,
        instances=args.instances,
        protocol=args.protocol,
        dialect=None if args.dialect == "json" else args.dialect,
        verify_each=args.verify_each,
        print_after=tuple(args.print_after),
    )


def _result_ir(result: PipelineResult) -> IR:
    from codegen.ir import IR

    if not isinstance(result.result, IR):
        raise CodegenError("the pipeline did not produce an IR")
    return result.result


def _selected(ir: IR, min_bytes: int | None, max_bytes: int | None) -> IR:
    """``ir`` with the size window ``--min-bytes``/``--max-bytes`` set where given."""
    if min_bytes is not None:
        ir = replace(ir, min_bytes=min_bytes)
    if max_bytes is not None:
        ir = replace(ir, max_bytes=max_bytes)
    return ir


def _report_passes(records: Sequence[PassRecord], time_passes: bool) -> None:
    """On stderr: the stages ``--print-after`` asked for, and (``--time-passes``) each pass's time."""
    for record in records:
        if record.dump is not None:
            _stderr(f"--- after {record.name} ---\n{record.dump}")
    if time_passes:
        rows = [[r.name, f"{1000 * r.seconds:.2f}"] for r in records]
        rows.append(["total", f"{1000 * sum(r.seconds for r in records):.2f}"])
        _stderr(format_table(["pass", "ms"], rows))


def _check_what_it_computes(ir: IR, where: str) -> None:
    """An IR given as input is re-emitted only if it computes its collective: its structure first
    (the symbolic execution needs it), then every call it is marked for."""
    from codegen.check import check_ir
    from codegen.errors import IRCheckError
    from codegen.semantics import check_result

    try:
        check_ir(ir, final=False)
        check_result(ir)
    except IRCheckError as exc:
        raise IRCheckError(f"{where}: {exc}") from None


def _target(fmt: str) -> str:
    return f"the {fmt} runtime" if fmt in DIALECTS else "every runtime's universal rules"


def _summary(ir: IR) -> str:
    tbs = [len(g.threadblocks) for g in ir.gpus]
    steps = max((len(tb.ops) for g in ir.gpus for tb in g.threadblocks), default=0)
    return (
        f"{ir.name}: {ir.collective} on {ir.num_ranks} ranks, {ir.nchannels} channel(s), "
        f"{min(tbs)}-{max(tbs)} threadblocks per rank, at most {steps} steps per threadblock"
    )


def cmd_check(args: argparse.Namespace) -> int:
    from codegen.check import find_problems
    from codegen.formats import load_ir_facts
    from codegen.semantics import find_wrong_result

    path = Path(args.file)
    with slow_stage(f"loading {path}"):
        ir, facts = load_ir_facts(path)
    if args.dialect == "auto":
        dialect = None if facts is None else facts.dialect
    else:
        dialect = None if args.dialect == "none" else args.dialect
    with slow_stage(f"checking {path}"):
        problems = find_problems(ir, dialect, facts=facts)
        wrong = None if problems else find_wrong_result(ir)  # both before any output: limits refuse at once
    target = f"the {dialect} runtime" if dialect else "the universal rules"
    print(f"{path}: {_summary(ir)}")
    deps = sum(len(op.deps) for g in ir.gpus for tb in g.threadblocks for op in tb.ops)
    print(
        f"  protocol {ir.protocol}, {ir.nchunksperloop} chunks per loop, {deps} cross-threadblock dependencies"
    )
    if not problems and wrong is None:
        print(f"  ok: passes the static checks of {target}; {_computes(ir)}")
        return 0
    if wrong is not None:
        print(f"  passes the static checks of {target}, but computes a wrong result:\n  - {wrong}")
        return 1
    print(f"  {len(problems)} problem(s) for {target}:")
    for p in problems[: args.limit]:
        print(f"  - {p}")
    if len(problems) > args.limit:
        print(f"  ... and {len(problems) - args.limit} more")
    return 1


def _computes(ir: IR) -> str:
    from codegen.semantics import modes

    calls = " and ".join("in-place" if place else "out-of-place" for place in modes(ir))
    if ir.collective == "custom":
        return "what a custom collective computes is not checked"
    if not calls:
        return "marked for no call (inplace=0, outofplace=0), so nothing it computes is checked"
    return f"computes {ir.collective} for {calls} calls"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compile",
        help="compile an algorithm, a DSL program or an IR into MSCCL XML or JSON IR",
        description=(
            "INPUT is an algorithm file (.json, from xccl baseline or xccl synth), a DSL program "
            "(.py defining program() or building one ChunkProgram, or example:NAME for "
            f"{', '.join(example_names())}), or an IR (.xml or IR .json) to check and re-emit."
        ),
    )
    p.add_argument("input", help="algorithm .json, program .py / example:NAME, or IR .xml/.json")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--dialect", choices=list(FORMATS), default="azure", help="output format (default azure)")
    p.add_argument("--protocol", choices=PROTOCOLS, help="NCCL protocol (default: the program's, Simple)")
    p.add_argument(
        "--instances",
        type=positive_int,
        help="replicate over N interleaved chunk slices (default: the program's)",
    )
    p.add_argument(
        "--channels",
        type=positive_int,
        help="spread flows over N channels (default: as few as the dialect allows)",
    )
    p.add_argument("--inplace", action="store_true", help="algorithms: compile for in-place calls")
    p.add_argument("--topology", "-t", help="algorithms: topology file, when the algorithm's is not shipped")
    p.add_argument(
        "-D", "--define", action="append", default=[], metavar="NAME=VALUE", help="program() parameter"
    )
    p.add_argument("--min-bytes", type=_size, help="smallest call size the XML is selected for (default 0)")
    p.add_argument(
        "--max-bytes", type=_size, help="largest call size the XML is selected for (default: no limit)"
    )
    p.add_argument(
        "--verify-each", action="store_true", help="check every stage's invariants after each pass"
    )
    p.add_argument(
        "--print-after",
        action="append",
        default=[],
        choices=list(PASSES),
        metavar="PASS",
        help=f"print the stage after PASS (repeatable): {', '.join(PASSES)}",
    )
    p.add_argument("--time-passes", action="store_true", help="print how long each pass took")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("check", help="static checks of an MSCCL XML or JSON IR file, as a report")
    p.add_argument("file")
    p.add_argument(
        "--dialect",
        choices=["auto", *DIALECTS, "none"],
        default="auto",
        help="runtime whose limits apply (auto: from the XML; none: universal rules only)",
    )
    p.add_argument("--limit", type=_count, default=20, help="problems to list (default 20)")
    p.set_defaults(func=cmd_check)

"""``xccl compile`` (algorithm, DSL program or IR -> MSCCL XML / JSON IR / MSCCL++ plan) and ``xccl check``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from codegen.errors import CodegenError, DslError
from codegen.examples import example_names
from codegen.formats import FORMATS
from codegen.passes import PASSES
from codegen.passes.aggregate_chunks import WINDOW
from codegen.protocols import PROTOCOLS
from codegen.rules import DIALECTS
from common.errors import XcclError
from common.forked import Forked, forked
from common.gc_pause import gc_paused
from common.units import format_size, parse_size
from runtime.datatypes import REDUCTIONS
from xccl.cli.algorithms import algorithm_topology
from xccl.cli.common import InputFile
from xccl.cli.output import format_table, slow_stage
from xccl.cli.solving import positive_int

if TYPE_CHECKING:
    from codegen.dsl import ChunkProgram
    from codegen.ir import IR
    from codegen.pipeline import PassRecord, PipelineResult
    from runtime.choice import Choice, Variant
    from synth.algorithm import Algorithm
    from topologies import Topology

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
    from codegen.formats import write_ir
    from common.files import check_writable, save_text

    if args.output:
        check_writable(args.output, args.force, CodegenError)
    with slow_stage(f"compiling {args.input}"):
        given = InputFile(args.input)
        result, topology = COMPILERS[given.kind](args, given)
    ir = _selected(_result_ir(result), args.min_bytes, args.max_bytes)
    _report_passes(result.records, args.time_passes)
    with slow_stage(f"writing {args.dialect}"):
        text = write_ir(ir, args.dialect, args.op, topology)
    if args.output:
        with slow_stage(f"writing {args.output}"):
            save_text(args.output, text, force=args.force, error=CodegenError)
        print(f"wrote {args.output}: {_summary(ir)}, checked for {_target(args.dialect)}{_plan_summary(args.dialect, text)}")
    else:
        sys.stdout.write(text)
    return 0


def _compile_ir(args: argparse.Namespace, given: InputFile) -> Compiled:
    """An IR file: checked for what it computes, then normalized and checked again (no topology)."""
    from codegen.formats import load_ir
    from codegen.pipeline import run_pipeline

    for flag, value in (
        ("--instances", args.instances),
        ("--channels", args.channels),
        ("--inplace", args.inplace),
        ("--port-order", args.port_order != "auto"),
    ):
        if value:
            raise DslError(f"{args.input}: {flag} applies to programs and algorithms, not to an IR")
    ir = load_ir(args.input)
    _check_what_it_computes(ir, args.input)
    if args.protocol:
        ir = replace(ir, protocol=args.protocol)
    return run_pipeline(ir, IR_PASSES, verify_each=args.verify_each, print_after=tuple(args.print_after)), None


def _compile_program(args: argparse.Namespace, given: InputFile) -> Compiled:
    """A DSL program (a file, or a shipped example) with its ``-D`` parameters."""
    from codegen.loader import load_program, parse_params

    prog = load_program(args.input, parse_params(args.define))
    if args.inplace:
        raise DslError(f"{args.input}: --inplace applies to algorithms; a program declares inplace itself")
    return _run_compiler(prog, args, args.port_order == "on"), prog.topology


@gc_paused()  # loading, verifying and lowering build millions of acyclic objects (common.gc_pause)
def _compile_algorithm(args: argparse.Namespace, given: InputFile) -> Compiled:
    """An algorithm file, verified on its topology and lowered to a program first."""
    from codegen.lower import lower_algorithm

    algo = given.algorithm()
    topo = algorithm_topology(algo, args.topology, args.input)
    if args.port_order != "auto":
        algo.verify(topo)
        return _run_compiler(lower_algorithm(algo, topo, inplace=args.inplace), args, args.port_order == "on"), topo
    verifier = _Verifier(algo, topo)
    try:
        result, choice = _choosing(algo, topo, args, verifier)
    except Exception:
        verifier.result()  # a schedule that does not verify: its error, not what it broke
        raise
    finally:
        verifier.close()
    if choice is not None:
        _stderr(choice.as_written(result.window).describe())
    return result, topo


class _Verifier:
    """An Algorithm's verification, in a child process (``common.forked``) started with its first
    compile: a second CPU is idle then (the Algorithm's timings, in children beside the lowering,
    are done), and the compile takes longer than the verification (2 s at 512 ranks)."""

    def __init__(self, algo: Algorithm, topo: Topology) -> None:
        self.algo, self.topo = algo, topo
        self.child: Forked[None] | None = None

    def start(self) -> None:
        if self.child is None:
            self.child = forked(partial(self.algo.verify, self.topo))

    def result(self) -> None:
        """Raise what the verification raises (verified here if no compile started it)."""
        if self.child is None:
            self.algo.verify(self.topo)
        else:
            self.child.result()

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


def _choosing(
    algo: Algorithm, topo: Topology, args: argparse.Namespace, verifier: _Verifier
) -> tuple[PipelineResult, Choice | None]:
    """``runtime.choice.compile_choosing`` of ``algo`` with the command's options, verified
    beside its compiles (the result once verified)."""
    from runtime.choice import compile_choosing

    def run(program: ChunkProgram, v: Variant) -> PipelineResult:
        verifier.start()
        return _run_compiler(program, args, v.port_order, v.window, v.channels, v.port_overlap, v.protocol, True)

    chosen = compile_choosing(
        algo, topo, run, _result_ir, protocol=args.protocol, channels=args.channels, inplace=args.inplace
    )
    verifier.result()
    return chosen


Compiled = tuple["PipelineResult", "Topology | None"]
"""What a compiler of ``xccl compile`` gives: the pipeline's result and the topology, where known."""

COMPILERS: dict[str, Callable[[argparse.Namespace, InputFile], Compiled]] = {
    "ir": _compile_ir,
    "program": _compile_program,
    "algorithm": _compile_algorithm,
}
"""What ``xccl compile`` does with each kind of input (``xccl.cli.common.InputFile``)."""


def _run_compiler(
    prog: ChunkProgram,
    args: argparse.Namespace,
    port_order: bool = False,
    window: float | None = None,
    channels: int | None = None,
    port_overlap: bool = False,
    protocol: str | None = None,
    check_beside: bool = False,
) -> PipelineResult:
    """The pipeline with the command's options (``window``, ``channels``, ``port_overlap``,
    ``protocol``: a variant's, where set; ``check_beside``: the choice takes the check's verdict)."""
    from codegen.compiler import run_compiler

    return run_compiler(
        prog,
        channels=channels or args.channels,
        window=WINDOW if window is None else window,
        instances=args.instances,
        protocol=protocol or args.protocol,
        dialect=None if args.dialect == "json" else args.dialect,
        verify_each=args.verify_each,
        print_after=tuple(args.print_after),
        port_order=port_order,
        port_overlap=port_overlap,
        check_beside=check_beside,
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


def _plan_summary(fmt: str, text: str) -> str:
    """For an MSCCL++ plan, what the plan itself holds (it splits long threadblocks, adds scratch)."""
    import json

    if fmt not in DIALECTS or DIALECTS[fmt].plan is None:
        return ""
    plan = json.loads(text)
    tbs = [len(g["threadblocks"]) for g in plan["gpus"]]
    ops = max(len(tb["ops"]) for g in plan["gpus"] for tb in g["threadblocks"])
    scratch = max(g["scratch_chunks"] for g in plan["gpus"])
    return (
        f"; plan ({plan['xccl']['format']}): {min(tbs)}-{max(tbs)} threadblocks per rank, at most {ops} ops "
        f"per threadblock, up to {scratch} scratch chunks, messages of {plan['min_message_size']} to "
        f"{plan['max_message_size']} B ({format_size(plan['max_message_size'])})"
    )


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
    plan = _plan_text(path)
    if plan is not None:
        return _check_plan(path, plan, args)
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
    return _listed(problems, target, args.limit)


def _listed(problems: Sequence[object], target: str, limit: int) -> int:
    """Print the first ``limit`` problems found for ``target``; the exit status of a failed check."""
    print(f"  {len(problems)} problem(s) for {target}:")
    for p in problems[:limit]:
        print(f"  - {p}")
    if len(problems) > limit:
        print(f"  ... and {len(problems) - limit} more")
    return 1


def _plan_text(path: Path) -> str | None:
    """The text of ``path`` if it is an MSCCL++ execution plan (a JSON object of that shape)."""
    from codegen.errors import XmlFormatError
    from codegen.formats.mscclpp_json import is_plan
    from common.files import parse_json, read_text

    if path.suffix != ".json":
        return None
    text = read_text(path, XmlFormatError)
    try:
        doc = parse_json(text, str(path), XmlFormatError)
    except XcclError:
        return None  # not JSON: the IR reader says why
    return text if is_plan(doc) else None


def _check_plan(path: Path, text: str, args: argparse.Namespace) -> int:
    """An MSCCL++ plan, by the independent validator (it reads only the JSON: structure, limits,
    channel pairing, signal/wait balance, happens-before over two launches, a NumPy run)."""
    import json

    from codegen.formats.mscclpp_validator import violations

    if args.dialect not in ("auto", "mscclpp"):
        raise CodegenError(f"{path}: an MSCCL++ execution plan is checked for --dialect mscclpp, not {args.dialect}")
    problems = violations(text)
    plan = json.loads(text)
    gpus = plan["gpus"] if isinstance(plan.get("gpus"), list) else []
    tbs = [len(g["threadblocks"]) for g in gpus if isinstance(g, dict) and isinstance(g.get("threadblocks"), list)]
    tbs = tbs or [0]
    print(
        f"{path}: MSCCL++ plan {plan.get('name')!r}: {plan.get('collective')} on {len(gpus)} ranks, "
        f"{min(tbs)}-{max(tbs)} threadblocks per rank, protocol {plan.get('protocol')}"
    )
    if not problems:
        print(
            "  ok: structure, limits, channel pairing and signal/wait balance of the MSCCL++ executor; no race "
            f"or deadlock over two launches; computes {plan['collective']} (NumPy run of the plan)"
        )
        return 0
    return _listed(problems, "the MSCCL++ executor", args.limit)


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
    p.add_argument(
        "--format",
        "--dialect",
        dest="dialect",
        choices=list(FORMATS),
        default="azure",
        help="output format: MSCCL XML for a runtime, our JSON IR, or an MSCCL++ plan (default azure)",
    )
    p.add_argument(
        "--op",
        choices=list(REDUCTIONS),
        default="sum",
        help="reduction the schedule will be called with, checked against the runtime (default sum; "
        "an MSCCL++ plan only sums)",
    )
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        help="NCCL protocol (default: the program's, Simple; for a timed algorithm another where no Simple "
        "compile is within 10%% of its Algorithm and its Algorithm runs faster in that one: LL at small sizes)",
    )
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
    p.add_argument(
        "--port-order",
        choices=["auto", "on", "off"],
        default="auto",
        help="a timed schedule's sends take each port in the schedule's order (auto: compile both ways and "
        "keep the faster in the IR simulator at the synthesized size, said on stderr; default auto)",
    )
    p.add_argument("--topology", "-t", help="algorithms: topology file, when the algorithm's is not shipped")
    p.add_argument(
        "-D", "--define", action="append", default=[], metavar="NAME=VALUE", help="program() parameter"
    )
    p.add_argument("--min-bytes", type=_size, help="smallest call size the XML is selected for (default 0)")
    p.add_argument(
        "--max-bytes",
        type=_size,
        help="largest call size the file is selected for (default: no limit; msccl needs one for a schedule "
        "with scratch)",
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

    p = sub.add_parser(
        "check", help="static checks of an MSCCL XML or JSON IR file, or of an MSCCL++ plan, as a report"
    )
    p.add_argument("file")
    p.add_argument(
        "--dialect",
        choices=["auto", *DIALECTS, "none"],
        default="auto",
        help="runtime whose limits apply (auto: from the XML, mscclpp for a plan; none: universal rules only)",
    )
    p.add_argument("--limit", type=_count, default=20, help="problems to list (default 20)")
    p.set_defaults(func=cmd_check)

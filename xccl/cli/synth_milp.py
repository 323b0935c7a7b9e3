"""``xccl synth milp``: TACCL-style synthesis from a communication sketch with open MILP solvers."""

from __future__ import annotations

import argparse

from common.units import format_size, parse_size
from xccl.cli.choices import MILP_COLLECTIVES, MILP_SOLVERS, MILP_STAGE_TIME_LIMIT_S, MILP_TIME_LIMIT_S
from xccl.cli.common import add_model_args, params_from_args, positive_seconds, topology_from_args
from xccl.cli.output import progress
from xccl.cli.solving import EXIT_INTERRUPTED, describe_limits, long_command, positive_int, write_or_print

__all__ = ["register"]


@long_command
def cmd_milp(args: argparse.Namespace) -> int:
    from common.files import check_writable
    from synth.cost import simulate
    from synth.errors import AlgorithmFormatError
    from synth.milp.pipeline import Options
    from synth.milp.synthesis import synthesize

    if args.output:
        check_writable(args.output, args.force, AlgorithmFormatError)
    topo = topology_from_args(args)
    size = parse_size(args.size) if args.size is not None else None
    limits = describe_limits(args.time_limit, args.stage_time_limit, "stage solve")
    params = params_from_args(args)
    options = Options(
        solver=args.solver,
        time_limit_s=args.time_limit,
        stage_time_limit_s=args.stage_time_limit,
        threads=args.threads,
        chunkup=args.chunkup,
        params=params,
    )
    try:
        result = synthesize(
            topo, args.collective, args.sketch, size, args.root, options, log=lambda m: progress(f"milp: {m}")
        )
    except KeyboardInterrupt:
        progress("milp: interrupted before an algorithm was verified; nothing written")
        return EXIT_INTERRUPTED
    algo = result.algorithm
    size = dict(algo.provenance.params).get("size_bytes", size)
    note = " (interrupted: best verified result kept)" if result.interrupted else ""
    if result.timed_out and not result.interrupted:
        note = " (stopped at the time limit: best verified result kept)"
    modeled = simulate(algo, topo, float(size), params)  # the file's time, as `xccl cost` gives it
    summary = (
        f"{algo.name}: verified; {algo.num_sends} sends, chunkup {result.chunkup}, "
        f"modeled {modeled.time_us:.2f} us ({modeled.model}) = {modeled.algbw_GBps:.2f} GB/s algbw "
        f"at {format_size(int(size))}; {algo.provenance.solver} in {result.seconds:.1f} s, {limits}{note}"
    )
    write_or_print(algo, args, summary)
    return EXIT_INTERRUPTED if result.interrupted else 0


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    """What to synthesize: topology, sketch, collective, root, size, and where to write it."""
    p.add_argument("--topology", "-t", required=True, help="shipped machine (ndv2x2), family or JSON file")
    p.add_argument("--sketch", "-k", required=True, help="shipped sketch name (ndv2x2-relay) or JSON file")
    p.add_argument(
        "--collective",
        "-C",
        required=True,
        choices=MILP_COLLECTIVES,
        metavar="COLL",
        help="%(choices)s",
    )
    p.add_argument("--root", type=int, default=None, help="root of broadcast/reduce (default 0)")
    p.add_argument(
        "--size", "-s", help="buffer size as nccl-tests counts it (default: the sketch's target_size)"
    )
    p.add_argument("-o", "--output", help="algorithm file to write (default: print it)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")


def _add_solver_args(p: argparse.ArgumentParser) -> None:
    """How to solve: back end, time limits, threads, chunkup, the timing model."""
    p.add_argument(
        "--solver",
        choices=MILP_SOLVERS,
        default=None,
        metavar="SOLVER",
        help="MILP back end, one of %(choices)s (default: the first available, in that order)",
    )
    p.add_argument(
        "--time-limit",
        type=positive_seconds,
        default=MILP_TIME_LIMIT_S,
        metavar="SEC",
        help="seconds of wall time in all; then the best verified result so far is kept "
        f"(default {MILP_TIME_LIMIT_S:g})",
    )
    p.add_argument(
        "--stage-time-limit",
        type=positive_seconds,
        default=MILP_STAGE_TIME_LIMIT_S,
        metavar="SEC",
        help=f"seconds per MILP or LP solve (default {MILP_STAGE_TIME_LIMIT_S:g})",
    )
    p.add_argument("--threads", type=positive_int, default=1, metavar="N", help="solver threads (default 1)")
    p.add_argument(
        "--chunkup",
        type=positive_int,
        default=None,
        metavar="N",
        help="pieces per chunk (default: the sketch's, or automatic)",
    )
    add_model_args(p)  # the calibrated model: the schedule is optimised for where it runs


def register(methods: argparse._SubParsersAction) -> None:
    p = methods.add_parser(
        "milp",
        help="TACCL-style: route, order and schedule chunks with MILPs guided by a communication sketch",
        description="Synthesize a verified algorithm from a communication sketch (see docs/sketch-format.md).",
        epilog="exit status: 0 done, 2 bad input, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM); "
        "after an interrupt the best verified result so far is still written",
    )
    _add_problem_args(p)
    _add_solver_args(p)
    p.set_defaults(func=cmd_milp)

"""``xccl synth milp``: TACCL-style synthesis from a communication sketch with open MILP solvers."""

from __future__ import annotations

import argparse

from common.errors import XcclError
from common.units import format_size, parse_size
from xccl.cli.choices import MILP_COLLECTIVES, MILP_SOLVERS
from xccl.cli.common import topology_from_args
from xccl.cli.output import progress
from xccl.cli.solving import EXIT_INTERRUPTED

__all__ = ["register"]


class _ArgumentError(XcclError):
    """A flag value out of range (one line, exit 2, like every bad input)."""


def cmd_milp(args: argparse.Namespace) -> int:
    from synth.cost import algbw_GBps
    from synth.milp.pipeline import Options
    from synth.milp.synthesis import synthesize

    if args.time_limit <= 0:
        raise _ArgumentError(f"--time-limit: expected seconds > 0, got {args.time_limit:g}")
    if args.threads < 1:
        raise _ArgumentError(f"--threads: expected at least 1, got {args.threads}")
    if args.overhead_us < 0:
        raise _ArgumentError(f"--overhead-us: expected microseconds >= 0, got {args.overhead_us:g}")
    if args.chunkup is not None and args.chunkup < 1:
        raise _ArgumentError(f"--chunkup: expected at least 1, got {args.chunkup}")
    if args.output and not args.force:
        from pathlib import Path

        if Path(args.output).exists():
            raise _ArgumentError(f"{args.output}: file already exists; use --force to overwrite")
    topo = topology_from_args(args)
    size = parse_size(args.size) if args.size is not None else None
    options = Options(
        solver=args.solver,
        time_limit_s=args.time_limit,
        threads=args.threads,
        chunkup=args.chunkup,
        overhead_us=args.overhead_us,
    )
    result = synthesize(
        topo, args.collective, args.sketch, size, args.root, options, log=lambda m: progress(f"milp: {m}")
    )
    algo = result.algorithm
    params = dict(algo.provenance.params)
    size = params.get("size_bytes", size)
    note = " (interrupted: best verified result kept)" if result.interrupted else ""
    summary = (
        f"{algo.name}: verified; {algo.num_sends} sends, chunkup {result.chunkup}, "
        f"modeled {result.makespan_us:.2f} us = {algbw_GBps(float(size), result.makespan_us):.2f} GB/s algbw "
        f"at {format_size(int(size))}; {algo.provenance.solver} in {result.seconds:.1f} s{note}"
    )
    if args.output:
        algo.save(args.output, force=args.force)
        print(f"wrote {args.output}: {summary}")
    else:
        print(algo.describe())
        print(summary)
    return EXIT_INTERRUPTED if result.interrupted else 0


def register(methods: argparse._SubParsersAction) -> None:
    p = methods.add_parser(
        "milp",
        help="TACCL-style: route, order and schedule chunks with MILPs guided by a communication sketch",
        description="Synthesize a verified algorithm from a communication sketch (see docs/sketch-format.md).",
    )
    p.add_argument("--topology", "-t", required=True, help="shipped machine (ndv2x2), family or JSON file")
    p.add_argument("--sketch", "-k", required=True, help="shipped sketch name (ndv2x2-relay) or JSON file")
    p.add_argument(
        "--collective",
        "-C",
        required=True,
        choices=MILP_COLLECTIVES,
        metavar="COLL",
        help=", ".join(MILP_COLLECTIVES),
    )
    p.add_argument("--root", type=int, default=None, help="root of broadcast/reduce (default 0)")
    p.add_argument(
        "--size", "-s", help="buffer size as nccl-tests counts it (default: the sketch's target_size)"
    )
    p.add_argument("-o", "--output", help="algorithm file to write (default: print it)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    p.add_argument(
        "--solver",
        choices=MILP_SOLVERS,
        default=None,
        help="MILP back end (default: first available: highs)",
    )
    p.add_argument(
        "--time-limit", type=float, default=30.0, metavar="S", help="seconds per stage solve (default 30)"
    )
    p.add_argument("--threads", type=int, default=1, metavar="N", help="solver threads (default 1)")
    p.add_argument(
        "--chunkup",
        type=int,
        default=None,
        metavar="N",
        help="pieces per chunk (default: the sketch's, or automatic)",
    )
    p.add_argument(
        "--overhead-us",
        type=float,
        default=0.0,
        metavar="US",
        help="per-send link occupancy of the target runtime; above 0, stage 3 may merge consecutive network sends",
    )
    p.set_defaults(func=cmd_milp)

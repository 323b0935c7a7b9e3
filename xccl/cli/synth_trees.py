"""``xccl synth trees``: bandwidth-optimal allgather, reducescatter and allreduce by tree packing."""

from __future__ import annotations

import argparse

from common.units import format_size, parse_size
from synth.defaults import TREES_COLLECTIVES, TREES_TIME_LIMIT_S
from xccl.cli.choices import RegistryNames
from xccl.cli.common import add_model_args, params_from_args, positive_seconds, topology_from_args
from xccl.cli.output import progress
from xccl.cli.solving import EXIT_INTERRUPTED, describe_limits, long_command, write_or_print

__all__ = ["register"]

DEFAULT_SIZE = "1GiB"
WITHIN = RegistryNames("synth.trees.synthesis", "WITHIN")


@long_command
def cmd_trees(args: argparse.Namespace) -> int:
    from common.files import check_writable
    from synth.cost import simulate
    from synth.errors import AlgorithmFormatError, InfeasibleError
    from synth.trees import synthesize
    from synth.trees.synthesis import check_sends

    if args.within is not None and not args.hierarchical:
        raise InfeasibleError("--within: says how a hierarchical synthesis works inside a machine; add --hierarchical")
    if args.output:
        check_writable(args.output, args.force, AlgorithmFormatError)
    size = parse_size(args.size)
    topo = topology_from_args(args)
    # written or printed as an Algorithm, timed by the engine: refused before any work where that
    # Algorithm is too large to hold (docs/trees.md: a composed allgather at 4096 GPUs)
    check_sends(topo, args.collective, " as an Algorithm (the API composes and verifies it as arrays: docs/trees.md)")
    params = params_from_args(args)
    limits = describe_limits(args.time_limit)
    try:
        result = synthesize(
            topo,
            args.collective,
            size_bytes=size,
            time_limit_s=args.time_limit,
            hierarchical=args.hierarchical,
            within=args.within or "trees",
            log=progress,
            params=params,
        )
    except KeyboardInterrupt:
        progress("trees: interrupted before an algorithm was verified; nothing written")
        return EXIT_INTERRUPTED
    algo = result.algorithm
    progress(f"trees: timing {algo.num_sends} sends at {format_size(size)} (modeled)")
    timed = simulate(algo, topo, size, params)
    rate = "rates proven optimal" if result.optimal else "rates not proven optimal"
    note = " (interrupted: best packing kept)" if result.interrupted else ""
    summary = (
        f"{algo.name}: verified; {algo.num_sends} sends, modeled ({timed.model}) {timed.time_us:.2f} us = "
        f"{timed.algbw_GBps:.2f} GB/s algbw at {format_size(size)}; {rate}; "
        f"{result.seconds:.1f} s, {limits}{note}"
    )
    write_or_print(algo, args, summary)
    return EXIT_INTERRUPTED if result.interrupted else 0


def register(methods: argparse._SubParsersAction) -> None:
    p = methods.add_parser(
        "trees",
        help="ForestColl-style: pack spanning trees at the rate the topology's cuts allow",
        description="Synthesize a bandwidth-optimal allgather, reducescatter or allreduce by packing "
        "spanning trees under the topology's symmetry (docs/trees.md); the result is verified.",
        epilog="exit status: 0 done, 2 bad input, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM); "
        "an interrupt during the packing search keeps the best packing so far and still writes its algorithm",
    )
    p.add_argument(
        "--topology", "-t", required=True, help="shipped machine (dgx-h100x4), family or JSON file"
    )
    p.add_argument(
        "--collective", "-C", required=True, choices=TREES_COLLECTIVES, metavar="COLL", help="%(choices)s"
    )
    p.add_argument(
        "--size",
        "-s",
        default=DEFAULT_SIZE,
        help=f"buffer size as nccl-tests counts it, the chunks are chosen for it (default {DEFAULT_SIZE})",
    )
    p.add_argument(
        "--hierarchical",
        action="store_true",
        help="on identical machines: pack the trees between machines (one rail) and inside one machine "
        "apart, and compose them (far smaller problems; optimal only where the network binds)",
    )
    p.add_argument(
        "--within",
        choices=WITHIN,
        default=None,
        metavar="METHOD",
        help="with --hierarchical: how the allgather inside a machine is made, one of %(choices)s (default trees)",
    )
    p.add_argument(
        "--time-limit",
        type=positive_seconds,
        default=TREES_TIME_LIMIT_S,
        metavar="SEC",
        help="seconds of wall time for the packing searches in all; then each keeps its best packing "
        f"(default {TREES_TIME_LIMIT_S:g})",
    )
    add_model_args(p)  # the chunk count is chosen, and the result timed, in this model
    p.add_argument("-o", "--output", help="algorithm file to write (default: print it)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=cmd_trees)

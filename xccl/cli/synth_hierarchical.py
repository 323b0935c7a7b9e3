"""``xccl synth hierarchical``: the rail-aligned alltoall on identical machines, with its bound."""

from __future__ import annotations

import argparse
from dataclasses import replace

from common.units import format_size, parse_size
from xccl.cli.common import topology_from_args
from xccl.cli.output import progress
from xccl.cli.solving import EXIT_INTERRUPTED, long_command, positive_int, write_or_print

__all__ = ["register"]

DEFAULT_SIZE = "1GiB"


@long_command
def cmd_hierarchical(args: argparse.Namespace) -> int:
    from common.files import check_writable
    from synth.baselines import make_baseline
    from synth.baselines.hierarchical import check_alltoall_sends
    from synth.bounds import lower_bound_us
    from synth.collectives import make_collective
    from synth.cost import simulate, sized
    from synth.errors import AlgorithmFormatError
    from synth.timing import model_params

    if args.output:
        check_writable(args.output, args.force, AlgorithmFormatError)
    size = parse_size(args.size)
    topo = topology_from_args(args)
    n = topo.num_ranks
    check_alltoall_sends(topo, args.chunks)  # refused before any work: 31.4 M sends at 4096 GPUs
    progress(f"hierarchical: building and verifying the alltoall on {topo.name} ({n} ranks)")
    try:
        algo = make_baseline("hierarchical", topo, make_collective("alltoall", n, args.chunks, lazy=True))
    except KeyboardInterrupt:
        progress("hierarchical: interrupted before an algorithm was verified; nothing written")
        return EXIT_INTERRUPTED
    algo = replace(algo, provenance=sized(algo.provenance, size))  # the size the compiler times it at
    progress(f"hierarchical: timing {algo.num_sends} sends at {format_size(size)} (modeled)")
    bound = lower_bound_us(topo, make_collective("alltoall", n, args.chunks, lazy=True), size)
    ideal = simulate(algo, topo, size, model_params("ideal"))
    timed = simulate(algo, topo, size)
    summary = (
        f"{algo.name}: verified; {algo.num_sends} sends; modeled ({timed.model}) {timed.time_us:.2f} us, "
        f"modeled (ideal) {ideal.time_us:.2f} us = {100 * bound / ideal.time_us:.1f}% of the "
        f"line-rate lower bound {bound:.2f} us at {format_size(size)}"
    )
    write_or_print(algo, args, summary)
    return 0


def register(methods: argparse._SubParsersAction) -> None:
    p = methods.add_parser(
        "hierarchical",
        help="rail-aligned alltoall on identical machines: at the bound of the cut around a machine",
        description="An alltoall on K identical NVSwitch machines: each chunk moves inside its machine to "
        "the rank with its destination's local index, then across on that rank's NIC (its rail), one "
        "permutation of the machines per step; it meets the cut bound at bandwidth-bound sizes "
        "(docs/scale.md). Verified; allgather at scale is `xccl synth trees --hierarchical`.",
    )
    p.add_argument("--topology", "-t", required=True, help="K identical machines (dgx-h100x64) or a JSON file")
    p.add_argument("--collective", "-C", default="alltoall", choices=("alltoall",), metavar="COLL", help="alltoall")
    p.add_argument("--chunks", "-c", type=positive_int, default=1, help="chunks per pair of ranks (default 1)")
    p.add_argument("--size", "-s", default=DEFAULT_SIZE, help=f"buffer size it is timed at (default {DEFAULT_SIZE})")
    p.add_argument("-o", "--output", help="algorithm file to write (default: print it)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=cmd_hierarchical)

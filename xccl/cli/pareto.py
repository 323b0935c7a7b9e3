"""``xccl pareto``: the latency-bandwidth front of a collective on a topology (SMT synthesis)."""

from __future__ import annotations

import argparse

from xccl.cli.choices import DEFAULT_MAX_CHUNKS
from xccl.cli.common import add_collective_args, collective_from_args, topology_from_args
from xccl.cli.output import print_table
from xccl.cli.solving import (
    EXIT_INTERRUPTED,
    EXIT_OPEN,
    Progress,
    add_save_args,
    add_time_limit,
    check_targets,
    describe_limits,
    long_command,
    positive_int,
    save_algorithms,
    time_limits,
)

__all__ = ["register"]


@long_command
def cmd_pareto(args: argparse.Namespace) -> int:
    from synth.plots import plot_front
    from synth.report import Row, table
    from synth.smt import pareto_front

    topo = topology_from_args(args)
    name = collective_from_args(args, topo, 1).name  # validates the name and --root
    check_targets(args, args.plot)
    limit, each = time_limits(args)
    show = Progress(describe_limits(limit, each))
    front = pareto_front(
        topo,
        name,
        args.root,
        max_chunks=args.max_chunks,
        max_steps=args.max_steps,
        time_limit_s=limit,
        instance_time_limit_s=each,
        on_start=show.start,
        on_outcome=show.done,
    )
    if front.stop == "interrupted":
        show.interrupted()
    on_front = {id(a) for a in front.algorithms}
    rows = [Row.of(o, id(o.algorithm) in on_front) for o in front.outcomes]
    if name == "allreduce":  # composed from the two walks: one row per composition
        rows += [
            Row(name, a.num_steps, a.rounds, a.chunks, "composed", 0.0, a, id(a) in on_front)
            for a in front.found
        ]
    headers, cells = table(rows, topo)
    title = (
        f"{name} on {topo.name}: steps >= {front.steps_bound}, rounds per chunk >= "
        f"{front.rounds_per_chunk_bound}; {describe_limits(limit, each)}"
    )
    print_table(headers, cells, title=title)
    print(front.message())
    save_algorithms(list(front.algorithms), args)
    if args.plot and (front.algorithms or front.found):
        plot_front(
            args.plot,
            topo,
            front.algorithms,
            front.found,
            front.steps_bound,
            front.rounds_per_chunk_bound,
            title=f"{name} on {topo.name}",
            force=args.force,
        )
        print(f"wrote {args.plot}")
    if front.stop == "interrupted":
        return EXIT_INTERRUPTED
    return 0 if front.complete and front.stop != "time limit" else EXIT_OPEN


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pareto",
        help="Pareto-optimal algorithms in steps and rounds per chunk (SMT synthesis, SCCL's walk)",
        epilog="exit status: 0 done, 1 some instance or the whole walk timed out, 2 bad input, "
        "130 interrupted (Ctrl-C), 143 terminated (SIGTERM); the algorithms found so far are still written",
    )
    add_collective_args(p, chunks=False)
    p.add_argument(
        "--max-chunks",
        type=positive_int,
        default=DEFAULT_MAX_CHUNKS,
        metavar="N",
        help=f"stop after N chunks per rank (default {DEFAULT_MAX_CHUNKS}, at most 64)",
    )
    p.add_argument(
        "--max-steps", type=positive_int, metavar="N", help="try no instance with more than N steps"
    )
    p.add_argument("--plot", metavar="FILE", help="draw the front and modeled times to FILE (PNG)")
    add_time_limit(p, per_instance=True)
    add_save_args(p, single=False)
    p.set_defaults(func=cmd_pareto)

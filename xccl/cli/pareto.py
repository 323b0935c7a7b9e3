"""``xccl pareto``: the latency-bandwidth front of a collective on a topology (SMT synthesis)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from xccl.cli import solving
from xccl.cli.choices import DEFAULT_MAX_CHUNKS
from xccl.cli.common import add_collective_args, collective_from_args, topology_from_args
from xccl.cli.output import print_table

if TYPE_CHECKING:
    from synth.report import Row
    from synth.smt import Front

__all__ = ["register"]


def _rows(front: Front, name: str) -> list[Row]:
    """One row per instance tried, and for allreduce (composed from the two walks) one per composition."""
    from synth.report import Row

    on_front = {id(a) for a in front.algorithms}
    rows = [Row.of(o, id(o.algorithm) in on_front) for o in front.outcomes]
    if name == "allreduce":
        rows += [
            Row(name, a.num_steps, a.rounds, a.chunks, "composed", 0.0, a, id(a) in on_front)
            for a in front.found
        ]
    return rows


@solving.long_command
def cmd_pareto(args: argparse.Namespace) -> int:
    from synth.plots import plot_front
    from synth.report import legend, table
    from synth.smt import pareto_front

    topo = topology_from_args(args)
    name = collective_from_args(args, topo, 1).name  # validates the name and --root
    search = solving.start_search(args, args.plot)
    limits = search.arguments()
    front = pareto_front(
        topo, name, args.root, max_chunks=args.max_chunks, max_steps=args.max_steps, **limits
    )
    if front.stop == "interrupted":
        search.progress.interrupted()
    headers, cells = table(_rows(front, name), topo)
    title = (
        f"{name} on {topo.name}: steps >= {front.steps_bound}, rounds per chunk >= "
        f"{front.rounds_per_chunk_bound}; {search.describe()}\n{legend()}"
    )
    print_table(headers, cells, title=title)
    print(front.message())
    solving.save_algorithms(list(front.algorithms), args)
    if args.plot and (front.algorithms or front.found):
        bounds = (front.steps_bound, front.rounds_per_chunk_bound)
        title = f"{name} on {topo.name}"
        plot_front(args.plot, topo, front.algorithms, front.found, *bounds, title=title, force=args.force)
        print(f"wrote {args.plot}")
    if front.stop == "interrupted":
        return solving.EXIT_INTERRUPTED
    return 0 if front.complete and front.stop != "time limit" else solving.EXIT_OPEN


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
        type=solving.positive_int,
        default=DEFAULT_MAX_CHUNKS,
        metavar="N",
        help=f"stop after N chunks per rank (default {DEFAULT_MAX_CHUNKS}, at most 64)",
    )
    p.add_argument(
        "--max-steps", type=solving.positive_int, metavar="N", help="try no instance with more than N steps"
    )
    p.add_argument("--plot", metavar="FILE", help="draw the front and modeled times to FILE (PNG)")
    solving.add_time_limit(p, per_instance=True)
    solving.add_save_args(p, single=False)
    p.set_defaults(func=cmd_pareto)

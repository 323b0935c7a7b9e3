"""``xccl synth smt instance`` and ``xccl synth smt least-steps``: SCCL-style synthesis with z3."""

from __future__ import annotations

import argparse

from xccl.cli import solving
from xccl.cli.choices import ALLREDUCE_METHODS
from xccl.cli.common import add_collective_args, collective_from_args, topology_from_args

__all__ = ["register"]

EPILOG = (
    "exit status: 0 answered (an algorithm was written, or none exists), 1 a time limit left it open, "
    "2 bad input, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM)"
)


def _common(p: argparse.ArgumentParser, per_instance: bool) -> None:
    add_collective_args(p, chunks_default=1)
    p.add_argument(
        "--allreduce",
        choices=ALLREDUCE_METHODS,
        default="auto",
        help="allreduce as reducescatter + allgather (compose, needs C a multiple of the ranks) or the "
        "direct encoding; auto picks compose when it can (default)",
    )
    solving.add_time_limit(p, per_instance)


@solving.long_command
def cmd_instance(args: argparse.Namespace) -> int:
    from common.files import save_text
    from synth.smt import build_model, solve_instance
    from synth.smt.synthesizer import check_allreduce, check_instance, check_size

    topo = topology_from_args(args)
    coll = collective_from_args(args, topo)
    rounds = args.steps if args.rounds is None else args.rounds
    check_instance(args.steps, rounds, coll.chunks_per_rank)
    check_allreduce(coll, args.allreduce)
    check_size(topo, coll, args.steps, rounds)
    search = solving.start_search(args, args.smt2)
    if args.smt2:
        model = build_model(topo, coll, args.steps, rounds)
        save_text(args.smt2, model.smt2(), force=args.force)
        print(
            f"wrote {args.smt2}: SMT-LIB model of {coll.name} S={args.steps} R={rounds} C={coll.chunks_per_rank}"
        )
        return 0
    show = search.progress
    show.start(f"{coll.name} S={args.steps} R={rounds} C={coll.chunks_per_rank}")
    try:
        outcome = solve_instance(topo, coll, args.steps, rounds, search.limit, allreduce=args.allreduce)
    except KeyboardInterrupt:
        show.interrupted()
        return solving.EXIT_INTERRUPTED
    show.done(outcome)
    note = f"; {search.describe()}" if outcome.status.answered else ""
    print(outcome.message() + note)
    if outcome.algorithm is not None:
        solving.save_algorithms([outcome.algorithm], args)
    return 0 if outcome.status.answered else solving.EXIT_OPEN


@solving.long_command
def cmd_least_steps(args: argparse.Namespace) -> int:
    from synth.smt import least_steps
    from synth.smt.synthesizer import check_allreduce, check_size

    topo = topology_from_args(args)
    coll = collective_from_args(args, topo)
    check_allreduce(coll, args.allreduce)
    if args.max_steps is not None:
        check_size(topo, coll, args.max_steps, args.max_steps + args.extra_rounds)
    search = solving.start_search(args)
    limits = search.arguments()
    extra = args.extra_rounds
    result = least_steps(topo, coll, extra, args.max_steps, allreduce=args.allreduce, **limits)
    if result.stop == "interrupted":
        search.progress.interrupted()
        return solving.EXIT_INTERRUPTED
    print(
        f"{coll.name} on {topo.name} needs at least {result.steps_bound} steps (hop distances); "
        f"searched up to {result.max_steps}; {search.describe()}"
    )
    print(result.message())
    if result.algorithm is not None:
        solving.save_algorithms([result.algorithm], args)
    return 0 if result.proven else solving.EXIT_OPEN


def register(methods: argparse._SubParsersAction) -> None:
    p = methods.add_parser("smt", help="SCCL-style synthesis with z3: instances and least steps")
    sub = p.add_subparsers(dest="smt_command", required=True, metavar="COMMAND")

    q = sub.add_parser("instance", help="one instance: S steps, R rounds, C chunks per rank", epilog=EPILOG)
    _common(q, per_instance=False)
    q.add_argument("-s", "--steps", type=solving.positive_int, required=True, help="steps S")
    q.add_argument("-r", "--rounds", type=solving.positive_int, help="total rounds R >= S (default: S)")
    q.add_argument("--smt2", metavar="FILE", help="write the SMT-LIB model to FILE instead of solving")
    solving.add_save_args(q, single=True)
    q.set_defaults(func=cmd_instance)

    q = sub.add_parser(
        "least-steps",
        help="the fewest steps S with R = S + extra rounds, from the steps lower bound upward",
        epilog=EPILOG,
    )
    _common(q, per_instance=True)
    q.add_argument("--extra-rounds", type=int, default=0, metavar="K", help="R = S + K (default 0)")
    q.add_argument(
        "--max-steps",
        type=solving.positive_int,
        metavar="N",
        help="give up after N steps (default: the steps of a shortest-path schedule with one round per "
        "step, which always exists)",
    )
    solving.add_save_args(q, single=True)
    q.set_defaults(func=cmd_least_steps)

"""``xccl synth <method> ...``: one subcommand group per synthesis method."""

from __future__ import annotations

import argparse
import importlib

__all__ = ["METHOD_MODULES", "register"]

METHOD_MODULES = ("xccl.cli.synth_smt", "xccl.cli.synth_milp", "xccl.cli.synth_trees", "xccl.cli.synth_hierarchical")
"""Each module has ``register(subparsers)`` adding ``xccl synth <method>``; absent ones are skipped."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="synthesize algorithms (smt: SCCL style, milp: TACCL style, trees: ForestColl style)")
    methods = p.add_subparsers(dest="method", required=True, metavar="METHOD")
    for name in METHOD_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(methods)

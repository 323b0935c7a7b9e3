"""Arguments shared by several commands, and turning them into objects.

Like every ``xccl.cli`` module it imports only what building the parser needs at its top; the
packages a command runs on are imported inside it, so ``xccl --help`` loads no solver or graph library.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from codegen.errors import DslError
from codegen.examples import EXAMPLES_PREFIX
from common.errors import XcclError
from common.files import read_json_file
from synth.collectives import COLLECTIVES, ROOTED, Collective, CollectiveError, make_collective

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = [
    "add_collective_args",
    "add_output_args",
    "collective_from_args",
    "input_kind",
    "non_negative_float",
    "positive_seconds",
    "topology_from_args",
]


def _finite(text: str, expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {expected} (a finite number), got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (NaN, infinities and negatives are one-line errors)."""
    value = _finite(text, "a number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type for time limits: a finite number of seconds > 0."""
    value = _finite(text, "a positive number of seconds")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def add_collective_args(
    parser: argparse.ArgumentParser, chunks_default: int | None = 1, chunks: bool = True
) -> None:
    """``--topology``, ``--collective``, ``--root`` and (with ``chunks``) ``--chunks``."""
    parser.add_argument(
        "--topology",
        "-t",
        required=True,
        help="shipped machine (dgx1), variant (ndv2x2), family (ring:8) or JSON file",
    )
    parser.add_argument(
        "--collective",
        "-C",
        required=True,
        choices=COLLECTIVES,
        metavar="COLL",
        help=f"one of {', '.join(COLLECTIVES)}",
    )
    parser.add_argument("--root", type=int, default=None, help="root rank of rooted collectives (default 0)")
    if chunks:
        parser.add_argument("--chunks", "-c", type=int, default=chunks_default, help="chunks per rank")


def add_output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", help="file to write")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")


def topology_from_args(args: argparse.Namespace) -> Topology:
    from topologies.registry import load

    return load(args.topology)


def collective_from_args(
    args: argparse.Namespace, topology: Topology, chunks: int | None = None, lazy: bool = False
) -> Collective:
    coll = make_collective(
        args.collective, topology.num_ranks, chunks if chunks is not None else args.chunks, args.root, lazy
    )
    if args.root is not None and coll.root is None:
        raise CollectiveError(f"--root: {coll.name} has no root (rooted: {', '.join(sorted(ROOTED))})")
    return coll


def input_kind(source: str) -> str:
    """``program``, ``algorithm`` or ``ir``, from the name and (for JSON) the format field."""
    if source.startswith(EXAMPLES_PREFIX) or source.endswith(".py"):
        return "program"
    path = Path(source)
    if source.endswith(".xml"):
        return "ir"
    if source.endswith(".json"):  # an IR says so in its format field; a missing file is reported later
        try:
            fmt = read_json_file(path).get("format")
        except (XcclError, AttributeError):
            fmt = None
        return "ir" if fmt == "xccl-ir/1" else "algorithm"
    raise DslError(
        f"{source}: expected an algorithm (.json), a DSL program (.py or example:NAME) or an IR (.xml, IR .json)"
    )

"""Arguments shared by several commands, and turning them into objects.

Like every ``xccl.cli`` module it imports only what building the parser needs at its top; the
packages a command runs on are imported inside it, so ``xccl --help`` loads no solver or graph library.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codegen.errors import DslError
from codegen.examples import EXAMPLES_PREFIX
from common.errors import XcclError
from common.files import read_json_file
from synth.collectives import COLLECTIVES, ROOTED, Collective, CollectiveError, make_collective
from synth.timing.calibration import CALIBRATION, DEFAULT_MODEL, DEFAULT_PROTOCOL, MODELS, PROTOCOLS

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from synth.timing import Params
    from topologies.model import Topology

__all__ = [
    "InputFile",
    "add_collective_args",
    "add_model_args",
    "add_output_args",
    "collective_from_args",
    "non_negative_float",
    "params_from_args",
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


BEST = "best"
"""``--protocol best``: the fastest protocol at each size, as a runtime choosing per size does."""


def add_model_args(parser: argparse.ArgumentParser, best: bool = False, default: str = DEFAULT_MODEL) -> None:
    """``--model`` (default ``default``), ``--protocol`` (``best`` where offered) and ``--send-us``
    (alias ``--overhead-us``): the timing model every modeled time of the command uses
    (docs/nccl.md, "Calibration")."""
    sends = ", ".join(f"{p} {CALIBRATION.send_us[p]:g}" for p in PROTOCOLS)
    parser.add_argument(
        "--model",
        choices=MODELS,
        default=default,
        help=f"timing model: calibrated (80%% of line rate, launch and per-send costs) or ideal "
        f"(line rate, no costs: SCCL's and TACCL's); default {default}",
    )
    parser.add_argument(
        "--protocol",
        choices=(*PROTOCOLS, BEST) if best else PROTOCOLS,
        default=DEFAULT_PROTOCOL,
        help=f"NCCL protocol the times assume (its efficiency and per-send cost); default {DEFAULT_PROTOCOL}"
        + ("; best: the fastest at each size" if best else ""),
    )
    parser.add_argument(
        "--send-us",
        "--overhead-us",
        dest="send_us",
        type=non_negative_float,
        default=None,
        metavar="US",
        help=f"per-send cost that occupies the connection (default: the model's; calibrated {sends}; ideal 0)",
    )


def params_from_args(args: argparse.Namespace, protocol: str | None = None) -> Params:
    """The timing parameters ``--model``, ``--protocol`` (or ``protocol``) and ``--send-us`` name."""
    from synth.timing import model_params

    chosen = protocol or args.protocol
    return model_params(args.model, None if chosen == BEST else chosen, args.send_us)


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


class InputFile:
    """A command's FILE and its kind: ``program``, ``algorithm`` or ``ir``, from the name and (for
    JSON) the format field. A JSON file is parsed once: its document goes to :meth:`algorithm`,
    not parsed again (a 512-rank algorithm is 13 MB of JSON, 0.4 s) nor kept past it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._doc: Any = None
        self.kind = self._kind()

    def algorithm(self) -> Algorithm:
        """The algorithm in the file, read as :meth:`Algorithm.load` reads it (its errors too)."""
        from synth.algorithm import Algorithm

        doc, self._doc = self._doc, None
        return Algorithm.load(self.source) if doc is None else Algorithm.from_dict(doc, where=self.source)

    def _kind(self) -> str:
        source = self.source
        if source.startswith(EXAMPLES_PREFIX) or source.endswith(".py"):
            return "program"
        if source.endswith(".xml"):
            return "ir"
        if source.endswith(".json"):  # an IR says so in its format field; a missing file is reported later
            from codegen.formats.mscclpp_json import is_plan, not_read_back

            try:
                doc = read_json_file(Path(source))
            except XcclError:
                doc = None
            if is_plan(doc):
                raise DslError(not_read_back(source))
            fmt = doc.get("format") if isinstance(doc, dict) else None
            if fmt == "xccl-ir/1":
                return "ir"
            self._doc = doc
            return "algorithm"
        raise DslError(
            f"{source}: expected an algorithm (.json), a DSL program (.py or example:NAME) or an IR (.xml, IR .json)"
        )

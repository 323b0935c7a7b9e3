"""``xccl tune``: the schedules that beat NCCL (modeled), per collective and size, as a bundle.

Exit statuses: 0 when the sweep ran (whether or not anything was shipped), 2 for bad input, 130
after Ctrl-C and 143 after SIGTERM (the sizes timed before either are still reported and shipped).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.units import SizeError, format_size, parse_size_range
from synth.nccl.model import COLLECTIVES
from xccl.cli.common import positive_seconds, topology_from_args
from xccl.cli.output import print_json, print_table, progress
from xccl.cli.solving import EXIT_INTERRUPTED, long_command

__all__ = ["DEFAULT_COLLECTIVES", "DEFAULT_MARGIN", "DEFAULT_SIZES", "DEFAULT_TIME_LIMIT_S", "register"]

DEFAULT_SIZES = "1KiB:4GiB"
DEFAULT_COLLECTIVES = ("allgather", "allreduce")
DEFAULT_MARGIN = "5%"
DEFAULT_TIME_LIMIT_S = 600.0


def margin_fraction(text: str) -> float:
    """argparse type: ``5%`` or ``0.05`` -> 0.05; at least 0 and below 10 (1000%)."""
    number = text[:-1] if text.endswith("%") else text
    try:
        value = float(number) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a margin like 5% or 0.05, got {text!r}") from None
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"expected a margin from 0% to below 1000%, got {text!r}")
    return value


def _sizes(text: str) -> list[int]:
    """``1KiB..4GiB`` (or the other commands' ``1KiB:4GiB``): every power of two between."""
    sizes = sorted(set(parse_size_range(text.replace("..", ":"))))
    if sizes[0] < 1:
        raise SizeError(f"--sizes {text!r}: expected sizes of at least 1 byte")
    return sizes


def _collective(text: str) -> str:
    """argparse type: a collective NCCL's model times (``choices`` refuses an empty ``nargs='*'``)."""
    if text not in COLLECTIVES:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(COLLECTIVES)})")
    return text


@long_command
def cmd_tune(args: argparse.Namespace) -> int:
    from xccl.tune import tune
    from xccl.tune.folder import check_folder

    topo = topology_from_args(args)
    collectives = list(dict.fromkeys(args.collectives or DEFAULT_COLLECTIVES))
    sizes = _sizes(args.sizes)
    folder = check_folder(args.output, args.force)
    limit = args.time_limit if args.time_limit is not None else DEFAULT_TIME_LIMIT_S
    progress(
        f"Tuning {', '.join(collectives)} on {topo.name} at {len(sizes)} sizes "
        f"({format_size(sizes[0])}..{format_size(sizes[-1])}); time limit {limit:g} s for the search"
    )
    sweeps, bundle = tune(topo, collectives, sizes, args.margin, limit, progress)
    interrupted = any(s.interrupted for s in sweeps)
    _finish(args, topo.name, folder, sweeps, bundle, limit)
    return EXIT_INTERRUPTED if interrupted else 0


def _finish(args, topology: str, folder: Path, sweeps, bundle, limit: float) -> None:
    """Write the bundle (only if something ships) and print the table or the JSON document."""
    from common.files import save
    from xccl.tune.bundle import TuneError, env_files
    from xccl.tune.folder import REPORT, write_folder
    from xccl.tune.report import TABLE_HEADERS, document, plot_png, table_rows, verdict

    if bundle.shipped:
        bundle.files.update(env_files(bundle, folder))
        bundle.files["speedup.png"] = plot_png(topology, sweeps, args.margin)
    doc = document(topology, sweeps, bundle, args.margin, limit, str(folder))
    if bundle.shipped:
        write_folder(folder, bundle.files, args.force)
        import json

        save(folder / REPORT, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode(), True, TuneError)
        progress(f"wrote {len(bundle.files) + 1} files in {folder}")
    if args.json:
        print_json(doc)
        return
    for sweep in sweeps:
        title = f"{sweep.collective} on {topology}: speedup over NCCL (all times modeled; NCCL = the faster of its two)"
        print_table(TABLE_HEADERS, table_rows(sweep, bundle), title=title)
        for note in sweep.notes:
            print(f"  note: {note}")
    for note in bundle.notes:
        print(f"note: {note}")
    print(verdict(bundle, args.margin) + (f" in {folder}" if bundle.shipped else ""))
    sys.stdout.flush()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="ship only the schedules that beat NCCL (modeled), per collective and size, as an MSCCL bundle",
        description="For each collective and size, time the candidates (baselines, the SMT front on up to 8 "
        "ranks, MILP schedules from the topology's shipped sketches) and NCCL (its own model, and its layout "
        "in our engine) in the calibrated model, and write the windows where a candidate beats NCCL by the "
        "margin as XMLs for the Azure executor and microsoft/msccl, in place and out of place, with an env "
        "file per runtime, the table (tune.json) and a speedup plot (docs/tune.md).",
    )
    p.add_argument("topology", help="shipped machine (dgx1), variant (ndv2x2), family or JSON file")
    p.add_argument(
        "collectives",
        nargs="*",
        type=_collective,
        metavar="COLLECTIVE",
        help=f"any of {', '.join(COLLECTIVES)} (default: {' '.join(DEFAULT_COLLECTIVES)})",
    )
    p.add_argument(
        "--sizes", "-s", default=DEFAULT_SIZES, help=f"LOW..HIGH[:FACTOR] or a,b,c (default {DEFAULT_SIZES})"
    )
    p.add_argument(
        "--margin",
        type=margin_fraction,
        default=margin_fraction(DEFAULT_MARGIN),
        help=f"how much faster than NCCL a schedule must be to ship (default {DEFAULT_MARGIN})",
    )
    p.add_argument(
        "--time-limit",
        type=positive_seconds,
        metavar="SEC",
        help="wall time for the search (timing and compiling the winners come after); what was found by "
        f"then is kept (default {DEFAULT_TIME_LIMIT_S:g})",
    )
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the bundle's folder (empty or new)")
    p.add_argument("-f", "--force", action="store_true", help="replace a bundle in a non-empty DIR")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the tables")
    p.set_defaults(func=cmd_tune)

"""``xccl nccl``: what NCCL's own time model says a collective takes on a topology, size by size."""

from __future__ import annotations

import argparse
import math

from common.units import format_size, parse_size_range
from synth.nccl.model import COLLECTIVES
from synth.nccl.versions import ARCHS, DEFAULT_VERSION, VERSIONS
from xccl.cli.common import topology_from_args
from xccl.cli.output import print_json, print_table

__all__ = ["register"]

DEFAULT_SIZES = "1KiB:1GiB:32"


def _graphs(model: object) -> str:
    """The channels NCCL's search found, as the title shows them."""
    parts = []
    for algo, graph in model.graphs.items():  # type: ignore[attr-defined]
        if algo in ("Ring", "NVLS"):
            bw = f"{graph.bw_intra:g}" + (f"/{graph.bw_inter:g}" if graph.bw_inter != graph.bw_intra else "")
            parts.append(f"{algo.lower()} {graph.channels} x {bw} GB/s")
    return ", ".join(parts)


def cmd_nccl(args: argparse.Namespace) -> int:
    from synth.nccl import nccl_model

    topo = topology_from_args(args)
    sizes = parse_size_range(args.sizes)
    model = nccl_model(topo, args.nccl_version, args.arch)
    rows = [model.estimate(args.collective, size) for size in sizes]
    if args.json:
        doc = {
            "topology": topo.name,
            "collective": args.collective,
            "nccl_version": model.version.name,
            "arch": model.system.arch,
            "model": "NCCL's own (tuning.cc)",
            "rows": [
                {
                    "size_bytes": r.size_bytes,
                    "algorithm": r.algorithm,
                    "protocol": r.protocol,
                    "channels": r.channels,
                    "time_us": r.time_us,
                    "algbw_GBps": r.algbw_GBps if math.isfinite(r.algbw_GBps) else None,
                    "busbw_GBps": r.busbw_GBps if math.isfinite(r.busbw_GBps) else None,
                }
                for r in rows
            ],
        }
        print_json(doc)
        return 0
    print_table(
        ["size", "algorithm", "protocol", "channels", "modeled us", "algbw GB/s", "busbw GB/s"],
        [
            [
                format_size(r.size_bytes),
                r.algorithm,
                r.protocol,
                str(r.channels),
                f"{r.time_us:.2f}",
                f"{r.algbw_GBps:.2f}",
                f"{r.busbw_GBps:.2f}",
            ]
            for r in rows
        ],
        title=f"{args.collective} on {topo.name}: modeled by NCCL {model.version.name}'s own model "
        f"({model.system.arch}; {_graphs(model)})",
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nccl",
        help="NCCL's own modeled time of a collective (algorithm, protocol, channels) at some sizes",
        description="NCCL's tuning model (src/graph/tuning.cc) on a topology: the channels its search "
        "finds, and per size the algorithm and protocol it picks with the time it predicts (docs/nccl.md).",
    )
    p.add_argument(
        "--topology", "-t", required=True, help="shipped machine (dgx-h100), variant (ndv2x2), family or JSON file"
    )
    p.add_argument("--collective", "-C", required=True, choices=tuple(COLLECTIVES), metavar="COLL", help="%(choices)s")
    p.add_argument(
        "--sizes", "-s", default=DEFAULT_SIZES, help=f"sizes, LOW:HIGH[:FACTOR] or a,b,c (default {DEFAULT_SIZES})"
    )
    p.add_argument(
        "--nccl-version",
        default=DEFAULT_VERSION,
        metavar="VERSION",
        help=f"NCCL release whose constants to use: {', '.join(VERSIONS)} (or 2.30, 2.12); default {DEFAULT_VERSION}",
    )
    p.add_argument(
        "--arch", choices=ARCHS, default=None, help="GPU generation (default: read from the NVLink bandwidth)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_nccl)

"""The textbook ring and NCCL's layout in one timing model, per shipped sketch's topology.

The older sections of benchmarks/RESULTS.md compare synthesized schedules with the one-channel
"textbook ring" in the ideal model. This prints, for the same topologies, collectives and sizes,
that ring's time and the time of NCCL's own channel layout (``xccl baseline nccl``, docs/nccl.md)
in the same model, so a gain over the textbook ring can be read as a gain over NCCL: the gain over
NCCL's layout is ``(our algbw) / (NCCL layout algbw)``. Every time is modeled; none is measured.

    .venv/bin/python benchmarks/nccl_ideal.py                      # every shipped sketch (about 2 min)
    .venv/bin/python benchmarks/nccl_ideal.py --sketches ndv2x2-relay --sizes 1GiB --model calibrated

Each row is what ``xccl baseline nccl -t T -C COLL -o n.json`` then ``xccl cost n.json --model
ideal --size SIZE`` print (and ``xccl baseline ring`` for the ring).
"""

from __future__ import annotations

import argparse

from common.units import format_size, parse_size
from sketches import load_sketch, shipped_sketches
from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.cost import algbw_GBps, simulate
from synth.nccl.compare import nccl_layout
from synth.timing import MODELS, model_params
from topologies import load
from xccl.cli.output import print_table, progress

SIZES = ("1KiB", "64KiB", "1MiB", "1GiB")
COLLECTIVES = ("allgather", "alltoall", "allreduce")


def row(topology_name: str, collective: str, size: int, model: str) -> list[str]:
    """The textbook ring's and NCCL's layout's time and algbw for one case (``-`` where none exists)."""
    topo = load(topology_name)
    params = model_params(model)
    n = topo.num_ranks
    ring = make_baseline("ring", topo, make_collective(collective, n, n if collective == "allreduce" else 1))
    nccl = nccl_layout(topo, make_collective(collective, n))
    ring_us = simulate(ring, topo, size, params).time_us
    cells = [
        topology_name,
        collective,
        format_size(size),
        f"{ring_us:.2f}",
        f"{algbw_GBps(size, ring_us):.2f}",
    ]
    if nccl is None:
        return [*cells, "-", "-", "-", "-"]
    nccl_us = simulate(nccl, topo, size, params).time_us
    layout = dict(nccl.provenance.params)
    channels = f"{layout.get('algo', 'p2p')}" + (f" x{layout['channels']}" if "channels" in layout else "")
    return [
        *cells,
        f"{nccl_us:.2f}",
        f"{algbw_GBps(size, nccl_us):.2f}",
        str(channels),
        f"{ring_us / nccl_us:.2f}x",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sketches", help="comma-separated shipped sketches (default: all)")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--model", choices=MODELS, default="ideal", help="timing model (default ideal)")
    args = parser.parse_args()
    names = args.sketches.split(",") if args.sketches else shipped_sketches()
    topologies = sorted({load_sketch(name).topology for name in names})
    rows = []
    for topology in topologies:
        for collective in args.collectives.split(","):
            for size in (parse_size(s) for s in args.sizes.split(",")):
                progress(f"{topology} {collective} {format_size(size)}")
                rows.append(row(topology, collective, size, args.model))
    print_table(
        [
            "topology",
            "collective",
            "size",
            "textbook ring us",
            "ring GB/s",
            "NCCL layout us",
            "NCCL GB/s",
            "NCCL layout",
            "NCCL vs textbook ring",
        ],
        rows,
        title=f"textbook ring (one channel) and NCCL's layout, modeled ({model_params(args.model).label})",
    )


if __name__ == "__main__":
    main()

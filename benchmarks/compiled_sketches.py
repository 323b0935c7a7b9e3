"""Compiled schedules keep their speed (issue 17 item 4): every shipped multi-machine sketch's MILP
schedule at the size it synthesizes for, compiled as before (no port order) and as ``xccl compile``
now chooses (``runtime.choice``), each timed by the IR simulator against its Algorithm.

Run: ``.venv/bin/python benchmarks/compiled_sketches.py [--collectives allgather,...] [--sketches a,b]``.
Prints one row per (sketch, collective): the Algorithm's time and the IR's over it, in the ideal
model (the MILP's) and the calibrated default, before and after. Ctrl-C prints the rows so far.
"""

from __future__ import annotations

import argparse
import time

from codegen.compiler import compile_algorithm
from common.errors import XcclError
from runtime.choice import SPEED, compile_fastest
from runtime.sim import simulate as simulate_ir
from sketches.io import load_sketch
from synth.cost import simulate
from synth.milp import synthesize
from synth.timing import DEFAULT, IDEAL
from topologies import load
from xccl.cli.output import format_table, progress

SKETCHES = (
    "ndv2x2-relay", "ndv2x2-fc", "ndv2x4-relay", "dgx2x2-relay",
    "dgx-a100x2-direct", "dgx-a100x4-direct", "dgx-a100x8-direct", "dgx-h100x2-direct",
)  # fmt: skip
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")


def _row(name: str, coll: str) -> list[str]:
    sketch = load_sketch(name)
    topo = load(sketch.topology)
    size = sketch.target_size_bytes
    algo = synthesize(topo, coll, sketch, size).algorithm
    start = time.perf_counter()
    try:
        before = compile_algorithm(algo, topo)
        after, choice = compile_fastest(algo, topo)
    except XcclError as exc:  # a compile that fails is a row of the table, not the end of it
        return [name, coll, f"compile fails: {str(exc)[:70]}", *[""] * 8]
    seconds = time.perf_counter() - start
    cells = []
    for params in (IDEAL, DEFAULT):
        model = simulate(algo, topo, size, params).time_us
        was, now = (simulate_ir(ir, topo, size, params=params).time_us / model for ir in (before, after))
        cells += [f"{model:.1f}", f"{was:.3f}x", f"{now:.3f}x"]
    ok = "yes" if choice is None or choice.ratio <= 1 + SPEED else "no"
    order = "-" if choice is None else ("on" if choice.port_order else "off")
    return [name, coll, *cells, order, ok, f"{seconds:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sketches", default=",".join(SKETCHES))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    args = parser.parse_args()
    rows = []
    try:
        for name in args.sketches.split(","):
            for coll in args.collectives.split(","):
                progress(f"[compiled] {name} {coll}")
                rows.append(_row(name, coll))
                progress("  " + "  ".join(rows[-1]))  # kept on stderr as it comes
    except KeyboardInterrupt:
        progress("interrupted: the rows finished so far")
    headers = ["sketch", "collective", "ideal us", "before", "after", "calibrated us", "before", "after"]
    print(format_table([*headers, "port order", "within 10%", "compile s (both)"], rows))


if __name__ == "__main__":
    main()

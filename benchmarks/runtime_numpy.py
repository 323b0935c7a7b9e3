"""How fast the NumPy executor moves data, next to ``numpy.copyto`` over the same bytes.

The ring allgather baseline on DGX-1 (8 ranks), compiled by codegen, with a 256 MiB output buffer
(float32, Simple protocol tiles of 2 MiB): the executor's data rate is the bytes its steps write
into destination buffers divided by its wall-clock time; ``numpy.copyto`` copies the same number
of bytes in 256 MiB blocks. The target is an executor at least half as fast as copyto. Outputs are
checked against the NumPy reference.

The executor copies tile by tile (2 MiB, as the runtime does), and glibc's memcpy only switches to
non-temporal stores for much larger copies (``glibc.cpu.x86_non_temporal_threshold``, 192 MiB on
this machine), so ``numpy.copyto`` in 2 MiB blocks is printed too: it is the most any tile-by-tile
copy can reach. Run with ``GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x100000`` to let
2 MiB copies (the executor's and the 2 MiB-block row's) use non-temporal stores too; the title
says which environment the numbers come from.

Run: ``.venv/bin/python benchmarks/runtime_numpy.py [--topology dgx1] [--size 256MiB] [--repeats 7]``
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import numpy as np

from codegen.compiler import compile_algorithm
from codegen.ir import IR
from common.units import format_size, parse_size
from runtime.numpy import NumpyExecutor
from runtime.reference import check_outputs, make_inputs, reference
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load
from xccl.cli.output import print_table, progress


def _seconds(fn, setup=None) -> float:
    if setup is not None:
        setup()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ring_allgather(topology: str, inplace: bool) -> IR:
    """The compiled ring allgather baseline (in place: each rank's input is its output slot)."""
    topo = load(topology)
    algo = make_baseline("ring", topo, make_collective("allgather", topo.num_ranks, 1))
    return compile_algorithm(algo, topo, inplace=inplace)


def measure(topology: str, size: int, repeats: int) -> tuple[list[tuple[str, int, float, float]], int]:
    """Rows (what, bytes moved, median seconds, median speed relative to copyto in whole blocks),
    all measured in turns so that the machine's bandwidth drifts alike for all of them, and the
    rounds done (Ctrl-C stops after the current one)."""
    kinds: dict[str, tuple[int, functools.partial]] = {}
    for inplace in (False, True):
        ex = NumpyExecutor(ring_allgather(topology, inplace), size, "float32", inplace=inplace)
        inputs = make_inputs(ex.collective, ex.chunk_elems, ex.dtype, "sum", seed=0)
        ex.load(inputs)
        moved = ex.execute().bytes_written
        check_outputs(reference(ex.collective, inputs, ex.chunk_elems, "sum"), ex.outputs(), ex.ir.name)
        label = f"executor ({'in' if inplace else 'out-of'}-place)"
        kinds[label] = (moved, functools.partial(_seconds, ex.execute, functools.partial(ex.load, inputs)))
    src = np.random.default_rng(0).random(size // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    tile = (2 << 20) // 8
    blocks = max(moved for moved, _ in kinds.values()) // size

    def copy_whole() -> None:
        for _ in range(blocks):
            np.copyto(dst, src)

    def copy_tiles() -> None:
        for _ in range(blocks):
            for lo in range(0, src.size, tile):
                np.copyto(dst[lo : lo + tile], src[lo : lo + tile])

    base = f"numpy.copyto, {format_size(size)} blocks"
    kinds[base] = (blocks * size, functools.partial(_seconds, copy_whole))
    kinds["numpy.copyto, 2MiB blocks"] = (blocks * size, functools.partial(_seconds, copy_tiles))
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    done = 0
    try:
        for i in range(repeats):
            progress(f"round {i + 1} of {repeats}")
            times = {what: timed() for what, (_, timed) in kinds.items()}
            for what, t in times.items():
                rates[what].append(kinds[what][0] / t)
            done += 1
    except KeyboardInterrupt:
        progress(f"interrupted: {done} round(s) done")
    if not done:
        return [], 0
    return [
        (
            what,
            kinds[what][0],
            kinds[what][0] / statistics.median(r),
            statistics.median(x / b for x, b in zip(r, rates[base], strict=True)),
        )
        for what, r in rates.items()
    ], done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="dgx1", help="where the ring allgather baseline runs (dgx1)")
    parser.add_argument("--size", default="256MiB", help="allgather output buffer (nccl-tests size)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    size = parse_size(args.size)
    rows, done = measure(args.topology, size, args.repeats)
    if not rows:
        return 130
    table = [
        (what, format_size(nbytes), f"{secs * 1e3:.1f}", f"{nbytes / secs / 1e9:.2f}", f"{ratio:.2f}")
        for what, nbytes, secs, ratio in rows
    ]
    n = load(args.topology).num_ranks
    tunables = os.environ.get("GLIBC_TUNABLES")
    env = f"GLIBC_TUNABLES={tunables}" if tunables else "glibc's default tunables"
    print_table(
        ("what", "bytes moved", "time(ms)", "GB/s", f"speed vs copyto {format_size(size)}"),
        table,
        title=f"{n}-rank ring allgather (compiled baseline on {args.topology}), {format_size(size)} output, "
        f"float32; medians of {done} rounds, each timing all four in turn (speed ratio: median of the "
        f"rounds' ratios); {env}; outputs checked against the NumPy reference; target: executor >= 0.50",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

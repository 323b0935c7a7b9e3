"""How fast the NumPy executor moves data, next to ``numpy.copyto`` over the same bytes.

An 8-rank ring allgather with a 256 MiB output buffer (float32, Simple protocol tiles of 2 MiB):
the executor's data rate is the bytes its steps write into destination buffers divided by its
wall-clock time; ``numpy.copyto`` copies the same number of bytes in 256 MiB blocks. The target is
an executor at least half as fast as copyto. Outputs are checked against the NumPy reference.

The executor copies tile by tile (2 MiB, as the runtime does), and memcpy only switches to
non-temporal stores for much larger copies, so ``numpy.copyto`` in 2 MiB blocks is printed too: it
is the most any tile-by-tile copy can reach on this machine.

Run: ``.venv/bin/python benchmarks/runtime_numpy.py [--ranks 8] [--size 256MiB] [--repeats 7]``
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time

import numpy as np

from runtime.numpy import NumpyExecutor
from runtime.reference import check_outputs, make_inputs, reference
from runtime.samples import ring_allgather
from synth.units import format_size, parse_size
from xccl.cli.output import print_table, progress


def _seconds(fn, setup=None) -> float:
    if setup is not None:
        setup()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(n: int, size: int, repeats: int) -> list[tuple[str, int, float, float]]:
    """(what, bytes moved, median seconds, median speed relative to copyto in whole blocks), all
    measured in turns so that the machine's bandwidth drifts alike for all of them."""
    kinds = {}
    moved = 0
    for inplace in (False, True):
        ex = NumpyExecutor(ring_allgather(n), size, "float32", inplace=inplace)
        inputs = make_inputs(ex.collective, ex.chunk_elems, ex.dtype, "sum", seed=0)
        ex.load(inputs)
        moved = ex.execute().bytes_written
        check_outputs(reference(ex.collective, inputs, ex.chunk_elems, "sum"), ex.outputs(), ex.ir.name)
        label = f"executor ({'in' if inplace else 'out-of'}-place)"
        kinds[label] = functools.partial(_seconds, ex.execute, functools.partial(ex.load, inputs))
    src = np.random.default_rng(0).random(size // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    tile = (2 << 20) // 8

    def copy_whole() -> None:
        for _ in range(moved // size):
            np.copyto(dst, src)

    def copy_tiles() -> None:
        for _ in range(moved // size):
            for lo in range(0, src.size, tile):
                np.copyto(dst[lo : lo + tile], src[lo : lo + tile])

    kinds[f"numpy.copyto, {format_size(size)} blocks"] = functools.partial(_seconds, copy_whole)
    kinds["numpy.copyto, 2MiB blocks"] = functools.partial(_seconds, copy_tiles)
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(repeats):
        progress(f"round {i + 1} of {repeats}")
        for what, timed in kinds.items():
            samples[what].append(timed())
    base = samples[f"numpy.copyto, {format_size(size)} blocks"]
    return [
        (what, moved, statistics.median(ts), statistics.median(b / t for b, t in zip(base, ts, strict=True)))
        for what, ts in samples.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--size", default="256MiB", help="allgather output buffer (nccl-tests size)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    size = parse_size(args.size)
    rows = measure(args.ranks, size, args.repeats)
    table = [
        (what, format_size(nbytes), f"{secs * 1e3:.1f}", f"{nbytes / secs / 1e9:.2f}", f"{ratio:.2f}")
        for what, nbytes, secs, ratio in rows
    ]
    print_table(
        ("what", "bytes moved", "time(ms)", "GB/s", f"speed vs copyto {format_size(size)}"),
        table,
        title=f"{args.ranks}-rank ring allgather, {format_size(size)} output, float32; medians of "
        f"{args.repeats} rounds, each timing all four in turn (the ratio is the median of the "
        "rounds' ratios); outputs checked against the NumPy reference; target: executor >= 0.50",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

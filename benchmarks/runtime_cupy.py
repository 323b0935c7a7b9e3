"""CuPy executor: 8-rank allgather and allreduce on one GPU from 1 KiB to 1 GiB, against the
device's plain copy ceiling, and the latency of a one-step program.

    .venv/bin/python benchmarks/runtime_cupy.py [--max-size 1GiB] [--repeats 5] [--instances 1,4,16]

Memory traffic: every byte a rank receives is read from its peer's FIFO and written to its buffer,
and every byte sent is read and written into a FIFO; the table reports the bytes the schedule moves
between ranks per second against what ``cupy.copyto`` moves on the same device (the ceiling when all
ranks share one GPU).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the samples are test support

import runtime_samples as samples

from codegen import compile_algorithm
from common.units import format_size, parse_size_range
from synth.baselines import make_baseline
from synth.collectives import make_collective
from topologies import load
from xccl.cli.output import print_table, progress


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-size", default="1GiB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--instances", default="1", help="comma-separated instance counts (threadblocks per ring), default 1"
    )
    args = parser.parse_args()
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no GPU")
    except Exception as exc:
        print(f"skipped: the CuPy benchmark needs CuPy and a CUDA GPU ({exc})")
        return 0
    from runtime.cupy.executor import CupyExecutor
    from runtime.reference import make_inputs

    signal.signal(signal.SIGTERM, _interrupt)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    topo = load("ring:8")
    rings = [
        (make_baseline("ring", topo, make_collective("allgather", 8, 1)), False),
        (make_baseline("ring", topo, make_collective("allreduce", 8, 8)), True),
    ]
    counts = [int(n) for n in args.instances.split(",")]
    compiled = [
        (n, compile_algorithm(algo, topo, inplace=inplace, instances=n))
        for algo, inplace in rings
        for n in counts
    ]
    try:
        _measure(compiled, args, rows)
    except KeyboardInterrupt:
        progress(f"interrupted: the {len(rows)} row(s) finished are printed")
    print_table(
        [
            "collective",
            "instances",
            "size",
            "time us",
            "algbw GB/s",
            "busbw GB/s",
            "moved GB/s",
            "copy GB/s",
            "of ceiling",
        ],
        rows,
        title=f"8 ranks on one {device}, float32 sum, median of {args.repeats}",
    )
    one_step = samples.allpairs_allgather(2)
    ex = CupyExecutor(one_step, 8 * 2, "float32")
    ex.load(make_inputs(ex.collective, ex.chunk_elems, ex.dtype, "sum", 0))
    small = statistics.median(ex.time_us(repeats=50, warmup=5))
    print(f"\none-step program (2 ranks, one send each, 8 bytes): {small:.2f} us per launch, flags included")
    return 0


def _measure(compiled, args: argparse.Namespace, rows: list[list[str]]) -> None:
    """One row per (IR, size), appended as each finishes so an interrupt keeps them."""
    from runtime.cupy.executor import CupyExecutor
    from runtime.reference import check_outputs, make_inputs, reference

    for instances, ir in compiled:
        inplace = not ir.outofplace
        for size in parse_size_range(f"1KiB:{args.max_size}"):
            size -= size % (ir.nchunksperloop * 4)
            progress(f"[cupy] {ir.name} {format_size(size)}")
            ex = CupyExecutor(ir, size, "float32", "sum", inplace=inplace)
            inputs = make_inputs(ex.collective, ex.chunk_elems, ex.dtype, "sum", 0)
            ex.load(inputs)
            ex.run()
            check_outputs(reference(ex.collective, inputs, ex.chunk_elems, "sum"), ex.outputs(), ir.name)
            t = statistics.median(ex.time_us(repeats=args.repeats))
            moved = _bytes_moved(ir, ex.chunk_elems * 4)
            ceiling = ex.copy_ceiling_us(moved)
            algbw = size / (t * 1e3)
            busbw = algbw * ex.collective.busbw_factor
            rows.append(
                [
                    ir.collective,
                    str(instances),
                    format_size(size),
                    f"{t:.2f}",
                    f"{algbw:.2f}",
                    f"{busbw:.2f}",
                    f"{moved / (t * 1e3):.1f}",
                    f"{moved / (ceiling * 1e3):.1f}",
                    f"{ceiling / t:.2f}",
                ]
            )


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a batch scheduler's stop) takes Ctrl-C's path: the finished rows are printed."""
    raise KeyboardInterrupt


def _bytes_moved(ir, chunk_bytes: int) -> int:
    """Bytes sent between ranks by one run of the IR (each send-type op moves count chunks)."""
    total = 0
    for gpu in ir.gpus:
        for tb in gpu.threadblocks:
            total += sum(op.count for op in tb.ops if op.type.sends)
    return total * chunk_bytes


if __name__ == "__main__":
    sys.exit(main())

"""`xccl bound` over the sizes of issue 17 item 3: one command, one table.

Runs ``xccl bound -t TOPO -C COLL --json -s 1GiB`` for hypercube:8..17, square tori up to 300 x 300,
rings up to 100,000 ranks and dgx-h100x8..x512, for allgather, reducescatter, allreduce and alltoall,
each in its own process under a wall-clock limit (``--limit``, default 300 s) and a memory cap
(``--memory-gb``, default 12), timed by ``/usr/bin/time`` (wall seconds, peak resident memory).
Prints per case the wall time, peak memory, how the bandwidth bound was found and the bound at
1 GiB (modeled at line rate), or why the case stopped. ``--only WORD`` keeps the topologies whose
name contains WORD. Usage: ``.venv/bin/python benchmarks/bound_sweep.py [--limit S] [--only hypercube]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

TOPOLOGIES = [
    *(f"hypercube:{d}" for d in range(8, 18)),
    *(f"torus:{n}x{n}" for n in (8, 14, 16, 32, 64, 111, 128, 300)),
    *(f"ring:{n}" for n in (100, 316, 1000, 10000, 25000, 100000)),
    *(f"dgx-h100x{k}" for k in (8, 16, 64, 512)),
]
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")
ROOT = Path(__file__).resolve().parent.parent


def _cap_memory(gb: float):
    def cap() -> None:
        limit = int(gb * 1e9)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return cap


def run_case(topology: str, collective: str, limit_s: float, memory_gb: float) -> dict:
    """One ``xccl bound`` in a child process: its wall time, peak memory and output (or why not)."""
    command = [
        "/usr/bin/time", "-f", "%e %M", "timeout", str(limit_s),
        sys.executable, "-m", "xccl.cli.main", "bound", "-t", topology, "-C", collective, "--json", "-s", "1GiB",
    ]  # fmt: skip
    proc = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, preexec_fn=_cap_memory(memory_gb), check=False
    )
    wall, peak_kb = proc.stderr.strip().splitlines()[-1].split()[-2:]
    row = {"topology": topology, "collective": collective, "wall_s": float(wall), "peak_MB": int(peak_kb) / 1e3}
    if proc.returncode == 0:
        doc = json.loads(proc.stdout)
        row.update(how=doc["bandwidth_bound"], bound_us=doc["rows"][-1]["bound_us"], stopped="")
    elif proc.returncode == 124:
        row.update(how="", bound_us=None, stopped=f"> {limit_s:g} s")
    else:
        lines = [line for line in proc.stderr.splitlines() if line.startswith("xccl: error")]
        row.update(how="", bound_us=None, stopped=(lines[-1] if lines else f"exit {proc.returncode}")[:60])
    return row


def _table(rows: list[dict]) -> str:
    head = ("topology", "collective", "wall s", "peak MB", "bound us (1 GiB, modeled)", "bandwidth bound from", "stopped")
    cells = [
        (
            r["topology"],
            r["collective"],
            f"{r['wall_s']:.1f}",
            f"{r['peak_MB']:.0f}",
            "" if r["bound_us"] is None else f"{r['bound_us']:.2f}",
            r["how"][:44],
            r["stopped"],
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) for cell in cells]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=300.0, help="wall-clock seconds per case")
    parser.add_argument("--memory-gb", type=float, default=12.0, help="address-space cap per case")
    parser.add_argument("--only", default="", help="keep topologies whose name contains this")
    args = parser.parse_args()
    rows = []
    try:
        for topology in (t for t in TOPOLOGIES if args.only in t):
            for collective in COLLECTIVES:
                rows.append(run_case(topology, collective, args.limit, args.memory_gb))
                r = rows[-1]
                print(f"{topology} {collective}: {r['wall_s']:.1f} s {r['stopped']}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted: the finished rows follow", file=sys.stderr)
    print(f"per-case limit {args.limit:g} s, memory cap {args.memory_gb:g} GB; bound at 1 GiB, modeled at line rate")
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

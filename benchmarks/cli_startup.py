"""Start-up time of the ``xccl`` command and of ``import xccl``, each in a fresh process.

Run: ``.venv/bin/python benchmarks/cli_startup.py [--runs N]``. Prints, per command, the median,
the fastest and the slowest wall-clock time of N runs (default 9) in fresh processes, the way a
user (or the test suite's ``cli`` fixture) pays it. Every command must exit 0.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from xccl.cli.output import print_table, progress

ROOT = Path(__file__).resolve().parent.parent
XCCL = [str(Path(sys.executable).with_name("xccl"))]  # the installed console script, as users run it
CASES = [
    ("xccl --help", [*XCCL, "--help"]),
    ("xccl topo list", [*XCCL, "topo", "list"]),
    ("xccl bound -t dgx1 -C allgather", [*XCCL, "bound", "-t", "dgx1", "-C", "allgather"]),
    ('python -c "import xccl"', [sys.executable, "-c", "import xccl"]),
]


def _seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per command (default 9)")
    runs = parser.parse_args().runs
    rows = []
    for label, command in CASES:
        progress(f"[startup] {label}")
        times = [_seconds(command) for _ in range(runs)]
        ms = [f"{1000 * t:.0f}" for t in (statistics.median(times), min(times), max(times))]
        rows.append([label, *ms])
    print_table(["command", "median ms", "min ms", "max ms"], rows, title=f"{runs} fresh processes each")


if __name__ == "__main__":
    main()

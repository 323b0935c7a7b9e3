"""Every shipped example and every baseline on every topology of ``tests/executor_suite.py``, compiled, run on
the NumPy executor at every call of the suite (four dtypes, sum and max, each placement the IR
allows, tiny tiles and the protocol's own), checked against the NumPy reference.

The test suite runs a representative part of this (``tests/test_runtime_compiled.py``; the rest is
marked slow); this runs all of it and prints, per schedule family, how many compiled schedules
and runs there were, how many failed, and how long they took. Ctrl-C prints what finished.

Run: ``.venv/bin/python benchmarks/runtime_suite.py``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the suite is test support

from executor_suite import baseline_cases, calls, example_cases

from common.errors import XcclError
from runtime.numpy import run
from xccl.cli.output import print_table, progress


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    cases = example_cases((1, 2)) + baseline_cases()
    stats: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0, 0, 0.0, set()])
    failures: list[str] = []
    try:
        for k, case in enumerate(cases):
            progress(f"[{k + 1}/{len(cases)}] {case.name}")
            start = time.perf_counter()
            row = stats[(case.kind, case.collective)]
            ir = case.compile()
            for call in calls(ir):
                try:
                    run(
                        ir,
                        call.size_bytes,
                        call.dtype,
                        call.op,
                        inplace=call.inplace,
                        tile_bytes=call.tile_bytes,
                    )
                except XcclError as exc:
                    row[2] += 1
                    failures.append(f"{case.name}: {exc}")
                row[1] += 1
            row[0] += 1
            row[3] += time.perf_counter() - start
            row[4].add(case.topology)
    except KeyboardInterrupt:
        progress("interrupted: the table shows the cases that finished")
    table = [
        (kind, coll, ", ".join(sorted(topos)), n, runs, bad, f"{secs:.1f}")
        for (kind, coll), (n, runs, bad, secs, topos) in sorted(stats.items())
    ]
    total = [sum(r[i] for r in stats.values()) for i in range(3)]
    table.append(("total", "", "", *total, f"{sum(r[3] for r in stats.values()):.1f}"))
    print_table(
        ("schedule", "collective", "topologies", "compiled", "runs", "failed", "seconds"),
        table,
        title="compiled examples and baselines on the NumPy executor (f32/f16/i32/i64 x sum/max x "
        "placements, 5 tiles per chunk with a short last one, and the protocol's tile)",
    )
    for line in failures:
        print(f"FAILED {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""The table of ``xccl pareto`` (synth.report): modeled times and the gain over NCCL, checked by hand."""

from __future__ import annotations

import pytest

from synth.baselines import make_baseline
from synth.collectives import make_collective
from synth.report import Row, legend, table
from synth.timing import IDEAL
from topologies import load


def test_gain_over_nccl_layout_is_ncclss_time_over_ours_computed_by_hand():
    ring4 = load("ring:4")  # 25 GB/s and alpha 0.7 us per link, both directions
    textbook = make_baseline("ring", ring4, make_collective("allgather", 4))
    size = 1 << 30
    headers, cells = table([Row("allgather", 3, 3, 1, "baseline", 0.0, textbook)], ring4, (size,), IDEAL)
    row = dict(zip(headers, cells[0], strict=True))
    # Ideal model, store and forward. The textbook ring: 3 steps, each one chunk of size/4 over one
    # link. NCCL's layout on a bidirectional ring: two rings (one per direction), each rank's data
    # split in two, so 3 steps of size/8 per link, both directions at once.
    ours = 3 * (size / 4 / 25e3 + 0.7)
    nccl = 3 * (size / 8 / 25e3 + 0.7)
    assert float(row["modeled us@1GiB"]) == pytest.approx(ours, abs=0.01)
    assert row["vs NCCL layout@1GiB"] == f"{nccl / ours:.2f}x" == "0.50x"
    assert row["vs NCCL model@1GiB"].endswith("x")
    assert "modeled: ideal" in legend(IDEAL)


def test_a_row_without_an_algorithm_has_no_times_and_a_collective_nccl_lacks_has_no_gain():
    ring4 = load("ring:4")
    gather = make_baseline("ring", ring4, make_collective("gather", 4, root=0))  # NCCL has no gather
    rows = [Row("allgather", 2, 2, 1, "unsat", 0.1), Row("gather", 3, 3, 1, "baseline", 0.0, gather)]
    headers, cells = table(rows, ring4, (1 << 10,))
    assert all(len(line) == len(headers) for line in cells)
    assert cells[0][-3:] == ["", "", ""]
    assert float(cells[1][-3]) > 0 and cells[1][-2:] == ["-", "-"]

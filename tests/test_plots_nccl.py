"""The time-against-size plots (synth.plots) draw NCCL's two estimates beside the textbook ring."""

from __future__ import annotations

import pytest

from synth.collectives import make_collective
from synth.nccl.compare import nccl_reference
from synth.timing import IDEAL
from topologies import load

matplotlib = pytest.importorskip("matplotlib")


def _lines(name: str, root: int | None = None, layout: bool = True) -> dict:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from synth.plots import _nccl_lines

    fig, ax = plt.subplots()
    try:
        _nccl_lines(ax, load("ring:4"), name, root, (1 << 10, 1 << 30), IDEAL, layout=layout)
        return {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    finally:
        plt.close(fig)


def test_nccl_layout_and_model_are_drawn_with_the_times_nccl_reference_gives():
    lines = _lines("allgather")
    coll = make_collective("allgather", 4)
    refs = [nccl_reference(load("ring:4"), coll, s, IDEAL) for s in (1 << 10, 1 << 30)]
    assert lines["NCCL layout (same model)"] == [r.layout_us for r in refs]
    assert lines["NCCL model (its own)"] == [r.model_us for r in refs]
    assert list(_lines("allgather", layout=False)) == ["NCCL model (its own)"]


def test_no_nccl_line_for_a_collective_nccl_lacks():
    assert _lines("gather", root=0) == {}

"""Plots of a latency-bandwidth front (matplotlib, Agg backend: no display needed).

Left: every algorithm found in (steps S, rounds per chunk R/C), the Pareto-optimal ones joined,
with the two lower bounds as dashed lines. Right: modeled time (:func:`synth.cost.simulate`, the
model named on the axis) against buffer size for each front algorithm, next to the textbook ring (one
channel), NCCL's two estimates (:func:`synth.nccl.compare.nccl_reference`: its layout in the same
model, its own model) and the lower bound (:func:`synth.bounds.lower_bound_us`, line rate).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from common.errors import XcclError
from common.files import check_writable, save
from synth.algorithm import Algorithm
from synth.baselines import BaselineError, make_baseline
from synth.bounds import lower_bound_us
from synth.collectives import make_collective
from synth.cost import simulate
from synth.nccl.compare import nccl_reference
from synth.timing import DEFAULT, Params
from topologies.model import Topology

__all__ = ["PLOT_SIZES", "PlotError", "plot_front", "plot_times"]


class PlotError(XcclError):
    """A plot cannot be written: the file exists and --force was not given, or the path is unwritable."""


PLOT_SIZES = tuple(1 << k for k in range(10, 31, 2))
"""1 KiB to 1 GiB, every factor of 4."""


def _ring(topology: Topology, name: str, root: int | None) -> Algorithm | None:
    n = topology.num_ranks
    try:
        return make_baseline(
            "ring", topology, make_collective(name, n, n if name == "allreduce" else 1, root)
        )
    except BaselineError:
        return None  # no ring through the topology, or none for this collective


def _nccl_lines(
    ax,
    topology: Topology,
    name: str,
    root: int | None,
    sizes: Sequence[int],
    params: Params,
    layout: bool = True,
) -> None:
    """NCCL's two estimates of ``name`` against size, where NCCL has such a call on ``topology``
    (its layout left out where ``layout`` is false: the caller already drew it)."""
    coll = make_collective(name, topology.num_ranks, 1, root)
    refs = [nccl_reference(topology, coll, s, params) for s in sizes]
    xs_mib = [s / (1 << 20) for s in sizes]
    lines = [("y-.", "NCCL model (its own)", [r.model_us for r in refs])]
    if layout:
        lines.insert(0, ("m-.", "NCCL layout (same model)", [r.layout_us for r in refs]))
    for style, label, times in lines:
        if all(t is not None for t in times):
            ax.loglog(xs_mib, times, style, label=label)


def plot_front(
    path: str | Path,
    topology: Topology,
    front: Sequence[Algorithm],
    found: Sequence[Algorithm],
    steps_bound: int,
    rounds_per_chunk_bound: Fraction,
    title: str,
    force: bool = False,
    sizes: Sequence[int] = PLOT_SIZES,
    params: Params = DEFAULT,
) -> Path:
    """Draw the front and save it as PNG (times modeled with ``params``); an existing file is kept
    unless ``force``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    path = check_writable(path, force, PlotError)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    others = [a for a in found if a not in front]
    left.scatter(
        [a.num_steps for a in others], [float(a.rounds_per_chunk) for a in others], c="0.7", label="dominated"
    )
    xs = [a.num_steps for a in front]
    ys = [float(a.rounds_per_chunk) for a in front]
    left.step(xs, ys, where="post", c="C0")
    left.scatter(xs, ys, c="C0", zorder=3, label="Pareto-optimal")
    for a in front:
        left.annotate(f"R={a.rounds} C={a.chunks}", (a.num_steps, float(a.rounds_per_chunk)), fontsize=8)
    left.axhline(float(rounds_per_chunk_bound), ls="--", c="C3", label=f"R/C bound {rounds_per_chunk_bound}")
    left.axvline(steps_bound, ls=":", c="C2", label=f"steps bound {steps_bound}")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.margins(x=0.15, y=0.1)
    left.set_xlabel("steps S (latency)")
    left.set_ylabel("rounds per chunk R/C (bandwidth)")
    left.legend(fontsize=8)

    xs_mib = [s / (1 << 20) for s in sizes]
    for i, algo in enumerate(front):
        times = [simulate(algo, topology, s, params).time_us for s in sizes]
        right.loglog(xs_mib, times, c=f"C{i}", label=f"S={algo.num_steps} R={algo.rounds} C={algo.chunks}")
    name = front[0].collective.name if front else (found[0].collective.name if found else None)
    if name is not None:
        root = (front or found)[0].collective.root
        ring = _ring(topology, name, root)
        if ring is not None:
            right.loglog(
                xs_mib,
                [simulate(ring, topology, s, params).time_us for s in sizes],
                "k--",
                label="textbook ring (1 channel)",
            )
        _nccl_lines(right, topology, name, root, sizes, params)
        coll = make_collective(name, topology.num_ranks, 1, root)
        right.loglog(
            xs_mib, [lower_bound_us(topology, coll, s) for s in sizes], "r:", label="lower bound (line rate)"
        )
    right.set_xlabel("buffer size (MiB)")
    right.set_ylabel(f"modeled time (us), {params.label}")
    right.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path, force)


def plot_times(
    path: str | Path,
    panels: Sequence[tuple[str, Topology, Sequence[tuple[str, Algorithm]]]],
    force: bool = False,
    sizes: Sequence[int] = PLOT_SIZES,
    params: Params = DEFAULT,
) -> Path:
    """Modeled time (``params``) against buffer size, one panel per ``(title, topology, [(label,
    algorithm)])``, each with NCCL's two estimates and the lower bound of its collective; saved as
    PNG (kept unless ``force``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = check_writable(path, force, PlotError)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    xs_mib = [s / (1 << 20) for s in sizes]
    for ax, (title, topology, algos) in zip(axes[0], panels, strict=True):
        for i, (label, algo) in enumerate(algos):
            style = "k--" if label.startswith(("ring", "textbook ring")) else f"C{i}"
            ax.loglog(
                xs_mib, [simulate(algo, topology, s, params).time_us for s in sizes], style, label=label
            )
        if algos:
            coll = algos[0][1].collective
            drawn = any(a.provenance.method == "baseline:nccl" for _, a in algos)
            _nccl_lines(ax, topology, coll.name, coll.root, sizes, params, layout=not drawn)
            bound = make_collective(coll.name, coll.num_ranks, 1, coll.root)
            ax.loglog(
                xs_mib,
                [lower_bound_us(topology, bound, s) for s in sizes],
                "r:",
                label="lower bound (line rate)",
            )
        ax.set_title(title)
        ax.set_xlabel("buffer size (MiB)")
        ax.set_ylabel(f"modeled time (us), {params.label}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path, force)


def _save(fig, path: Path, force: bool) -> Path:
    """Render the figure as PNG in memory, then write it atomically (:func:`common.files.save`):
    a failed write leaves no half-written file, and an existing one is kept unless ``force``."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100, metadata={"Software": "xccl-synth"})
    finally:
        plt.close(fig)
    return save(path, buffer.getvalue(), force, PlotError)

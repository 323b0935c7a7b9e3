"""What ``xccl tune`` reports: one JSON document, a table per collective and a speedup plot.
Every time in them is modeled (the calibrated model and NCCL's own); each says so."""

from __future__ import annotations

import io
from collections.abc import Sequence

from common.units import format_size
from xccl.tune.bundle import Bundle
from xccl.tune.sweep import CollectiveSweep, Point

__all__ = ["FORMAT", "TABLE_HEADERS", "document", "plot_png", "table_rows", "verdict"]

FORMAT = "xccl-tune/1"
TABLE_HEADERS = (
    "size",
    "NCCL model us (modeled)",
    "NCCL layout us (modeled)",
    "best candidate",
    "proto",
    "best us (modeled)",
    "speedup",
    "ships",
)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _window_of(point: Point, collective: str, bundle: Bundle) -> str | None:
    for s in bundle.shipped:
        if s.collective == collective and s.window.low <= point.size_bytes <= s.window.high:
            return s.files["azure"]["inplace"].rsplit("/", 1)[-1].removesuffix("-inplace.xml")
    return None


def table_rows(sweep: CollectiveSweep, bundle: Bundle) -> list[list[str]]:
    rows = []
    for p in sweep.points():
        best = p.best
        rows.append(
            [
                format_size(p.size_bytes),
                f"{p.nccl_model_us:.2f} {p.nccl_model_choice}",
                _us(p.nccl_layout_us),
                best.candidate.label if best else "-",
                best.protocol if best else "-",
                _us(best.time_us if best else None),
                "-" if p.speedup is None else f"{p.speedup:.2f}x",
                "yes" if _window_of(p, sweep.collective, bundle) else "no",
            ]
        )
    return rows


def verdict(bundle: Bundle, margin: float) -> str:
    """One plain sentence: what was shipped, or that nothing beats NCCL."""
    if not bundle.shipped:
        return f"nothing beats NCCL by {margin:.0%} in the calibrated model (modeled): nothing shipped"
    n = len(bundle.shipped)
    files = sum(len(p) for s in bundle.shipped for p in s.files.values())
    return f"{n} window(s) beat NCCL by {margin:.0%} or more (modeled): {files} XML files shipped"


def _point_doc(p: Point, collective: str, bundle: Bundle) -> dict:
    best = p.best
    return {
        "size_bytes": p.size_bytes,
        "nccl_model_us": p.nccl_model_us,
        "nccl_model_choice": p.nccl_model_choice,
        "nccl_layout_us": p.nccl_layout_us,
        "nccl_us": p.nccl_us,
        "best": None
        if best is None
        else {"candidate": best.candidate.label, "protocol": best.protocol, "time_us": best.time_us},
        "speedup": p.speedup,
        "window": _window_of(p, collective, bundle),
    }


def document(
    topology: str,
    sweeps: Sequence[CollectiveSweep],
    bundle: Bundle,
    margin: float,
    limit_s: float,
    folder: str,
) -> dict:
    """The whole run as one JSON document (what ``--json`` prints and ``tune.json`` holds)."""
    return {
        "format": FORMAT,
        "topology": topology,
        "times": "modeled: candidates and NCCL's layout by the calibrated timing engine, NCCL also by its own model",
        "margin": margin,
        "time_limit_s": limit_s,
        "interrupted": any(s.interrupted for s in sweeps),
        "directory": folder if bundle.shipped else None,
        "verdict": verdict(bundle, margin),
        "collectives": [
            {
                "collective": s.collective,
                "rows": [_point_doc(p, s.collective, bundle) for p in s.points()],
                "notes": list(s.notes),
            }
            for s in sweeps
        ],
        "windows": [
            {
                "collective": w.collective,
                "low_bytes": w.window.low,
                "high_bytes": w.window.high,
                "candidate": w.window.winner.candidate.label,
                "protocol": w.window.winner.protocol,
                "byte_windows": {d: list(b) for d, b in w.byte_windows.items()},
                "files": w.files,
            }
            for w in bundle.shipped
        ],
        "notes": list(bundle.notes),
        "files": sorted(bundle.files),
    }


def plot_png(topology: str, sweeps: Sequence[CollectiveSweep], margin: float) -> bytes:
    """Modeled speedup over NCCL against size, one line per collective, shipped sizes marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for s in sweeps:
        points = [p for p in s.points() if p.speedup is not None]
        ax.plot(
            [p.size_bytes for p in points], [p.speedup for p in points], marker="o", ms=3, label=s.collective
        )
        wins = [p for p in points if p.wins(margin)]
        ax.scatter(
            [p.size_bytes for p in wins], [p.speedup for p in wins], s=40, facecolors="none", edgecolors="k"
        )
    ax.axhline(1 + margin, color="grey", ls="--", lw=1, label=f"ships above {1 + margin:.2f}x")
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes, nccl-tests)")
    ax.set_ylabel("speedup over NCCL (modeled)")
    ax.set_title(
        f"{topology}: modeled speedup of the best candidate over NCCL (calibrated model)", fontsize=9
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()

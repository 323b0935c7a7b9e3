"""Size windows of a tuned bundle: which sizes each shipped schedule answers, in each runtime's terms.

The sweep samples sizes ``s_0 < ... < s_k``. Each sample owns a cell of the range ``[s_0, s_k]``:
cells meet at the geometric mean of neighbouring samples, so together they tile the range with no
gap and no overlap. Neighbouring cells whose sample the same schedule wins (same candidate, same
protocol) by the margin make one window. A window is then cut to the sizes where the schedule's
chunks divide the elements (``nchunksperloop x 4`` bytes): its ends are sizes the runtimes select
it for. Outside every window NCCL runs as it would without the bundle.

The runtimes read a window differently (reference/msccl-xml.md 3.2; :mod:`runtime.selection`):
the Azure executor compares nccl-tests' size with ``[minBytes, maxBytes]`` (inclusive, 0 meaning no
limit), microsoft/msccl compares it with ``[minBytes, maxBytes)``; a runtime that compared a rank's
share (the rules' ``window_whole_buffer``) would get its window in shares. :func:`runtime_window`
writes each window explicitly for each.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from codegen.rules import get_dialect
from xccl.tune.sweep import ELEMENT_BYTES, Point, Timed

__all__ = ["Window", "cells", "cut", "runtime_window", "winning_windows"]


@dataclass(frozen=True)
class Window:
    """Sizes ``low..high`` (nccl-tests' bytes, both included) that one schedule answers."""

    low: int
    high: int
    winner: Timed
    points: tuple[Point, ...]
    """The sampled sizes inside, each won by ``winner``."""

    @property
    def key(self) -> tuple[str, str]:
        return self.winner.candidate.label, self.winner.protocol


def cells(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """Each sample's cell ``(low, high)``: neighbours meet at their geometric mean, the first cell
    starts at the smallest sample and the last ends at the largest."""
    bounds = [sizes[0]]
    for a, b in itertools.pairwise(sizes):
        bounds.append(min(b, max(a + 1, math.isqrt(a * b))))
    highs = [b - 1 for b in bounds[1:]] + [sizes[-1]]
    return list(zip(bounds, highs, strict=True))


def winning_windows(points: Sequence[Point], margin: float) -> list[Window]:
    """The runs of neighbouring cells one schedule wins by ``margin``, as windows (not yet cut)."""
    out: list[Window] = []
    for (low, high), point in zip(cells([p.size_bytes for p in points]), points, strict=True):
        if not point.wins(margin) or point.best is None:
            continue
        key = (point.best.candidate.label, point.best.protocol)
        last = out[-1] if out else None
        if last is not None and last.key == key and last.high + 1 == low:
            out[-1] = Window(last.low, high, last.winner, (*last.points, point))
        else:
            out.append(Window(low, high, point.best, (point,)))
    return out


def cut(window: Window, nchunksperloop: int) -> Window | None:
    """``window`` with its ends moved inward to sizes whose elements its chunks divide (None when
    no such size is left)."""
    unit = nchunksperloop * ELEMENT_BYTES
    low = -(-window.low // unit) * unit
    high = window.high // unit * unit
    if low > high:
        return None
    return Window(low, high, window.winner, window.points)


def runtime_window(collective: str, num_ranks: int, low: int, high: int, dialect: str) -> tuple[int, int]:
    """``(minBytes, maxBytes)`` that make ``dialect``'s runtime select the schedule for exactly the
    nccl-tests sizes ``low..high`` it can be called with (always explicit: never "no limit")."""
    d = get_dialect(dialect)
    if collective in d.window_whole_buffer:
        first, last = low, high
    else:  # a rank's share: the calls are multiples of num_ranks
        first, last = -(-low // num_ranks), high // num_ranks
    return first, last if d.max_bytes_inclusive else last + 1

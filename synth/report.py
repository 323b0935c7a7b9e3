"""Tables of synthesized algorithms: figures of merit, cost models and solve outcomes.

Shared by the synthesizers' command-line front ends: one row per instance tried, with the
algorithm's SCCL costs (``S * alpha`` and the bandwidth term at a reference size) and its modeled
time (:func:`synth.cost.simulate`) at a few sizes, for the algorithms that exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from common.units import format_size
from synth.algorithm import Algorithm
from synth.cost import sccl_cost, simulate
from synth.outcome import Outcome
from topologies.model import Topology

__all__ = ["DEFAULT_SIZES", "REFERENCE_SIZE", "Row", "table"]

DEFAULT_SIZES = (1 << 10, 1 << 20, 1 << 30)
"""Sizes (nccl-tests' buffer) at which a table shows the modeled time: 1 KiB, 1 MiB, 1 GiB."""

REFERENCE_SIZE = 1 << 20
"""The bandwidth cost ``R/C * L * beta`` is shown for this buffer size (1 MiB)."""


@dataclass(frozen=True)
class Row:
    """One instance tried: its collective and size, answer and (when one exists) its algorithm."""

    collective: str
    steps: int
    rounds: int
    chunks: int
    status: str
    seconds: float
    algorithm: Algorithm | None = None
    pareto: bool = False

    @classmethod
    def of(cls, outcome: Outcome, pareto: bool = False) -> Row:
        """The row of one SMT instance's outcome (its status in the front end's words)."""
        q = outcome.question
        if q.steps is None or q.rounds is None or q.chunks is None:
            raise ValueError(f"a table row needs S, R and C; {q} has not all of them")
        return cls(
            q.collective,
            q.steps,
            q.rounds,
            q.chunks,
            outcome.word,
            outcome.seconds,
            outcome.algorithm,
            pareto,
        )


def table(rows: Sequence[Row], topology: Topology, sizes: Sequence[int] = DEFAULT_SIZES) -> tuple[list, list]:
    """Headers and cells of the table (costs left empty where there is no algorithm)."""
    headers = [
        "collective",
        "S",
        "R",
        "C",
        "R/C",
        "status",
        "solve s",
        "front",
        "S*alpha us",
        f"bw us@{format_size(REFERENCE_SIZE)}",
        *(f"time us@{format_size(s)}" for s in sizes),
    ]
    cells = []
    for row in rows:
        ratio = Fraction(row.rounds, row.chunks)
        line = [
            row.collective,
            row.steps,
            row.rounds,
            row.chunks,
            f"{ratio}",
            row.status,
            f"{row.seconds:.2f}",
            "*" if row.pareto else "",
        ]
        if row.algorithm is None:
            line += [""] * (2 + len(sizes))
        else:
            cost = sccl_cost(row.algorithm, topology, REFERENCE_SIZE)
            line += [f"{cost.latency_us:.2f}", f"{cost.bandwidth_us:.2f}"]
            line += [f"{simulate(row.algorithm, topology, s).time_us:.2f}" for s in sizes]
        cells.append(line)
    return headers, cells

"""Tables of synthesized algorithms: figures of merit, cost models and solve outcomes.

Shared by the synthesizers' command-line front ends: one row per instance tried, with the
algorithm's SCCL costs (``S * alpha`` and the bandwidth term at a reference size, line rate), its
modeled time (:func:`synth.cost.simulate`) at a few sizes, for the algorithms that exist, and its gain
over NCCL at each size, both of NCCL's estimates (:func:`synth.nccl.compare.nccl_reference`: its
layout timed in the same model, its own model), so the table answers "does it beat NCCL?".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from common.units import format_size
from synth.algorithm import Algorithm
from synth.cost import sccl_cost, simulate
from synth.nccl.compare import NcclReference, nccl_reference
from synth.outcome import Outcome
from synth.timing import DEFAULT, Params
from topologies.model import Topology

__all__ = ["DEFAULT_SIZES", "REFERENCE_SIZE", "Row", "legend", "table"]

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


def table(
    rows: Sequence[Row], topology: Topology, sizes: Sequence[int] = DEFAULT_SIZES, params: Params = DEFAULT
) -> tuple[list, list]:
    """Headers and cells of the table (costs left empty where there is no algorithm, a gain ``-``
    where NCCL has no such call). Times are modeled with ``params``; :func:`legend` names the model."""
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
        *(f"modeled us@{format_size(s)}" for s in sizes),
        *(f"vs NCCL layout@{format_size(s)}" for s in sizes),
        *(f"vs NCCL model@{format_size(s)}" for s in sizes),
    ]
    references: dict[tuple, list[NcclReference]] = {}
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
            line += [""] * (2 + 3 * len(sizes))
        else:
            line += _costs(row.algorithm, topology, sizes, params, references)
        cells.append(line)
    return headers, cells


def legend(params: Params = DEFAULT) -> str:
    """What the table's numbers are, for its title: every time there is modeled, in this model."""
    return (
        f"modeled: {params.label}; vs NCCL = NCCL's time / ours: NCCL layout = NCCL's channels in the "
        "same model, NCCL model = NCCL's own; S*alpha, bw: SCCL's closed form at line rate"
    )


def _costs(
    algo: Algorithm, topology: Topology, sizes: Sequence[int], params: Params, references: dict
) -> list[str]:
    """SCCL's costs, the modeled times and the gains over NCCL's layout and NCCL's model (NCCL's
    time over ours) of one algorithm; NCCL's estimates are computed once per collective."""
    coll = algo.collective
    key = (coll.name, coll.num_ranks, coll.root)
    if key not in references:
        references[key] = [nccl_reference(topology, coll, s, params) for s in sizes]
    times = [simulate(algo, topology, s, params).time_us for s in sizes]
    gains = [ref.gains(t) for ref, t in zip(references[key], times, strict=True)]
    cost = sccl_cost(algo, topology, REFERENCE_SIZE)
    return [
        f"{cost.latency_us:.2f}",
        f"{cost.bandwidth_us:.2f}",
        *(f"{t:.2f}" for t in times),
        *(_gain(layout) for layout, _ in gains),
        *(_gain(model) for _, model in gains),
    ]


def _gain(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"

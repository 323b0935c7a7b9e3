"""The sweep of ``xccl tune``: per collective and size, the fastest candidate against NCCL.

NCCL's time at a size is the faster of its two estimates: NCCL's own tuning model
(:func:`xccl.api.nccl_time`) and NCCL's channel layout (the ``nccl`` baseline) timed by our engine
in the calibrated model with its best protocol. A candidate is every other baseline, the SMT
Pareto front (on topologies small enough for it to run quickly) and one MILP schedule per anchor
size and shipped sketch of the topology; each is timed by the same engine in the calibrated model
(:func:`xccl.api.simulate`) at every size with every protocol. All times are modeled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from common.errors import XcclError
from synth.algorithm import Algorithm
from synth.deadline import Deadline
from topologies.model import Topology
from xccl import api

__all__ = [
    "ELEMENT_BYTES",
    "MILP_SOLVE_LIMIT_S",
    "PROTOCOLS",
    "SMT_BUDGET_S",
    "SMT_MAX_RANKS",
    "Candidate",
    "CollectiveSweep",
    "Point",
    "Timed",
    "chunks_per_loop",
    "milp_anchors",
    "sweep_collective",
]

PROTOCOLS = ("Simple", "LL128", "LL")
"""NCCL's protocols; an XML names one, so each candidate is timed with each at every size."""
SMT_MAX_RANKS = 8
"""The SMT front is tried on topologies of at most this many ranks (SCCL's scale: it answers in
seconds on DGX-1 and rarely within minutes on 16 ranks)."""
SMT_BUDGET_S = 60.0
"""Wall time the SMT front gets per collective (within ``--time-limit``)."""
MILP_SOLVE_LIMIT_S = 60.0
"""Wall time one MILP solve gets (within ``--time-limit``); it returns its best verified schedule."""
MILP_ANCHOR_FACTOR = 32
"""The MILP is solved at every 32nd power of two of the sweep (and its largest size); each schedule
is then timed at every size, as any other candidate."""
ELEMENT_BYTES = 4
"""A size counts for a candidate only where its chunks divide the elements of this size (float32,
nccl-tests' default; then every type of 1, 2 or 4 bytes divides too)."""


@dataclass(frozen=True)
class Candidate:
    """A verified algorithm that may replace NCCL at some sizes; ``label`` says where it came from."""

    label: str
    algorithm: Algorithm


@dataclass(frozen=True)
class Timed:
    """A candidate's best modeled time at one size, and the protocol that gives it."""

    candidate: Candidate
    protocol: str
    time_us: float


@dataclass(frozen=True)
class Point:
    """One size of the sweep: NCCL's two modeled estimates and the fastest candidate (None: none runs)."""

    size_bytes: int
    nccl_model_us: float
    nccl_model_choice: str
    nccl_layout_us: float | None
    best: Timed | None

    @property
    def nccl_us(self) -> float:
        """NCCL's time: the faster of its two estimates (the stricter bar to beat)."""
        layout = self.nccl_layout_us if self.nccl_layout_us is not None else math.inf
        return min(self.nccl_model_us, layout)

    @property
    def speedup(self) -> float | None:
        """NCCL's time over the best candidate's (> 1: the candidate is faster)."""
        return None if self.best is None else self.nccl_us / self.best.time_us

    def wins(self, margin: float) -> bool:
        """Whether the best candidate beats NCCL by at least ``margin`` (0.05: 5% faster)."""
        return self.speedup is not None and self.speedup >= 1 + margin


@dataclass
class CollectiveSweep:
    """What is known about one collective: NCCL at every size, the candidates timed so far."""

    topology: Topology
    collective: str
    sizes: tuple[int, ...]
    reference: list[tuple[float, str, float | None]] = field(default_factory=list)
    """Per size: NCCL's model time, its algorithm/protocol, NCCL's layout in our engine (or None)."""
    timings: list[tuple[Candidate, list[Timed | None]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    unshippable: set[str] = field(default_factory=set)
    """Labels of candidates that do not compile for every runtime: left out of :meth:`points`."""

    def add(self, candidate: Candidate) -> None:
        """Time ``candidate`` at every size with every protocol (None where its chunks do not divide)."""
        row = [_best_time(candidate, self.topology, size) for size in self.sizes]
        self.timings.append((candidate, row))

    def points(self) -> list[Point]:
        """The sweep's sizes with NCCL and the fastest shippable candidate (the first found on a tie)."""
        out = []
        for k, size in enumerate(self.sizes):
            found = [
                row[k] for c, row in self.timings if row[k] is not None and c.label not in self.unshippable
            ]
            best = min(found, key=lambda t: t.time_us, default=None)
            model_us, choice, layout_us = self.reference[k]
            out.append(Point(size, model_us, choice, layout_us, best))
        return out


def chunks_per_loop(algorithm: Algorithm) -> int:
    """The ``nchunksperloop`` its XML will carry: the chunks of the larger per-rank buffer."""
    return algorithm.collective.size_chunks


def _best_time(candidate: Candidate, topology: Topology, size: int) -> Timed | None:
    if size % (chunks_per_loop(candidate.algorithm) * ELEMENT_BYTES):
        return None
    times = [
        Timed(candidate, p, api.simulate(candidate.algorithm, topology, size, "calibrated", p).time_us)
        for p in PROTOCOLS
    ]
    return min(times, key=lambda t: t.time_us)


def _nccl_layout_us(topology: Topology, size: int, layout: Algorithm | None) -> float | None:
    """NCCL's layout in our engine (NCCL runs it at any size: no divisibility asked)."""
    if layout is None:
        return None
    return min(api.simulate(layout, topology, size, "calibrated", p).time_us for p in PROTOCOLS)


def milp_anchors(sizes: Sequence[int]) -> list[int]:
    """The sizes the MILP is solved at: the smallest, every 32x above it, and the largest."""
    anchors = [s for s in sizes if s >= sizes[0] and _ratio_power(sizes[0], s)]
    if sizes[-1] not in anchors:
        anchors.append(sizes[-1])
    return anchors


def _ratio_power(low: int, size: int) -> bool:
    ratio = size // low
    return size % low == 0 and ratio & (ratio - 1) == 0 and (ratio.bit_length() - 1) % 5 == 0


def _sketches_for(topology: Topology) -> list[str]:
    from sketches import load_sketch, shipped_sketches

    return [name for name in shipped_sketches() if load_sketch(name).topology == topology.name]


Progress = Callable[[str], None]


def sweep_collective(
    topology: Topology,
    collective: str,
    sizes: Sequence[int],
    deadline: Deadline,
    progress: Progress,
) -> CollectiveSweep:
    """NCCL's estimates and every candidate's times at ``sizes``. The search stops adding
    candidates at ``deadline`` or on Ctrl-C (``interrupted`` is then set); what was timed is kept."""
    sweep = CollectiveSweep(topology, collective, tuple(sizes))
    layout = _try(sweep, "NCCL's layout", lambda: api.synthesize(topology, collective, "nccl"))
    for size in sizes:
        est = api.nccl_time(topology, collective, size)
        choice = f"{est.algorithm}/{est.protocol}"
        sweep.reference.append((est.time_us, choice, _nccl_layout_us(topology, size, layout)))
    try:
        _add_baselines(sweep, progress)
        _add_smt(sweep, deadline, progress)
        _add_milp(sweep, deadline, progress)
    except KeyboardInterrupt:
        sweep.interrupted = True
        sweep.notes.append("interrupted: the candidates timed before it are kept")
    return sweep


def _try(sweep: CollectiveSweep, what: str, make: Callable[[], Algorithm]) -> Algorithm | None:
    try:
        return make()
    except XcclError as exc:
        text = str(exc)
        sweep.notes.append(text if text.startswith(what) else f"{what}: {text}")
        return None


def _add_baselines(sweep: CollectiveSweep, progress: Progress) -> None:
    from synth.baselines import BASELINES

    for kind in BASELINES:
        if kind == "nccl":  # NCCL's own layout is the bar, not a candidate
            continue
        algo = _try(
            sweep, f"baseline {kind}", lambda k=kind: api.synthesize(sweep.topology, sweep.collective, k)
        )
        if algo is not None:
            progress(f"{sweep.collective}: timing baseline {kind} at {len(sweep.sizes)} sizes")
            sweep.add(Candidate(f"baseline {kind}", algo))


def _add_smt(sweep: CollectiveSweep, deadline: Deadline, progress: Progress) -> None:
    from synth.smt import pareto_front

    if sweep.topology.num_ranks > SMT_MAX_RANKS:
        sweep.notes.append(f"SMT front not tried: more than {SMT_MAX_RANKS} ranks")
        return
    budget = deadline.limit(SMT_BUDGET_S) or 0.0
    if budget < 1:
        sweep.notes.append("SMT front not tried: the time limit was reached")
        return
    progress(f"{sweep.collective}: SMT Pareto front (at most {budget:.0f} s)")
    try:
        front = pareto_front(sweep.topology, sweep.collective, time_limit_s=budget)
    except XcclError as exc:
        sweep.notes.append(f"SMT front: {exc}")
        return
    for algo in front.algorithms:
        sweep.add(Candidate(f"smt S={algo.num_steps} R={algo.rounds} C={algo.chunks}", algo))


def _add_milp(sweep: CollectiveSweep, deadline: Deadline, progress: Progress) -> None:
    from common.units import format_size

    for sketch in _sketches_for(sweep.topology):
        for size in milp_anchors(sweep.sizes):
            limit = deadline.limit(MILP_SOLVE_LIMIT_S) or 0.0
            if limit < 1:
                sweep.notes.append(
                    f"MILP {sketch} at {format_size(size)} not solved: the time limit was reached"
                )
                continue
            progress(f"{sweep.collective}: MILP {sketch} at {format_size(size)} (at most {limit:.0f} s)")
            algo = _try(
                sweep,
                f"MILP {sketch} at {format_size(size)}",
                lambda s=size, k=sketch, t=limit: api.synthesize(
                    sweep.topology, sweep.collective, "milp", sketch=k, size=s, time_limit_s=t
                ),
            )
            if algo is not None:
                sweep.add(Candidate(f"milp {sketch} @{format_size(size)}", algo))

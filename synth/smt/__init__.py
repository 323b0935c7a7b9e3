"""SMT synthesis in the style of SCCL (z3): instances, least steps and Pareto-optimal fronts.

An instance asks for an algorithm with S steps, R rounds and C chunks per rank; the answer is a
verified :class:`~synth.algorithm.Algorithm`, a proof that none exists (unsat), or unknown on
time-out. See ``docs/smt.md`` for the encoding and the ideas that make it fast.
"""

from __future__ import annotations

from synth.collectives import Collective
from synth.outcome import Outcome
from synth.reductions import DUAL, Problem
from synth.smt.allreduce import AllreduceEncoding
from synth.smt.encoding import Encoding
from synth.smt.least_steps import LeastSteps, default_max_steps, least_steps
from synth.smt.options import DEFAULT_OPTIONS, IDEAS, SmtOptions
from synth.smt.pareto import DEFAULT_MAX_CHUNKS, Front, pareto_front
from synth.smt.synthesizer import ALLREDUCE_METHODS, Synthesizer, solve_instance
from topologies.model import Topology

__all__ = [
    "ALLREDUCE_METHODS",
    "DEFAULT_MAX_CHUNKS",
    "DEFAULT_OPTIONS",
    "IDEAS",
    "Front",
    "LeastSteps",
    "Outcome",
    "SmtOptions",
    "Synthesizer",
    "build_model",
    "default_max_steps",
    "least_steps",
    "pareto_front",
    "solve_instance",
]


def build_model(
    topology: Topology,
    collective: Collective,
    steps: int,
    rounds: int | None = None,
    options: SmtOptions = DEFAULT_OPTIONS,
) -> Encoding | AllreduceEncoding:
    """The formula of one instance, not solved; ``.smt2()`` is its SMT-LIB 2 text.

    Reducescatter and reduce are modelled as their dual (allgather, broadcast) on the reversed
    topology (:data:`synth.reductions.DUAL`), as they are solved; allreduce with the direct encoding.
    """
    rounds = steps if rounds is None else rounds
    if collective.name == "allreduce":
        return AllreduceEncoding(topology, collective, steps, rounds)
    if collective.combining:
        (dual,) = DUAL.apply(Problem(topology, collective)).subproblems
        topology, collective = dual.topology, dual.collective
    return Encoding(topology, collective, steps, steps, rounds, options, fixed_rounds=rounds)

"""The reductions a front end applies unless it knows better."""

from __future__ import annotations

from synth.reductions.base import Problem, Reduction
from synth.reductions.composition import REDUCE_BROADCAST, REDUCESCATTER_ALLGATHER
from synth.reductions.dual import DUAL

__all__ = ["standard_reduction"]


def standard_reduction(problem: Problem) -> Reduction | None:
    """allreduce: reducescatter + allgather where its chunks split among the ranks, else reduce +
    broadcast; reducescatter and reduce: their dual; anything else is solved as it is."""
    if problem.collective.name == "allreduce":
        split = REDUCESCATTER_ALLGATHER
        return split if split.accepts(problem) else REDUCE_BROADCAST
    return DUAL if problem.collective.combining else None

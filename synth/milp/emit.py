"""Timed sends -> an :class:`Algorithm`: steps cut so that no step reads what it delivers itself.

Sends are listed in start order. A new step begins whenever a send forwards a piece that a send of
the current step delivers, so every step only reads data that earlier steps wrote (the Algorithm's
semantics) and the steps' order is the start order (which the simulator uses to break ties). Each
step gets the rounds its loads need (``chunk_capacity().rounds_needed``).
"""

from __future__ import annotations

from collections.abc import Sequence

from synth.algorithm import Algorithm, Provenance, Send, Step
from synth.collectives import Collective
from topologies.model import Topology

__all__ = ["to_algorithm"]


def to_algorithm(
    collective: Collective,
    topology: Topology,
    sends: Sequence[tuple[int, int, int, int, float]],
    provenance: Provenance,
) -> Algorithm:
    """``sends``: ``(chunk, src, dst, parent index or -1, start_us)`` in start order."""
    capacity = topology.chunk_capacity()
    steps: list[Step] = []
    current: list[Send] = []
    members: set[int] = set()

    def close() -> None:
        if current:
            rounds = capacity.rounds_needed((s.src, s.dst) for s in current)
            steps.append(Step(rounds, tuple(current)))

    for i, (chunk, src, dst, parent, start) in enumerate(sends):
        if parent in members:
            close()
            current = []
            members = set()
        current.append(Send(chunk, src, dst, "copy", start))
        members.add(i)
    close()
    return Algorithm(collective, topology.name, tuple(steps), provenance)

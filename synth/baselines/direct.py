"""The direct baseline: every chunk goes straight from its source to each rank that needs it, in
one step (on a switch, the step's rounds grow with the load on each port)."""

from __future__ import annotations

from synth.algorithm import Algorithm, Send
from synth.baselines.common import make_algorithm
from synth.collectives import Collective
from topologies.model import Topology

__all__ = ["direct"]


def direct(topology: Topology, collective: Collective) -> Algorithm:
    """Any non-combining collective whose chunks have one source each."""
    sends = []
    for cid, chunk in enumerate(collective.chunks):
        src = min(chunk.pre)
        sends.extend(Send(cid, src, dst) for dst in sorted(chunk.post - chunk.pre))
    return make_algorithm("direct", topology, collective, [sorted(sends)])

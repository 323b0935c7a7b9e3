"""Logarithmic baselines: recursive doubling (allgather) and the binomial tree (broadcast)."""

from __future__ import annotations

from synth.algorithm import Algorithm, Send
from synth.baselines.common import BaselineError, make_algorithm
from synth.collectives import Collective
from topologies.model import Topology

__all__ = ["binomial_tree", "recursive_doubling"]


def recursive_doubling(topology: Topology, collective: Collective) -> Algorithm:
    """Allgather on a power-of-two rank count: in step k, rank r exchanges all it holds with r xor 2^k."""
    n, c = collective.num_ranks, collective.chunks_per_rank
    if collective.name != "allgather":
        raise BaselineError(f"baseline recursive-doubling does not apply to {collective.name}")
    if n & (n - 1):
        raise BaselineError(f"baseline recursive-doubling: needs a power-of-two number of ranks, got {n}")
    steps = []
    k = 1
    while k < n:
        sends = []
        for r in range(n):
            partner = r ^ k
            block = r & ~(k - 1)  # the origins r holds: its aligned group of k ranks
            sends.extend(Send(o * c + i, r, partner) for o in range(block, block + k) for i in range(c))
        steps.append(sorted(sends))
        k <<= 1
    return make_algorithm("recursive-doubling", topology, collective, steps)


def binomial_tree(topology: Topology, collective: Collective) -> Algorithm:
    """Broadcast: in step k, every rank holding the data (relative rank < 2^k) sends it to relative
    rank + 2^k. Relative ranks are ``r xor root`` for a power-of-two count (hypercube partners),
    else ``r - root`` modulo n."""
    n, c = collective.num_ranks, collective.chunks_per_rank
    if collective.name != "broadcast":
        raise BaselineError(f"baseline binomial-tree does not apply to {collective.name}")
    root = collective.root

    def actual(rel: int) -> int:
        return rel ^ root if n & (n - 1) == 0 else (rel + root) % n

    steps = []
    k = 1
    while k < n:
        sends = [Send(i, actual(rel), actual(rel + k)) for rel in range(min(k, n - k)) for i in range(c)]
        steps.append(sorted(sends))
        k <<= 1
    return make_algorithm("binomial-tree", topology, collective, steps)

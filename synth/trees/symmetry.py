"""The symmetry a tree packing is solved under: a group of rank permutations acting freely.

A packing symmetric under a group ``H`` is described by the trees of one representative rank per
orbit; every other rank's trees are their images (``h`` maps the representative ``a``'s tree onto
the tree of ``h(a)``). Averaging any optimal packing over ``H`` gives a symmetric one, so when ``H``
is made of symmetries of the topology nothing is lost, and the problem shrinks by ``|H|``.

Correctness does not depend on ``H`` being a symmetry: the packing counts every resource's load
over all the images exactly (:mod:`synth.trees.packing`). Only its optimality does, and the
candidates below are kept only when each generator maps every logical link onto one with the same
bandwidths, counts and latencies along its path. The groups tried are products of cyclic shifts
and bit flips on the ranks of each machine, and the shift of whole machines: they cover rings,
hypercubes, tori, switches and identical machines of identical GPUs (``dgx-h100x64``: Z64 x Z8,
one orbit, so one tree family is solved for 512 roots). A topology with none of them is solved
with every rank as its own orbit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["RankGroup", "find_group", "trivial_group"]


@dataclass(frozen=True, eq=False)
class RankGroup:
    """``elements[k]`` is the k-th permutation (``elements[k][r]``: the image of rank r); element 0
    is the identity and no other fixes a rank (the action is free)."""

    name: str
    elements: np.ndarray

    @property
    def order(self) -> int:
        return len(self.elements)

    @property
    def num_ranks(self) -> int:
        return self.elements.shape[1]

    @cached_property
    def inverses(self) -> np.ndarray:
        return np.argsort(self.elements, axis=1)

    @cached_property
    def reps(self) -> np.ndarray:
        """The least rank of each orbit, in increasing order."""
        return np.flatnonzero(self.elements.min(axis=0) == np.arange(self.num_ranks))

    @cached_property
    def rep_of(self) -> np.ndarray:
        """For each rank, the index (into :attr:`reps`) of its orbit's representative."""
        out = np.empty(self.num_ranks, dtype=np.int64)
        for i, a in enumerate(self.reps):
            out[self.elements[:, a]] = i
        return out

    @cached_property
    def mover(self) -> np.ndarray:
        """For each rank u, the element that maps u's representative to u."""
        out = np.empty(self.num_ranks, dtype=np.int64)
        for a in self.reps:
            out[self.elements[:, a]] = np.arange(self.order)
        return out

    def pair_class(self, u: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The orbit of each pair ``(u, w)`` as ``(representative index, image of w)``: the pair
        ``(reps[i], x)`` it is the image of."""
        return self.rep_of[u], self.inverses[self.mover[u], w]


def trivial_group(n: int) -> RankGroup:
    """Every rank its own orbit."""
    return RankGroup("1", np.arange(n, dtype=np.int64)[np.newaxis, :])


def _cyclic(g: int) -> np.ndarray:
    return (np.arange(g)[np.newaxis, :] + np.arange(g)[:, np.newaxis]) % g


def _flips(g: int) -> np.ndarray:
    return np.arange(g)[np.newaxis, :] ^ np.arange(g)[:, np.newaxis]


def _product(machines: int, local: np.ndarray, shift: bool) -> np.ndarray:
    """Elements on ``machines`` blocks of ``g`` ranks: a local permutation applied in every block,
    composed with a shift of whole blocks (all shifts when ``shift``, else none)."""
    g = local.shape[1]
    offsets = np.arange(machines) if shift else np.zeros(1, dtype=np.int64)
    block = np.arange(machines * g) // g
    within = np.arange(machines * g) % g
    out = [((block + k) % machines) * g + loc[within] for k in offsets for loc in local]
    return np.array(out, dtype=np.int64)


def _locals(g: int) -> Iterator[tuple[str, np.ndarray, list[int]]]:
    """(name, elements, indices of generators) of the groups tried on one block of ``g`` ranks."""
    if g > 1:
        yield f"Z{g}", _cyclic(g), [1]
    if g > 2 and g & (g - 1) == 0:
        yield f"Z2^{g.bit_length() - 1}", _flips(g), [1 << b for b in range(g.bit_length() - 1)]
    yield "", np.arange(g)[np.newaxis, :], []


def _candidates(topology: Topology) -> list[tuple[str, Callable[[], np.ndarray], list[np.ndarray]]]:
    """(name, elements, generators) of each group worth trying, largest first: on ranks numbered
    in blocks (machines, or the rows of a torus), a group of each block times the block shifts."""
    n, k = topology.num_ranks, topology.num_machines
    machines = k > 1 and n % k == 0 and all(topology.node_of[r] == r // (n // k) for r in range(n))
    sizes = [n // k] if machines else [n] + [g for g in range(n // 2, 1, -1) if n % g == 0]
    found = []
    for g in sizes:
        m = n // g
        shift = _product(m, np.arange(g)[np.newaxis, :], shift=True)[1:2] if m > 1 else []
        for label, local, gens in _locals(g):
            generators = [_product(m, local[[i]], shift=False)[0] for i in gens] + list(shift)
            if not generators:
                continue
            name = " x ".join(p for p in (f"Z{m}" if m > 1 else "", label) if p)
            order = len(local) * m
            found.append((order, name, lambda m=m, local=local: _product(m, local, shift=m > 1), generators))
    found.sort(key=lambda c: -c[0])
    return [c[1:] for c in found]


def _signatures(topology: Topology) -> dict[tuple[int, int], tuple]:
    """What a symmetry must keep of every logical link: each edge's rate, count and latency."""
    logical = topology.logical()
    kept = {e: (r.bandwidth_GBps, r.count, r.alpha_us) for e, r in logical.resources.items()}
    return {pair: tuple(kept[e] for e in link.edges) for pair, link in logical.links.items()}


def _preserves(perm: np.ndarray, signatures: dict) -> bool:
    """Whether ``perm`` maps every logical link onto one with the same signature (a missing image
    has none)."""
    image, get = perm.tolist(), signatures.get
    return all(get((image[u], image[v])) == sig for (u, v), sig in signatures.items())


def find_group(topology: Topology) -> RankGroup:
    """The largest candidate group (module docstring) whose generators are symmetries of the
    topology's logical view, or the trivial group."""
    n = topology.num_ranks
    if n == 1:
        return trivial_group(1)
    signatures = _signatures(topology)
    for name, elements, generators in _candidates(topology):
        if generators and all(_preserves(gen, signatures) for gen in generators):
            return RankGroup(name, elements())
    return trivial_group(n)

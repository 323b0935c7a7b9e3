"""Symmetries of a synthesis problem: topology automorphisms that map the collective onto itself,
and chunks that are interchangeable.

An automorphism ``sigma`` of the topology maps an algorithm to another one if the collective is
invariant too: every chunk ``c`` needs an image ``pi(c)`` with ``pre(pi(c)) = sigma(pre(c))`` and
``post(pi(c)) = sigma(post(c))``. Chunks with equal ``(pre, post)`` form a *class* of interchangeable
chunks; ``pi`` maps the k-th chunk of a class to the k-th chunk of the image class (for allgather
this is ``r*C+i -> sigma(r)*C+i``, for alltoall ``(s*n+d)*C+i -> (sigma(s)*n+sigma(d))*C+i``).
Rooted collectives keep only the automorphisms that fix their root.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from synth.collectives import Collective
from topologies.automorphisms import automorphisms
from topologies.model import Topology

__all__ = ["ProblemSymmetry", "chunk_classes", "chunk_map", "problem_symmetry"]

Permutation = tuple[int, ...]


def chunk_classes(collective: Collective) -> list[tuple[int, ...]]:
    """Interchangeable chunks (same pre and post), each class in id order, classes by first id."""
    groups: dict[tuple[frozenset[int], frozenset[int]], list[int]] = {}
    for cid, chunk in enumerate(collective.chunks):
        groups.setdefault((chunk.pre, chunk.post), []).append(cid)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: g[0])


def chunk_map(collective: Collective, perm: Permutation) -> tuple[int, ...] | None:
    """``pi`` with ``pi[c]`` the image of chunk ``c`` under rank permutation ``perm``, or None
    when ``perm`` does not map the collective onto itself."""
    groups: dict[tuple[frozenset[int], frozenset[int]], tuple[int, ...]] = {}
    for cls in chunk_classes(collective):
        chunk = collective.chunks[cls[0]]
        groups[(chunk.pre, chunk.post)] = cls
    image = [0] * len(collective.chunks)
    for (pre, post), cls in groups.items():
        target = groups.get((frozenset(perm[r] for r in pre), frozenset(perm[r] for r in post)))
        if target is None or len(target) != len(cls):
            return None
        for a, b in zip(cls, target, strict=True):
            image[a] = b
    return tuple(image)


@dataclass(frozen=True)
class ProblemSymmetry:
    """The automorphisms (besides the identity) that map the problem onto itself, with their chunk
    maps, and the orbits of chunk classes under the group they generate."""

    perms: tuple[Permutation, ...]
    chunk_maps: tuple[tuple[int, ...], ...]
    classes: tuple[tuple[int, ...], ...]
    representatives: frozenset[int]
    """Indices into ``classes`` of one class per orbit (the one with the smallest first chunk)."""

    @property
    def trivial(self) -> bool:
        return not self.perms


@lru_cache(maxsize=32)
def _automorphisms(topology: Topology, limit: int) -> tuple[Permutation, ...]:
    """Cached per topology object: every encoding of a front walk asks again."""
    return tuple(automorphisms(topology, limit))


def problem_symmetry(topology: Topology, collective: Collective, limit: int = 64) -> ProblemSymmetry:
    """Up to ``limit`` automorphisms of ``topology`` that also map ``collective`` onto itself."""
    perms, maps = [], []
    identity = tuple(range(topology.num_ranks))
    for perm in _automorphisms(topology, limit):
        if perm == identity:
            continue
        image = chunk_map(collective, perm)
        if image is not None:
            perms.append(perm)
            maps.append(image)
    classes = chunk_classes(collective)
    class_of = {c: k for k, cls in enumerate(classes) for c in cls}
    parent = list(range(len(classes)))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for image in maps:
        for k, cls in enumerate(classes):
            a, b = find(k), find(class_of[image[cls[0]]])
            if a != b:
                parent[max(a, b)] = min(a, b)
    reps = frozenset(k for k in range(len(classes)) if find(k) == k)
    return ProblemSymmetry(tuple(perms), tuple(maps), tuple(classes), reps)

"""The symmetry quotient: a problem's symmetries (topology automorphisms that map the collective
onto itself), its interchangeable chunks, and the reduction to symmetric algorithms.

An automorphism ``sigma`` of the topology maps an algorithm to another one if the collective is
invariant too: every chunk ``c`` needs an image ``pi(c)`` with ``pre(pi(c)) = sigma(pre(c))`` and
``post(pi(c)) = sigma(post(c))``. Chunks with equal ``(pre, post)`` form a *class* of interchangeable
chunks; ``pi`` maps the k-th chunk of a class to the k-th chunk of the image class (for allgather
this is ``r*C+i -> sigma(r)*C+i``, for alltoall ``(s*n+d)*C+i -> (sigma(s)*n+sigma(d))*C+i``).
Rooted collectives keep only the automorphisms that fix their root.

:class:`SymmetryQuotient` asks for a symmetric algorithm only: a solver may describe it by one send
per orbit (an SMT encoding names every send after its orbit's least member), and ``invert``
completes every orbit. An unsolvable quotient proves nothing about the full problem.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TypeVar

from synth.algorithm import Send, Step
from synth.collectives import Collective
from synth.reductions.base import Problem, Reduced, Reduction, ReductionError, Solution
from topologies.automorphisms import automorphisms
from topologies.model import Topology

__all__ = [
    "QUOTIENT",
    "ProblemSymmetry",
    "SymmetryQuotient",
    "chunk_classes",
    "chunk_map",
    "orbit_representatives",
    "problem_symmetry",
]

Permutation = tuple[int, ...]
K = TypeVar("K", bound=Hashable)


def orbit_representatives(items: Sequence[K], images: Callable[[K], Iterable[K]]) -> dict[K, K]:
    """Each item's representative: the least item of its orbit under the maps ``images`` gives
    (union-find over every item and its images). An orbit that reaches something outside ``items``
    is left out, items and all."""
    parent = {item: item for item in items}

    def find(item: K) -> K:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    broken = set()
    for item in items:
        for other in images(item):
            if other not in parent:
                broken.add(item)
                continue
            a, b = find(item), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)  # type: ignore[type-var]
    bad = {find(item) for item in broken}
    return {item: find(item) for item in items if find(item) not in bad}


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
    rep = orbit_representatives(range(len(classes)), lambda k: (class_of[m[classes[k][0]]] for m in maps))
    reps = frozenset(k for k, r in rep.items() if k == r)
    return ProblemSymmetry(tuple(perms), tuple(maps), tuple(classes), reps)


def _send_images(symmetry: ProblemSymmetry, key: tuple[int, int, int, str]):
    chunk, src, dst, op = key
    for perm, image in zip(symmetry.perms, symmetry.chunk_maps, strict=True):
        yield image[chunk], perm[src], perm[dst], op


def _orbit(symmetry: ProblemSymmetry, key: tuple[int, int, int, str]) -> set[tuple[int, int, int, str]]:
    """Every image of a send under the group the symmetries generate."""
    seen, todo = {key}, [key]
    while todo:
        for other in _send_images(symmetry, todo.pop()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


@dataclass(frozen=True, repr=False)
class SymmetryQuotient(Reduction):
    """A problem -> the same problem restricted to symmetric algorithms (``Problem.symmetry`` set
    to up to ``limit`` automorphisms); a solution with one send per orbit -> every send."""

    limit: int = 64
    name = "symmetry quotient"

    def accepts(self, problem: Problem) -> bool:
        return not problem.collective.combining

    def apply(self, problem: Problem) -> Reduced:
        if not self.accepts(problem):
            raise ReductionError(
                f"the symmetry quotient is for non-combining collectives, not {problem.collective.name}"
            )
        symmetry = problem_symmetry(problem.topology, problem.collective, self.limit)
        quotient = replace(problem, symmetry=symmetry)
        return Reduced(self, problem, (quotient,), f"quotient by {len(symmetry.perms)} symmetries", symmetry)

    def invert(self, reduced: Reduced, solutions: Sequence[Solution]) -> Solution:
        (solution,) = solutions
        algo, symmetry = solution.algorithm, reduced.data
        steps = []
        for st in algo.steps:
            keys = set()
            for s in st.sends:
                keys |= _orbit(symmetry, (s.chunk, s.src, s.dst, s.op))
            steps.append(Step(st.rounds, tuple(sorted(Send(*key) for key in keys))))
        full = replace(algo, steps=tuple(steps))
        full.verify(reduced.original.topology)
        return Solution(full, solution.makespan_us)


QUOTIENT = SymmetryQuotient()

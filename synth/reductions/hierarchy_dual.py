"""A composed allgather run backwards (reducescatter) and followed by itself (allreduce), as arrays.

At 4096 GPUs a composed allgather is 16.8 M sends (:class:`~synth.reductions.hierarchy.Composed`,
held as arrays); its dual (:class:`~synth.reductions.dual.Dual`: the allgather of the reversed
topology, steps run backwards, every send turned around into a reduction) and the allreduce made of
both (:data:`~synth.reductions.composition.REDUCESCATTER_ALLGATHER`) would be 16.8 M and 33.5 M
:class:`~synth.algorithm.Send` objects, more memory than this machine has. :class:`Staged` holds
them as the same arrays, turned around, with the stages :mod:`~synth.reductions.hierarchy_time`
times from their parts, and makes the Algorithm only when asked for.

Why the checks below are the verifier's (:func:`synth.verify.verify` of the inverted Algorithm,
which :class:`~synth.reductions.dual.Dual` runs), for a dual whose allgather was verified as a whole:

- *Contributions.* In a reducescatter every rank holds every address from the start, so no send
  lacks its chunk; the only faults left are a contribution reduced in twice, or one that never
  reaches its address's owner. If the allgather delivers every chunk exactly once to every rank but
  its origin, each chunk's sends form a tree rooted at its origin whose every edge leaves a rank
  after that rank received (a send reads the previous step's state); run backwards, every rank
  reduces into its parent once, after every child has reduced into it, so each owner ends with
  every contribution exactly once. A verified allgather reaches all ``n - 1`` other ranks with each
  chunk, so "exactly once, never the origin" is "``n (n - 1)`` sends per chunk per rank in all":
  one count. Beyond it a chunk reaches some rank twice (or its origin) and, run backwards, that
  rank's contribution arrives at the owner along two paths (each rank's first receipt precedes
  its sends), which the verifier rejects.
- *Links and capacity.* Turned around, a send uses the topology's link the other way: its pairs are
  routed on the topology and each step's rounds are the fewest its loads need there (as
  :func:`~synth.reductions.hierarchy.verify_composition` counts them); a pair without a link is
  named as the verifier names it.
- *Allreduce.* After a valid reducescatter, the owner of each address holds its full sum; in a
  verified allgather of the same chunks every copy leaves a rank that received the chunk (so its
  full sum) or its origin, the owner: no copy discards a contribution and every rank ends with the
  full sum. Steps are concatenated, so each keeps its rounds.

tests/test_hierarchy_dual.py holds these verdicts equal to the verifier's on small compositions
and on broken ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from synth.algorithm import Algorithm, Provenance, Send, Step, algorithm_name
from synth.collectives import Collective, make_collective
from synth.errors import VerificationError
from synth.reductions.hierarchy import Composed, Machines
from synth.reductions.hierarchy_time import INNER, RAILS, Stage
from synth.replay import Pairs
from topologies.model import Topology

__all__ = ["Staged", "allreduce_of", "dual_of"]


@dataclass(frozen=True)
class Staged:
    """A composed reducescatter or allreduce held as arrays and verified (:func:`dual_of`,
    :func:`allreduce_of`): its stages' rows ``(chunk, src, dst)``, each stage's op, each step's
    rounds; the :class:`Algorithm` is made only when asked for (:meth:`algorithm`)."""

    collective: Collective
    topology: str
    machines: Machines
    chunks: int
    """Chunks per rank of the allgathers it is made of (the rows' chunk numbering)."""
    stages: tuple[Stage, ...]
    ops: tuple[str, ...]
    """Per stage: ``reduce`` (a reducescatter's) or ``copy`` (an allreduce's allgather)."""
    rounds: tuple[int, ...]
    provenance: Provenance

    @property
    def blocks(self) -> tuple[np.ndarray, ...]:
        return tuple(b for s in self.stages for b in s.blocks)

    @property
    def num_sends(self) -> int:
        return sum(len(b) for b in self.blocks)

    @property
    def name(self) -> str:
        """The name its Algorithm has."""
        rounds = self.rounds
        return algorithm_name(
            self.collective.name, self.topology, len(rounds), sum(rounds), self.collective.chunks_per_rank
        )

    def algorithm(self) -> Algorithm:
        """The same schedule as an :class:`Algorithm` (verified: the checks it passed are the verifier's)."""
        steps = []
        for stage, op in zip(self.stages, self.ops, strict=True):
            for block in stage.blocks:
                steps.append(tuple(Send(c, s, d, op) for c, s, d in block.tolist()))
        out = tuple(Step(r, sends) for r, sends in zip(self.rounds, steps, strict=True))
        return Algorithm(self.collective, self.topology, out, self.provenance)


def dual_of(composed: Composed, topology: Topology) -> Staged:
    """The reducescatter on ``topology`` that runs ``composed`` (a verified allgather of the reversed
    topology) backwards: its steps in reverse, each send turned around into a reduction, the rows
    of a step in reverse (the engine starts them in that order: what finished last starts first);
    checked as the module docstring says, else :class:`VerificationError`."""
    composition = composed.composition
    n = topology.num_ranks
    if composed.collective.num_ranks != n:
        raise VerificationError(
            f"{composed.name}: {composed.collective.num_ranks} ranks, {topology.name} has {n}"
        )
    blocks = tuple(np.ascontiguousarray(b[::-1][:, [0, 2, 1]]) for b in reversed(composition.blocks))
    inner = len(blocks) - composition.rail_steps
    stages = (Stage(INNER, 0, blocks[:inner]), Stage(RAILS, inner, blocks[inner:]))
    collective = make_collective("reducescatter", n, composition.chunks, lazy=True)
    provenance = replace(composed.provenance, via="inverted allgather on the reversed topology")
    pairs = Pairs(topology, blocks)  # its pairs routed once, on this topology
    rounds = tuple(pairs.rounds_needed(block) for block in blocks)
    name = algorithm_name("reducescatter", topology.name, len(blocks), sum(rounds), composition.chunks)
    _check_links(name, topology, blocks, pairs)
    _check_once(name, composition.blocks, n, composition.chunks)
    return Staged(
        collective,
        topology.name,
        composition.machines,
        composition.chunks,
        stages,
        ("reduce",) * 2,
        rounds,
        provenance,
    )


def allreduce_of(first: Staged, second: Composed, topology: Topology) -> Staged:
    """``first`` (a reducescatter from :func:`dual_of`) then ``second`` (a verified allgather on
    ``topology`` of the same chunks): the allreduce, valid as the module docstring says."""
    n, chunks = topology.num_ranks, first.chunks
    if first.collective.name != "reducescatter" or second.composition.chunks != chunks:
        raise VerificationError(
            f"allreduce on {topology.name}: expected a reducescatter then an allgather of the same chunks, got "
            f"{first.collective.name} with {chunks} and an allgather with {second.composition.chunks} per rank"
        )
    if first.topology != topology.name or second.topology != topology.name:
        raise VerificationError(
            f"allreduce on {topology.name}: its parts are for {first.topology} and {second.topology}"
        )
    composition = second.composition
    cut, at = composition.rail_steps, sum(len(s.blocks) for s in first.stages)
    stages = (
        *first.stages,
        Stage(RAILS, at, composition.blocks[:cut]),
        Stage(INNER, at + cut, composition.blocks[cut:]),
    )
    collective = make_collective("allreduce", n, n * chunks, lazy=True)
    t1, t2 = first.provenance.solve_time_s, second.provenance.solve_time_s
    provenance = replace(
        first.provenance,
        solve_time_s=None if t1 is None or t2 is None else t1 + t2,
        optimal=None,
        via="reducescatter + allgather",
    )
    ops = (*first.ops, "copy", "copy")
    return Staged(
        collective,
        topology.name,
        first.machines,
        chunks,
        stages,
        ops,
        first.rounds + second.rounds,
        provenance,
    )


def _check_once(name: str, blocks: tuple[np.ndarray, ...], n: int, chunks: int) -> None:
    """Raise unless the allgather's rows bring every chunk to every rank but its origin exactly
    once (it is verified: it brings each to every one at least once, so a count decides)."""
    if sum(len(b) for b in blocks) == n * (n - 1) * chunks:
        return
    addresses = n * chunks
    for step, block in enumerate(blocks):  # the first receipt that repeats one or returns a chunk home
        seen = np.concatenate([b[:, 2] * addresses + b[:, 0] for b in blocks[: step + 1]])
        codes, count = np.unique(seen, return_counts=True)
        home = block[:, 2] == block[:, 0] // chunks
        again = np.isin(block[:, 2] * addresses + block[:, 0], codes[count > 1])
        bad = np.flatnonzero(home | again)
        if len(bad):
            chunk, src, dst = (int(x) for x in block[bad[0]])
            why = "its origin" if dst == chunk // chunks else "a rank that has it"
            raise VerificationError(
                f"{name}: its allgather sends chunk {chunk} from rank {src} to {why} (rank {dst}) in step {step}: "
                f"run backwards, contributions to chunk {chunk} would be reduced twice"
            )


def _check_links(name: str, topology: Topology, blocks: tuple[np.ndarray, ...], pairs: Pairs) -> None:
    """Raise naming the first send whose pair has no link on ``topology``, as the verifier does."""
    for step, block in enumerate(blocks):
        linked = pairs.linked[pairs.index(block[:, 1], block[:, 2])]
        bad = np.flatnonzero(~linked)
        if len(bad):
            chunk, src, dst = (int(x) for x in block[bad[0]])
            raise VerificationError(
                f"{name}: step {step}: send of chunk {chunk} from rank {src} to rank {dst}: "
                f"no link {src} -> {dst} in {topology.name}"
            )

"""Tree-packing synthesis: allgather, reducescatter and allreduce, bandwidth-optimal at any scale.

An allgather is solved directly (:mod:`synth.trees.packing`, then :mod:`synth.trees.schedule`);
the others through the reductions every synthesizer shares: reducescatter as the allgather of
the reversed topology run backwards (:data:`synth.reductions.DUAL`), allreduce as reducescatter
then allgather (:data:`synth.reductions.REDUCESCATTER_ALLGATHER`). With ``hierarchical``, an
allgather on identical machines is first split into one between the machines and one inside a
machine (:data:`synth.reductions.hierarchy.HIERARCHY`), each packed on its own, far smaller, graph,
then composed and verified as arrays, and so are its reducescatter and allreduce
(:mod:`synth.reductions.hierarchy_dual`): their Algorithm (16.8 M and 33.5 M sends at 4096 GPUs) is
made on demand.

Every allgather is packed under the largest symmetry group found (:mod:`synth.trees.symmetry`),
so ``dgx-h100x64`` packs the trees of one root and lifts them onto 512. The result is verified on
the whole topology by the reductions' ``invert`` or here; its modeled time is the timing engine's.

>>> from topologies import load
>>> result = synthesize(load("ring:4"), "allgather", size_bytes=1 << 20)
>>> result.algorithm.provenance.method, result.optimal
('trees', True)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TypeVar

from common.limits import Limit
from synth.algorithm import Algorithm, Send, Step
from synth.baselines import BASELINES, make_baseline
from synth.collectives import make_collective
from synth.cost import SimResult, chunk_bytes, simulate, sized, start_times
from synth.defaults import TREES_COLLECTIVES, TREES_TIME_LIMIT_S
from synth.errors import InfeasibleError
from synth.reductions import DUAL, REDUCESCATTER_ALLGATHER, Problem, Reduced, Solution
from synth.reductions.hierarchy import HIERARCHY, Composed, Machines, machines_of
from synth.reductions.hierarchy_dual import Staged, allreduce_of, dual_of
from synth.reductions.hierarchy_time import simulate_composition, simulate_stages
from synth.timing import DEFAULT, Params, model_params
from synth.trees.packing import Packing, pack, pair_classes
from synth.trees.schedule import MAX_CHUNKS, MAX_SENDS, choose_chunks, chunk_choices, schedule
from synth.trees.symmetry import find_group
from topologies.model import Topology

__all__ = ["SENDS", "WITHIN", "TreesResult", "check_sends", "modeled", "synthesize"]

SENDS = Limit("sends", 2_000_000, "XCCL_MAX_TREES_SENDS")
"""The sends of an :class:`Algorithm` made, at one chunk per rank, at most: about 1.5-3 KB each
while it is built, verified and timed (512 GPUs: 261,632 sends, 379 MB; 4096 GPUs, 16.8 M, ran out
of 7 GB). A hierarchical schedule is composed and verified as arrays (:class:`Composed`,
:class:`Staged`: about 24 bytes a send) and made an Algorithm only when asked for
(:attr:`TreesResult.algorithm`)."""

WITHIN = ("trees", "smt", *(kind for kind in BASELINES if kind != "hierarchical"))
"""How the allgather inside a machine is made in a hierarchical synthesis."""

Log = Callable[[str], None]
T = TypeVar("T")


@dataclass(frozen=True)
class TreesResult:
    """A verified schedule, and the packings it was built from (one per allgather in it: an
    allreduce's two on a symmetric topology are one packing, listed twice). ``made`` is an
    :class:`Algorithm`, or a hierarchical schedule still held as arrays: an allgather
    (:class:`Composed`), a reducescatter or allreduce (:class:`Staged`)."""

    made: Algorithm | Composed | Staged
    packings: tuple[Packing, ...]
    seconds: float
    interrupted: bool

    @property
    def optimal(self) -> bool:
        """Every packing's rate is proven optimal (its dual bound met): the schedule's throughput
        is the topology's best; its time still pays the pipeline's fill and the chunks' rounding."""
        return all(p.optimal for p in self.packings)

    @property
    def composed(self) -> Composed | None:
        return self.made if isinstance(self.made, Composed) else None

    @property
    def num_sends(self) -> int:
        return self.made.num_sends

    @property
    def name(self) -> str:
        return self.made.name

    @cached_property
    def algorithm(self) -> Algorithm:
        """The schedule as an :class:`Algorithm`, made from the arrays on first use, within
        :data:`SENDS` (a :class:`~common.limits.LimitError` naming it beyond)."""
        if isinstance(self.made, Algorithm):
            return self.made
        coll = self.made.collective
        n = coll.num_ranks
        sends = n * (n - 1) * (2 if coll.name == "allreduce" else 1)
        SENDS.check(sends, f"{coll.name} on {self.made.topology} as an Algorithm")
        return self.made.algorithm()


def check_sends(topology: Topology, collective: str, why: str = "") -> None:
    """Refuse at once a ``collective`` whose :class:`Algorithm` would exceed :data:`SENDS`: every
    chunk goes to every other rank (twice for allreduce); ``why`` follows the topology's name."""
    n = topology.num_ranks
    SENDS.check(n * (n - 1) * (2 if collective == "allreduce" else 1), f"{collective} on {topology.name}{why}")


def modeled(
    result: TreesResult, topology: Topology, size_bytes: float, params: Params = DEFAULT, log: Log | None = None
) -> SimResult:
    """The timing engine's time of ``result``: :func:`synth.cost.simulate` of its Algorithm, or for
    a composed (hierarchical) schedule the same time from its parts
    (:func:`~synth.reductions.hierarchy_time.simulate_composition` and ``simulate_stages``, equal
    to it and held so by tests/test_hierarchy_time.py and tests/test_hierarchy_dual.py), which
    needs no Algorithm: 4096 GPUs in about 2 minutes."""
    made = result.made
    if isinstance(made, Composed):
        return simulate_composition(
            made.composition, topology, size_bytes, params, provenance=made.provenance, log=log
        )
    if isinstance(made, Staged):
        return simulate_stages(
            made,
            made.stages,
            made.machines,
            made.chunks,
            made.collective,
            topology,
            size_bytes,
            params,
            provenance=made.provenance,
            log=log,
        )
    return simulate(made, topology, size_bytes, params)


@dataclass
class _Run:
    """What the solves of one synthesis share: the deadline, the progress line, the chunk counts
    chosen by role (so an allreduce's allgather matches its reducescatter), the packings found."""

    deadline: float
    log: Log | None
    most_sends: int
    within: str = "trees"
    params: Params = DEFAULT
    """The timing model the chunk counts are chosen in (the calibrated one unless told)."""
    chunks: dict[str, int] = field(default_factory=dict)
    packings: list[Packing] = field(default_factory=list)
    interrupted: bool = False
    solved: dict[tuple, tuple[Solution | Composed, list[Packing]]] = field(default_factory=dict)
    """Each allgather solved, by (topology, collective, role), or composed, by (topology,
    "composed"), with its packings: an allreduce's reducescatter is the allgather of the reversed
    topology, which on a symmetric topology is the topology itself (:class:`~synth.reductions.Dual`),
    so both halves are one solve."""

    def say(self, message: str) -> None:
        if self.log is not None:
            self.log(f"trees: {message}")


def synthesize(
    topology: Topology,
    collective: str,
    *,
    size_bytes: float = float(1 << 30),
    time_limit_s: float = TREES_TIME_LIMIT_S,
    hierarchical: bool = False,
    within: str = "trees",
    max_sends: int = MAX_SENDS,
    log: Log | None = None,
    params: Params = DEFAULT,
) -> TreesResult:
    """A verified ``collective`` (allgather, reducescatter or allreduce) on ``topology`` from tree
    packings, its chunks chosen for buffers of ``size_bytes``; ``time_limit_s`` bounds the packing
    searches in all (each then keeps its best packing). ``hierarchical``: the allgathers on identical
    machines as one between machines (packed) and one inside a machine, by ``within``: ``trees``,
    ``smt`` (fewest steps) or a baseline's name (``ring``). Ctrl-C ends the search in progress, keeps
    its packing and skips the searches after it, so a valid algorithm still comes out. ``params``:
    the timing model the chunk count is chosen in (default calibrated; ``IDEAL``: line rate)."""
    if collective not in TREES_COLLECTIVES:
        raise InfeasibleError(f"tree packing synthesizes {', '.join(TREES_COLLECTIVES)}, not {collective!r}")
    began = time.perf_counter()
    n = topology.num_ranks
    if n < 2:
        raise InfeasibleError(f"{collective} on {topology.name}: tree packing needs at least 2 ranks")
    if within not in WITHIN:
        raise InfeasibleError(f"within: expected one of {', '.join(WITHIN)}, got {within!r}")
    if not hierarchical:  # refused here, not out of memory later; a composed schedule is arrays
        check_sends(topology, collective)
    if hierarchical:
        machines_of(topology)  # refused before any work: one machine, or machines not alike
    run = _Run(began + time_limit_s, log, max_sends, within, params)
    run.say(f"{collective} on {topology.name} ({n} ranks), time limit {time_limit_s:g} s")
    chunks = n if collective == "allreduce" else 1
    # composed, never described: a reducescatter's chunks at 4096 GPUs are 16.8 M contributions
    problem = Problem(topology, make_collective(collective, n, chunks, lazy=hierarchical))
    if hierarchical:  # verified as arrays by the composition; an Algorithm only on demand
        made: Algorithm | Composed | Staged = _composed(problem, float(size_bytes) / n, run)
    else:
        made = _solve(problem, float(size_bytes) / n, run, "").algorithm
        if collective == "allgather":
            run.say(f"verifying {made.num_sends} sends")
            made.verify(topology)  # the other paths are verified by their reductions' invert
    run.say(f"verified: {made.num_sends} sends, {made.collective.chunks_per_rank} chunks per rank")
    made = replace(made, provenance=sized(made.provenance, size_bytes, params))
    return TreesResult(made, tuple(run.packings), time.perf_counter() - began, run.interrupted)



def _solve(problem: Problem, shard_bytes: float, run: _Run, role: str) -> Solution:
    """``problem`` solved by its reduction, or packed when it is an allgather; ``shard_bytes``: the
    bytes of one rank's data in the allgather."""
    name = problem.collective.name
    if name == "allreduce":
        reduced = REDUCESCATTER_ALLGATHER.apply(problem)
        return _invert(reduced, [_solve(sub, shard_bytes, run, role) for sub in reduced.subproblems], run)
    if name == "reducescatter":
        reduced = DUAL.apply(problem)
        sub = reduced.subproblems[0]
        solution = _timed(sub, _solve(sub, shard_bytes, run, role), shard_bytes, run)
        inverted = _invert(reduced, [solution], run)  # its verification routes the pairs by source
        return Solution(_untimed(inverted.algorithm))
    key = (problem.topology, problem.collective, role)
    return _cached(run, key, "solved", lambda: _allgather(problem, shard_bytes, run, role or "flat"))


def _cached(run: _Run, key: tuple, how: str, make: Callable[[], T]) -> T:
    """``make()``, once per ``key`` in a synthesis, with the packings it added (listed again)."""
    if key in run.solved:
        made, packings = run.solved[key]
        run.packings.extend(packings)
        run.say(f"{key[0].name}: the allgather {how} before")
        return made
    before = len(run.packings)
    made = make()
    run.solved[key] = (made, run.packings[before:])
    return made


def _timed(problem: Problem, solution: Solution, shard_bytes: float, run: _Run) -> Solution:
    """``solution`` with when each send ends in the timing engine's schedule: the dual runs it
    backwards in time, so each step's sends go in the order that schedule found, not by chunk."""
    algo, topo = solution.algorithm, problem.topology
    run.say(f"{topo.name}: timing {algo.num_sends} sends, to run them backwards in that order")
    size = shard_bytes * topo.num_ranks
    line_rate = model_params("ideal")  # the packing's rates are line rates: mirror that schedule
    starts = start_times(algo, topo, size, line_rate)
    piece = chunk_bytes(algo.collective, size)
    links = topo.logical().links
    finish: dict[tuple[int, int, int], float] = {}
    sends = (s for st in algo.steps for s in st.sends)
    for start, s in zip(starts, sends, strict=True):
        finish[(s.chunk, s.src, s.dst)] = start + line_rate.delay_us(links[(s.src, s.dst)], piece)
    return Solution(algo, max(finish.values()), finish)


def _untimed(algo: Algorithm) -> Algorithm:
    """``algo`` with its sends in the same order but no start times: the order is what the mirror
    was for; the times are the timing engine's to find (and an allreduce's halves then agree)."""
    steps = tuple(
        Step(st.rounds, tuple(Send(x.chunk, x.src, x.dst, x.op) for x in st.sends)) for st in algo.steps
    )
    return replace(algo, steps=steps)


def _composed(problem: Problem, shard_bytes: float, run: _Run) -> Composed | Staged:
    """``problem`` composed over its machines, held as arrays and verified: an allgather
    (:func:`_hierarchical`), a reducescatter as the dual's allgather run backwards, an allreduce as
    that reducescatter then the allgather (:mod:`synth.reductions.hierarchy_dual`)."""
    name, topology = problem.collective.name, problem.topology
    if name == "allgather":
        return _once(problem, shard_bytes, run)
    if name == "reducescatter":
        sub = DUAL.apply(problem).subproblems[0]
        allgather = _once(sub, shard_bytes, run)
        run.say(f"dual: running the composed allgather backwards on {topology.name}, verifying as arrays")
        return dual_of(allgather, topology)
    first, second = REDUCESCATTER_ALLGATHER.apply(problem).subproblems
    reducescatter = _composed(first, shard_bytes, run)
    allgather = _once(second, shard_bytes, run)
    run.say(f"{REDUCESCATTER_ALLGATHER.name}: the two composed parts, one after the other")
    return allreduce_of(reducescatter, allgather, topology)


def _once(problem: Problem, shard_bytes: float, run: _Run) -> Composed:
    """:func:`_hierarchical` of ``problem``'s allgather, once per topology: an allreduce's two
    halves on a symmetric topology are one composition (its packings listed twice)."""
    return _cached(
        run, (problem.topology, "composed"), "composed", lambda: _hierarchical(problem, shard_bytes, run)
    )


def _hierarchical(problem: Problem, shard_bytes: float, run: _Run) -> Composed:
    """The allgather between machines (one rail) and inside one machine, packed each and composed,
    verified as arrays; the rails' chunks are capped as a flat allgather's (the lift gives
    ``n (n - 1)`` sends per chunk), the inner ones chosen among the divisors of what each rail
    holds, so the lift needs no refining."""
    reduced = HIERARCHY.apply(problem)
    machines: Machines = reduced.data
    between, within = reduced.subproblems
    run.say(f"{reduced.via}")
    # every chunk of the rails' schedule becomes n - 1 sends in the whole, as in a flat allgather
    first = _allgather(between, shard_bytes, run, "between", list(chunk_choices(problem.topology, run.most_sends)))
    held = machines.count * first.algorithm.chunks
    choices = [c for c in range(1, held + 1) if held % c == 0]
    if run.within == "trees":
        second = _allgather(within, shard_bytes * machines.count, run, "within", choices)
    else:
        second = _inside(within, run, max(c for c in choices if c <= MAX_CHUNKS))
    sends = first.algorithm.num_sends + second.algorithm.num_sends
    run.say(f"{reduced.reduction.name}: composing and verifying as arrays ({sends} sends in the parts)")
    composed = HIERARCHY.compose(reduced, [first, second])
    run.say(f"{reduced.reduction.name}: verified {composed.num_sends} sends, {len(composed.rounds)} steps")
    return composed


def _invert(reduced: Reduced, solutions: list[Solution], run: _Run) -> Solution:
    """``reduced.invert`` (which verifies its result), said first: on thousands of ranks it takes seconds."""
    sends = sum(s.algorithm.num_sends for s in solutions)
    run.say(f"{reduced.reduction.name}: composing and verifying ({sends} sends in the parts)")
    return reduced.invert(solutions)


def _inside(problem: Problem, run: _Run, chunks: int) -> Solution:
    """The allgather inside a machine by SMT (fewest steps, one chunk per rank) or a baseline
    (``chunks`` per rank, so it pipelines and the lift needs no refining)."""
    topo = problem.topology
    if run.within == "smt":
        from synth.smt import least_steps

        left = max(1.0, run.deadline - time.perf_counter())
        found = least_steps(topo, problem.collective, time_limit_s=left)
        if found.algorithm is None:
            raise InfeasibleError(f"allgather on {topo.name}: {found.message()}")
        algo = found.algorithm
    else:
        algo = make_baseline(run.within, topo, make_collective("allgather", topo.num_ranks, chunks))
    run.say(f"{topo.name}: {algo.provenance.method}, {algo.chunks} chunks per rank, {algo.num_sends} sends")
    return Solution(algo)


def _allgather(
    problem: Problem, shard_bytes: float, run: _Run, role: str, choices: list[int] | None = None
) -> Solution:
    """The packing of ``problem``'s topology under its symmetry and the schedule built from it,
    with the chunk count chosen for ``shard_bytes`` per rank (or the one this role already used)."""
    topo = problem.topology
    began = time.perf_counter()
    run.say(f"{topo.name}: looking for its symmetries ({topo.num_ranks} ranks)")
    group = find_group(topo)
    run.say(f"{topo.name}: symmetry {group.name} ({len(group.reps)} of {topo.num_ranks} roots packed)")
    classes = pair_classes(topo, group)
    left = 0.0 if run.interrupted else max(0.0, run.deadline - time.perf_counter())
    packing = pack(topo, classes, time_limit_s=left, log=run.say)
    run.interrupted = run.interrupted or packing.interrupted
    run.packings.append(packing)
    state = "optimal" if packing.optimal else f"bound {packing.upper_GBps:.6g}"
    run.say(f"{topo.name}: {packing.rate_GBps:.6g} GB/s per rank ({state}), {len(packing.trees)} trees")
    if role in run.chunks:
        choices = [run.chunks[role]]
    elif choices is None:
        choices = list(chunk_choices(topo, run.most_sends))
    size = shard_bytes * topo.num_ranks
    allocation = choose_chunks(packing, topo, size, choices, run.params)
    run.chunks[role] = allocation.chunks
    n = topo.num_ranks
    run.say(f"{topo.name}: {allocation.chunks} chunks per rank, building {n * (n - 1) * allocation.chunks} sends")
    algo = schedule(packing, topo, allocation, time.perf_counter() - began)
    return Solution(algo)

"""Solving instances (S, R, C) of one collective on one topology, keeping solvers between them.

Non-combining collectives are encoded directly (:mod:`synth.smt.encoding`). With
``options.incremental`` one encoding per chunk count covers a range of steps and rounds, and its
solver answers every instance in that range under assumptions; otherwise each instance gets a fresh
encoding of exactly its size, tried first on the quotient by the problem's symmetries. Reducescatter
and reduce are solved as their dual (allgather, broadcast) on the reversed topology and inverted;
allreduce either by composing a reducescatter and an allgather (when C is a multiple of the ranks)
or by the direct encoding (:mod:`synth.smt.allreduce`). The dual, the composition and the quotient
are the reductions of :mod:`synth.reductions`. Every algorithm is verified before it is returned.
"""

from __future__ import annotations

import time
from dataclasses import replace

from common.limits import Limit
from synth.algorithm import Algorithm, Provenance
from synth.bounds import steps_lower_bound
from synth.collectives import Collective, make_collective
from synth.deadline import Deadline, OutOfTime
from synth.defaults import ALLREDUCE_METHODS, SMT_INSTANCE_TIME_LIMIT_S, SMT_TIME_LIMIT_S
from synth.errors import InfeasibleError
from synth.outcome import SMT_WORDS, Outcome, Question, Status
from synth.reductions import DUAL, REDUCESCATTER_ALLGATHER, Problem, Reduced, Solution, SymmetryQuotient
from synth.smt.allreduce import AllreduceEncoding
from synth.smt.encoding import Encoding
from synth.smt.options import DEFAULT_OPTIONS, SmtOptions
from synth.smt.session import Session, z3_version
from topologies.model import Topology

__all__ = [
    "ALLREDUCE_METHODS",
    "DEFAULT_INSTANCE_TIME_LIMIT_S",
    "DEFAULT_TIME_LIMIT_S",
    "SENDS",
    "Synthesizer",
    "check_allreduce",
    "check_instance",
    "check_ranks",
    "check_size",
    "solve_instance",
]

DEFAULT_TIME_LIMIT_S = SMT_TIME_LIMIT_S
DEFAULT_INSTANCE_TIME_LIMIT_S = SMT_INSTANCE_TIME_LIMIT_S
SENDS = Limit("possible sends (chunks x links x steps)", 1_000_000, "XCCL_MAX_SMT_SENDS")
"""Largest instance encoded, in possible sends: chunks x logical links x steps, plus steps x
rounds for the round counters. DGX-1 alltoall S=8 R=8 C=3 has 49,152; a 4x4 torus alltoall with
S=8, C=2 has 262,144 and takes 0.7 GB and seconds to build."""


ROUND_GROWTH = 4
"""When a walk raises R for the same (S, C), the shared encoding covers this many more rounds."""

COMPOSED_SCOPE = "among reducescatter + allgather compositions"


class Synthesizer:
    """Instances of ``collective_name`` on ``topology`` (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        collective_name: str,
        root: int | None = None,
        options: SmtOptions = DEFAULT_OPTIONS,
        allreduce: str = "auto",
    ) -> None:
        if allreduce not in ALLREDUCE_METHODS:
            raise InfeasibleError(
                f"allreduce method: expected one of {', '.join(ALLREDUCE_METHODS)}, got {allreduce}"
            )
        self.topology = topology
        self.name = make_collective(collective_name, topology.num_ranks, 1, root).name
        self.root = root
        self.options = options
        self.allreduce = allreduce
        self.quotient = SymmetryQuotient(options.automorphism_limit)
        self._families: dict[tuple[int, int, bool], tuple[Encoding, Session]] = {}
        self._has_symmetry: bool | None = None
        self._parts: dict[str, Synthesizer] = {}

    def collective(self, chunks: int) -> Collective:
        return make_collective(self.name, self.topology.num_ranks, chunks, self.root)

    def _part(self, key: str, problem: Problem) -> Synthesizer:
        """The synthesizer of a subproblem, kept: its solvers serve the next instance."""
        if key not in self._parts:
            self._parts[key] = Synthesizer(problem.topology, problem.collective.name, self.root, self.options)
        return self._parts[key]

    def _answer(
        self, status: Status, collective: Collective, steps: int, rounds: int, start: float, **more
    ) -> Outcome:
        question = Question(self.name, steps, rounds, collective.chunks_per_rank)
        return Outcome(status, question, time.monotonic() - start, words=SMT_WORDS, **more)

    # -- the entry point ----------------------------------------------------------------------
    def solve(self, steps: int, rounds: int, chunks: int, time_limit_s: float | None = None) -> Outcome:
        """Answer one instance within ``time_limit_s`` seconds of wall time, building the formula
        included (``unknown`` after it); raises :class:`KeyboardInterrupt` on Ctrl-C."""
        check_instance(steps, rounds, chunks)
        collective = self.collective(chunks)
        check_allreduce(collective, self.allreduce)
        check_size(self.topology, collective, steps, rounds)
        out = self._solve(collective, steps, rounds, Deadline.after(time_limit_s))
        return replace(out, time_limit_s=time_limit_s)

    def _solve(self, collective: Collective, steps: int, rounds: int, deadline: Deadline) -> Outcome:
        start = time.monotonic()
        chunks = collective.chunks_per_rank
        try:
            if self.name == "allreduce":
                if self.allreduce == "direct" or (self.allreduce == "auto" and chunks % collective.num_ranks):
                    return self._direct(collective, steps, rounds, deadline)
                return self._composed(collective, steps, rounds, deadline)
            if collective.combining:
                return self._dual(collective, steps, rounds, deadline)
            return self._non_combining(collective, steps, rounds, deadline)
        except OutOfTime:  # the formula was still being built
            return self._answer(Status.UNKNOWN, collective, steps, rounds, start)

    def _dual(self, collective: Collective, steps: int, rounds: int, deadline: Deadline) -> Outcome:
        """The dual on the reversed topology (:data:`synth.reductions.DUAL`), inverted."""
        reduced = DUAL.apply(Problem(self.topology, collective))
        (sub,) = reduced.subproblems
        out = self._part("dual", sub)._solve(sub.collective, steps, rounds, deadline)
        algo = None if out.algorithm is None else reduced.invert([Solution(out.algorithm)]).algorithm
        return replace(
            out, question=replace(out.question, collective=self.name), algorithm=algo, via=reduced.via
        )

    # -- non-combining ------------------------------------------------------------------------
    def _family(
        self, collective: Collective, steps: int, rounds: int, quotient: Reduced | None, deadline: Deadline
    ) -> tuple[Encoding, Session]:
        """The encoding (of the ``quotient`` when given) and solver for (S, R). The first time an
        (S, C) is asked, an encoding of exactly its size; when the same (S, C) comes back with more
        rounds (a front walk raising R), one encoding for ``ROUND_GROWTH`` more rounds, selected by
        assumption, keeps its solver."""
        # The encoding that searches first gets the saturation constraints (they guide the search);
        # the full one behind a tied attempt mostly proves unsat, where they only cost time.
        tied = quotient is not None
        saturation = tied or not self._symmetric()
        key = (collective.chunks_per_rank, steps, tied)
        old = self._families.get(key) if self.options.incremental else None
        if old is not None:
            enc = old[0]
            if rounds == enc.fixed_rounds or (enc.fixed_rounds is None and rounds <= enc.max_rounds):
                return old
        fixed = None if old is not None else rounds
        top = rounds if old is None else rounds + ROUND_GROWTH
        enc = Encoding(
            self.topology,
            collective,
            steps,
            steps,
            top,
            self.options,
            fixed_rounds=fixed,
            symmetry=None if quotient is None else quotient.data,
            saturation=saturation,
            deadline=deadline,
        )
        family = (enc, Session(enc.formula, self.options.seed, self.options.restarts))
        if self.options.incremental:
            for other in [k for k in self._families if k[0] != key[0]]:
                del self._families[other]  # walks move on to the next C for good: free those solvers
            self._families[key] = family
        return family

    def _symmetric(self) -> bool:
        """Whether to look for a symmetric algorithm first (some automorphism maps the problem onto itself)."""
        if self._has_symmetry is None:
            symmetry = self.quotient.apply(Problem(self.topology, self.collective(1))).data
            self._has_symmetry = self.options.symmetric and not symmetry.trivial
        return self._has_symmetry

    def _non_combining(self, collective: Collective, steps: int, rounds: int, deadline: Deadline) -> Outcome:
        """First the quotient by the symmetries (:class:`synth.reductions.SymmetryQuotient`: one
        variable per orbit of sends); when it has no solution, the full encoding decides."""
        start = time.monotonic()
        problem = Problem(self.topology, collective)
        for quotient in (self.quotient.apply(problem), None) if self._symmetric() else (None,):
            enc, session = self._family(collective, steps, rounds, quotient, deadline)
            check = session.check(enc.assumptions(steps, rounds), deadline)
            if check.status is not Status.INFEASIBLE or quotient is None:
                return self._outcome(collective, steps, rounds, start, check, enc, quotient)
        raise AssertionError("unreachable")

    def _outcome(self, collective, steps, rounds, start, check, enc, quotient: Reduced | None) -> Outcome:
        """The answer of one check; a solution of the quotient (one send per orbit) is completed by
        inverting it. Every algorithm is verified."""
        algo = None
        if check.status.has_solution:
            params = (("symmetric", quotient is not None),)
            prov = Provenance("smt", solver=f"z3 {z3_version()}", params=params)
            algo = Algorithm(collective, self.topology.name, enc.decode(set(check.true_names), steps), prov)
            if quotient is None:
                algo.verify(self.topology)
            else:
                algo = quotient.invert([Solution(algo)]).algorithm
        return self._answer(check.status, collective, steps, rounds, start, algorithm=algo)

    # -- allreduce ----------------------------------------------------------------------------
    def _direct(self, collective: Collective, steps: int, rounds: int, deadline: Deadline) -> Outcome:
        start = time.monotonic()
        enc = AllreduceEncoding(self.topology, collective, steps, rounds, deadline)
        check = Session(enc.formula, self.options.seed, self.options.restarts).check([], deadline)
        out = self._outcome(collective, steps, rounds, start, check, enc, None)
        via = "direct encoding (partial sums travel together)"
        algo = out.algorithm.with_provenance(via=via) if out.algorithm else None
        return replace(out, algorithm=algo, via=via)

    def _composed(self, collective: Collective, steps: int, rounds: int, deadline: Deadline) -> Outcome:
        """Try every split S = S1 + S2, R = R1 + R2 of a reducescatter followed by an allgather
        (:data:`synth.reductions.REDUCESCATTER_ALLGATHER`)."""
        start = time.monotonic()
        reduced = REDUCESCATTER_ALLGATHER.apply(Problem(self.topology, collective))
        rs_problem, ag_problem = reduced.subproblems
        rs, ag = self._part("reducescatter", rs_problem), self._part("allgather", ag_problem)
        rs_lb = steps_lower_bound(self.topology, rs_problem.collective)
        ag_lb = steps_lower_bound(self.topology, ag_problem.collective)
        unknown = False
        for s1 in range(rs_lb, steps - ag_lb + 1):
            s2 = steps - s1
            for r1 in range(s1, rounds - s2 + 1):  # fewest rounds to the reducescatter first
                first = rs._solve(rs_problem.collective, s1, r1, deadline)
                if first.status is Status.UNKNOWN:
                    unknown = True
                    break
                if first.algorithm is None:
                    continue
                second = ag._solve(ag_problem.collective, s2, rounds - r1, deadline)
                if second.algorithm is not None:
                    both = [Solution(first.algorithm), Solution(second.algorithm)]
                    algo = reduced.invert(both).algorithm
                    return self._answer(
                        Status.FEASIBLE, collective, steps, rounds, start, algorithm=algo, via=reduced.via
                    )
                unknown = unknown or second.status is Status.UNKNOWN
                break  # more reducescatter rounds leave the allgather fewer: no better
        status = Status.UNKNOWN if unknown else Status.INFEASIBLE
        return self._answer(status, collective, steps, rounds, start, scope=COMPOSED_SCOPE, via=reduced.via)


def check_ranks(topology: Topology) -> None:
    """Searches over steps start at the steps bound, which is 0 on one rank: refuse that up front."""
    if topology.num_ranks < 2:
        raise InfeasibleError(f"{topology.name} has one rank: no data moves, there is nothing to search for")


def check_instance(steps: int, rounds: int, chunks: int) -> None:
    """Raise :class:`InfeasibleError` unless S >= 1, R >= S and C >= 1."""
    if steps < 1 or rounds < steps or chunks < 1:
        raise InfeasibleError(
            f"instance S={steps} R={rounds} C={chunks}: expected steps >= 1, rounds >= steps and chunks >= 1"
        )


def check_size(topology: Topology, collective: Collective, steps: int, rounds: int) -> None:
    """Raise :class:`common.limits.LimitError` when the instance is too large to encode
    (:data:`SENDS`); the collective itself was already built within its own limits."""
    links = max(len(topology.logical().links), topology.num_ranks)
    size = len(collective.chunks) * links * steps + steps * (rounds - steps + 1)
    SENDS.check(
        size,
        f"instance {collective.name} S={steps} R={rounds} C={collective.chunks_per_rank} on {topology.name}",
    )


def check_allreduce(collective: Collective, method: str) -> None:
    """Raise :class:`InfeasibleError` when an allreduce cannot be encoded by ``method``: composing
    splits each rank's chunks evenly among the ranks, so it needs C a multiple of the ranks."""
    n, chunks = collective.num_ranks, collective.chunks_per_rank
    if collective.name == "allreduce" and method == "compose" and chunks % n:
        raise InfeasibleError(
            f"allreduce C={chunks}: composing reducescatter + allgather needs chunks per rank a "
            f"multiple of the {n} ranks; use the direct encoding (or auto)"
        )


def solve_instance(
    topology: Topology,
    collective: Collective,
    steps: int,
    rounds: int | None = None,
    time_limit_s: float | None = None,
    options: SmtOptions = DEFAULT_OPTIONS,
    allreduce: str = "auto",
) -> Outcome:
    """Solve one instance: ``rounds`` defaults to ``steps`` (one round per step), the chunks per rank
    are the collective's. A lone instance gets an encoding of exactly its size (a family only pays
    off across instances)."""
    single = replace(options, incremental=False) if collective.name != "allreduce" else options
    synth = Synthesizer(topology, collective.name, collective.root, single, allreduce)
    return synth.solve(steps, steps if rounds is None else rounds, collective.chunks_per_rank, time_limit_s)

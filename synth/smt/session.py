"""One z3 solver over one formula: checks under assumptions, with a deadline and Ctrl-C.

The solver is z3's SAT core for finite domains (``SolverFor("QF_FD")``), which keeps what it learned
between checks; assumption literals select an instance of a family (see
:class:`synth.smt.encoding.Encoding`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import z3

from synth.deadline import NO_DEADLINE, Deadline
from synth.outcome import Status
from synth.smt.formula import Formula

__all__ = ["Check", "Session", "interrupt", "read_model", "z3_version"]

NO_LIMIT_MS = 4_294_967_295
"""z3's "no limit" for timeouts and conflict budgets (the largest unsigned int)."""
FIRST_BUDGET = 10_000
"""Conflicts before the first restart with a new seed."""
MAX_RESTARTS = 8
"""After this many restarts (2.5 million conflicts in all) the search runs to the end."""
SYNC_BATCH = 20_000
"""Assertions per z3 read (about 0.1 s each): how late a deadline can be noticed while reading."""


def z3_version() -> str:
    return z3.get_version_string()


def interrupt() -> None:
    """Stop the check z3 is running now (it answers unknown); safe to call from another thread,
    which is how a SIGTERM reaches a solver that holds the main thread (``xccl.cli.solving``)."""
    z3.main_ctx().interrupt()


def read_model(text: str) -> set[str]:
    """Names of the true Boolean constants in a z3 model printed with ``model.sexpr()``."""
    return set(re.findall(r"\(define-fun (\S+) \(\) Bool\s+true\)", text))


@dataclass(frozen=True)
class Check:
    status: Status
    """z3's sat, unsat and unknown (time limit) as ``FEASIBLE``, ``INFEASIBLE`` and ``UNKNOWN``."""
    true_names: frozenset[str] = frozenset()
    seconds: float = 0.0


class Session:
    def __init__(self, formula: Formula, seed: int = 0, restarts: bool = True) -> None:
        self.formula = formula
        self.solver = z3.SolverFor("QF_FD")
        self.seed = seed
        self.restarts = restarts
        self._sent = 0
        self._declared = 0
        self.checks = 0

    def _sync(self, deadline: Deadline) -> None:
        """Hand z3 the assertions it does not hold yet, in batches: z3 reads a batch without
        looking at any time limit, so the deadline is checked between batches."""
        total = len(self.formula.assertions)
        while self._sent < total:
            deadline.check()
            stop = min(total, self._sent + SYNC_BATCH)
            self.solver.from_string(self.formula.smt2(start=self._sent, declared=self._declared, stop=stop))
            self._sent = stop
            self._declared = self.formula.num_vars

    @staticmethod
    def _literal(lit: str) -> z3.BoolRef:
        if lit.startswith("(not "):
            return z3.Not(z3.Bool(lit[5:-1]))
        return z3.Bool(lit)

    def check(self, assumptions: list[str], deadline: Deadline = NO_DEADLINE) -> Check:
        """Check under ``assumptions``; ``unknown`` when the deadline comes first.

        Restarts: the search gets ``FIRST_BUDGET`` conflicts, then twice as many with the next
        random seed, and so on (what was learned is kept). SAT search times are heavy-tailed; a
        fresh seed at growing budgets cuts the tail (DGX-1 allgather S=3 R=6 C=5 over ten seeds:
        at most 1.13 s without, 0.16 s with) and costs nothing when the first budget suffices.
        """
        start = time.monotonic()
        self._sync(deadline)  # OutOfTime past the deadline: the caller answers "unknown"
        literals = [self._literal(a) for a in assumptions]
        budget = FIRST_BUDGET
        for attempt in range(MAX_RESTARTS + 1):
            left = deadline.left()
            if left is not None:
                left_ms = int(left * 1000)
                if left_ms <= 0:
                    return Check(Status.UNKNOWN, seconds=time.monotonic() - start)
                self.solver.set("timeout", left_ms)
            else:
                self.solver.set("timeout", NO_LIMIT_MS)
            last = attempt == MAX_RESTARTS or not self.restarts
            self.solver.set("max_conflicts", NO_LIMIT_MS if last else budget)
            self.solver.set("random_seed", self.seed + attempt)
            self.checks += 1
            result = self.solver.check(*literals)
            if result == z3.sat:
                names = frozenset(read_model(self.solver.model().sexpr()))
                return Check(Status.FEASIBLE, names, time.monotonic() - start)
            if result == z3.unsat:
                return Check(Status.INFEASIBLE, seconds=time.monotonic() - start)
            reason = self.solver.reason_unknown()
            if "interrupted from keyboard" in reason:
                raise KeyboardInterrupt  # z3 caught the user's Ctrl-C; pass it on
            if "max.conflicts" not in reason:
                break  # the time limit, or an interrupt from another thread (see interrupt_all)
            budget *= 2
        return Check(Status.UNKNOWN, seconds=time.monotonic() - start)

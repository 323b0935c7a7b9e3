"""One z3 solver over one formula: checks under assumptions, with a time limit and Ctrl-C.

The solver is z3's SAT core for finite domains (``SolverFor("QF_FD")``), which keeps what it learned
between checks; assumption literals select an instance of a family (see
:class:`synth.smt.encoding.Encoding`). The symmetric restriction is an assumption too: when a
symmetric check is unsatisfiable and the unsat core contains ``sym``, the instance is checked again
without it, so an "unsat" is always a proof about the instance itself.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import z3

from synth.smt.formula import Formula

__all__ = ["Check", "Session", "read_model", "z3_version"]

NO_LIMIT_MS = 4_294_967_295
"""z3's "no timeout" (the largest unsigned int)."""


def z3_version() -> str:
    return z3.get_version_string()


def read_model(text: str) -> set[str]:
    """Names of the true Boolean constants in a z3 model printed with ``model.sexpr()``."""
    return set(re.findall(r"\(define-fun (\S+) \(\) Bool\s+true\)", text))


@dataclass(frozen=True)
class Check:
    status: str
    """``sat``, ``unsat`` or ``unknown`` (time limit)."""
    true_names: frozenset[str] = frozenset()
    symmetric: bool = False
    """Whether the model was found under the symmetric restriction."""
    seconds: float = 0.0


class Session:
    def __init__(self, formula: Formula, seed: int = 0) -> None:
        self.formula = formula
        self.solver = z3.SolverFor("QF_FD")
        self.solver.set("random_seed", seed)
        self._sent = 0
        self._declared = 0
        self.checks = 0

    def _sync(self) -> None:
        if self._sent < len(self.formula.assertions):
            self.solver.from_string(self.formula.smt2(start=self._sent, declared=self._declared))
            self._sent = len(self.formula.assertions)
            self._declared = self.formula.num_vars

    @staticmethod
    def _literal(lit: str) -> z3.BoolRef:
        if lit.startswith("(not "):
            return z3.Not(z3.Bool(lit[5:-1]))
        return z3.Bool(lit)

    def _check(self, assumptions: list[str], deadline: float | None) -> tuple[str, list[str]]:
        if deadline is not None:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                return "unknown", []
            self.solver.set("timeout", left_ms)
        else:
            self.solver.set("timeout", NO_LIMIT_MS)
        self.checks += 1
        result = self.solver.check(*[self._literal(a) for a in assumptions])
        if result == z3.sat:
            return "sat", []
        if result == z3.unsat:
            return "unsat", [str(e) for e in self.solver.unsat_core()]
        if "interrupted from keyboard" in self.solver.reason_unknown():
            raise KeyboardInterrupt  # z3 caught the user's Ctrl-C; pass it on
        return "unknown", []

    def check(
        self, assumptions: list[str], sym: str | None = None, time_limit_s: float | None = None
    ) -> Check:
        """Check under ``assumptions``; with ``sym`` (its positive literal), first with it, then,
        if it caused unsatisfiability, with its negation."""
        start = time.monotonic()
        deadline = None if time_limit_s is None else start + time_limit_s
        self._sync()
        symmetric = sym is not None
        status, core = self._check(assumptions + ([sym] if symmetric else []), deadline)
        if status == "unsat" and symmetric and sym in core:
            symmetric = False
            status, core = self._check([*assumptions, f"(not {sym})"], deadline)
        if status != "sat":
            return Check(status, seconds=time.monotonic() - start)
        names = frozenset(read_model(self.solver.model().sexpr()))
        return Check("sat", names, symmetric, time.monotonic() - start)

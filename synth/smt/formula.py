"""A Boolean formula with cardinality and pseudo-Boolean constraints, written as SMT-LIB 2 text.

The SMT encodings only need Boolean variables, clauses and (weighted) counting constraints, which
z3 solves in its SAT core (logic ``QF_FD``) far faster than integer arithmetic. Building the
formula as text is also much faster than creating one z3 object per term through the Python API,
and the same text is what ``xccl synth smt instance --dump-smt`` shows a user.

A literal is a variable name or ``(not name)``; constants are ``true`` and ``false``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["FALSE", "TRUE", "Formula", "model_script", "neg"]

TRUE = "true"
FALSE = "false"


_CONSTANT_NEGATION = {TRUE: FALSE, FALSE: TRUE}


def neg(lit: str) -> str:
    """The negation of a literal."""
    if lit[0] == "(":
        return lit[5:-1]
    return _CONSTANT_NEGATION.get(lit) or f"(not {lit})"


class Formula:
    """Declarations and assertions, appended in order (so the text is deterministic).

    A ``canonical`` formula sorts the literals of every constraint and keeps each constraint once:
    an encoding that names several variables alike (a quotient by symmetries) produces the same
    constraint many times.
    """

    def __init__(self, canonical: bool = False) -> None:
        self.names: list[str] = []
        self.assertions: list[str] = []
        self.canonical = canonical
        self._seen: set[str] = set()

    def _emit(self, text: str) -> None:
        if self.canonical:
            if text in self._seen:
                return
            self._seen.add(text)
        self.assertions.append(text)

    # -- variables -------------------------------------------------------------------------
    def var(self, name: str) -> str:
        self.names.append(name)
        return name

    @property
    def num_vars(self) -> int:
        return len(self.names)

    # -- constraints -----------------------------------------------------------------------
    def _order(self, lits: list[str]) -> list[str]:
        return sorted(lits) if self.canonical else lits

    def add(self, term: str) -> None:
        if term != TRUE:
            self._emit(term)

    def clause(self, lits: Iterable[str]) -> None:
        """At least one of ``lits`` holds (constants are folded)."""
        out = [lit for lit in lits if lit != FALSE]
        if TRUE in out:
            return
        if not out:
            self._emit(FALSE)
        elif len(out) == 1:
            self._emit(out[0])
        else:
            self._emit(f"(or {' '.join(self._order(out))})")

    def implies(self, a: str, b: str) -> None:
        self.clause((neg(a), b))

    def define_or(self, name: str, terms: Sequence[str]) -> None:
        """``name`` holds exactly when one of ``terms`` holds."""
        for t in terms:
            self.implies(t, name)
        self.clause([neg(name), *terms])

    def define_and(self, name: str, terms: Sequence[str]) -> None:
        """``name`` holds exactly when all of ``terms`` hold."""
        for t in terms:
            self.implies(name, t)
        self.clause([name, *(neg(t) for t in terms)])

    def at_most(self, lits: Sequence[str], k: int) -> None:
        k -= sum(1 for x in lits if x == TRUE)
        lits = [x for x in lits if x not in (TRUE, FALSE)]
        if k < 0:
            self._emit(FALSE)
            return
        if len(lits) <= k:
            return
        if k == 0:
            for x in lits:
                self.clause((neg(x),))
            return
        self._emit(f"((_ at-most {k}) {' '.join(self._order(lits))})")

    def at_least(self, lits: Sequence[str], k: int) -> None:
        k -= sum(1 for x in lits if x == TRUE)
        lits = [x for x in lits if x not in (TRUE, FALSE)]
        if k <= 0:
            return
        if k == 1:
            self.clause(lits)
            return
        if len(lits) < k:
            self._emit(FALSE)
            return
        self._emit(f"((_ at-least {k}) {' '.join(self._order(lits))})")

    def exactly(self, lits: Sequence[str], k: int) -> None:
        self.at_most(lits, k)
        self.at_least(lits, k)

    @staticmethod
    def _fold(terms: Sequence[tuple[int, str]], k: int) -> tuple[list[tuple[int, str]], int]:
        """Drop false literals and zero coefficients; move true literals into the bound."""
        out = []
        for c, x in terms:
            if x == TRUE:
                k -= c
            elif c and x != FALSE:
                out.append((c, x))
        return out, k

    def _pb(self, kind: str, terms: list[tuple[int, str]], k: int) -> None:
        if self.canonical:
            terms = sorted(terms, key=lambda t: (t[1], t[0]))
        coefs = " ".join(str(c) for c, _ in terms)
        self._emit(f"((_ {kind} {k} {coefs}) {' '.join(x for _, x in terms)})")

    def pb_le(self, terms: Sequence[tuple[int, str]], k: int) -> None:
        """``sum(coef * lit) <= k`` with positive coefficients."""
        terms, k = self._fold(terms, k)
        if sum(c for c, _ in terms) <= k:
            return
        if k < 0:
            self._emit(FALSE)
            return
        if all(c == 1 for c, _ in terms):
            self.at_most([x for _, x in terms], k)
            return
        self._pb("pble", terms, k)

    def pb_ge(self, terms: Sequence[tuple[int, str]], k: int) -> None:
        """``sum(coef * lit) >= k`` with positive coefficients."""
        terms, k = self._fold(terms, k)
        if k <= 0:
            return
        if sum(c for c, _ in terms) < k:
            self._emit(FALSE)
            return
        if all(c == 1 for c, _ in terms):
            self.at_least([x for _, x in terms], k)
            return
        self._pb("pbge", terms, k)

    # -- text ------------------------------------------------------------------------------
    def smt2(
        self, start: int = 0, declared: int = 0, header: Sequence[str] = (), stop: int | None = None
    ) -> str:
        """SMT-LIB 2 text: the declarations from index ``declared`` and the assertions from ``start``
        (up to ``stop``).

        Incremental solving sends later parts of the same formula to a solver that already holds
        the earlier ones (and their declarations).
        """
        lines = [f"; {h}" for h in header]
        lines += [f"(declare-const {name} Bool)" for name in self.names[declared:]]
        lines += [f"(assert {a})" for a in self.assertions[start:stop]]
        return "\n".join(lines) + "\n"


def model_script(formula: Formula, title: str) -> str:
    """A whole instance as an SMT-LIB 2 script for any solver: a comment naming it and the variable
    scheme, the declarations, the assertions and ``(check-sat)``."""
    header = [
        f"xccl-synth SMT model: {title}",
        "x_c_u_v_s / y_a_u_v_s: chunk (address) c sent u -> v in step s; u_s_k: step s has more than k rounds",
        "a_s / rnd_R (in a family): step s exists / the rounds add up to R",
    ]
    return formula.smt2(header=header) + "(check-sat)\n"

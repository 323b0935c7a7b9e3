"""Switches for the speed ideas of the SMT synthesizer, each on by default and each measurable off.

``benchmarks/smt.py`` turns them off one at a time (the ablation in ``benchmarks/RESULTS.md``).
Only ``symmetric`` restricts the search; it is tried first and undone when it is what made an
instance unsatisfiable (see :mod:`synth.smt.session`), so every answer stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["DEFAULT_OPTIONS", "IDEAS", "SmtOptions"]


@dataclass(frozen=True)
class SmtOptions:
    prune: bool = True
    """Create no send that cannot lie on a useful path: a rank cannot forward a chunk before it is
    ``hops`` away from a source, a relay must forward what it receives in time to reach a rank
    that needs it, and a rank that needs a chunk gets it exactly once."""
    cuts: bool = True
    """Implied cut constraints: when the links into a set of ranks have (almost) no spare capacity
    over all R rounds, every step must (almost) fill them, and at zero slack no chunk may cross
    that cut needlessly."""
    chunk_order: bool = True
    """Interchangeable chunks (same sources and destinations) are ordered by when they reach each
    rank (lexicographic), which removes C! equivalent solutions per class. Sound."""
    symmetric: bool = True
    """First look for a solution that the topology's automorphisms map onto itself (variables of
    chunk r*C+i tied to those of sigma(r)*C+i); if that is unsatisfiable because of the ties, solve
    again without them."""
    restarts: bool = True
    """Restart the SAT search with a fresh random seed at doubling conflict budgets (10,000,
    20,000, ...), keeping what was learned: SAT search times are heavy-tailed across seeds."""
    incremental: bool = True
    """One solver per chunk count across a front walk (and across the steps of least-steps): steps
    and rounds are switched with assumption literals, learned clauses are kept."""
    automorphism_limit: int = 64
    """At most this many automorphisms are used (switch topologies have factorially many)."""
    seed: int = 0
    """z3's random seed. Runs are deterministic for a seed; SAT search times vary between seeds
    (heavy tails), which is why the benchmark reports medians over seeds."""

    def without(self, *names: str) -> SmtOptions:
        """These options with the named ideas switched off."""
        for name in names:
            if name not in IDEAS:
                raise ValueError(f"unknown idea {name!r}: expected one of {', '.join(IDEAS)}")
        return replace(self, **{name: False for name in names})

    def describe(self) -> str:
        off = [f.name for f in fields(self) if f.name in IDEAS and not getattr(self, f.name)]
        return "all ideas" if not off else "without " + ", ".join(off)


IDEAS = ("prune", "cuts", "chunk_order", "symmetric", "restarts", "incremental")
DEFAULT_OPTIONS = SmtOptions()

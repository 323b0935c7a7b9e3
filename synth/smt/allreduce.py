"""The direct allreduce encoding: partial sums travel together (SCCL's constraint 5).

Allreduce has no non-combining dual, so it is encoded on its own. Every rank starts with its
contribution to each of the C addresses; a send moves the sender's whole partial sum of an
address. Variables, per address ``a`` and step ``s``:

- ``y_a_u_v_s``: the partial sum of ``a`` goes from ``u`` to ``v``;
- ``p_a_u_v_s``: that send is a copy (the receiver's sum is contained in the sender's, which
  replaces it), otherwise it is a reduction (the two sums have no contribution in common);
- ``h_k_r_a_s``: after step ``s`` rank ``r``'s sum of ``a`` contains rank ``k``'s contribution.

A receiver adds every sum sent to it in a step; two reductions into one rank in one step must be
disjoint too, and a copy is the only send into its receiver in that step. These are exactly the
verifier's rules, so no contribution is ever counted twice. At the end every rank holds every
contribution. Rounds and capacities are those of :mod:`synth.smt.rounds`.
"""

from __future__ import annotations

from itertools import combinations

from synth.algorithm import Send, Step
from synth.collectives import Collective
from synth.deadline import NO_DEADLINE, Deadline
from synth.errors import InfeasibleError
from synth.smt.formula import FALSE, TRUE, Formula, model_script, neg
from synth.smt.rounds import capacity_constraints, step_units, total_rounds
from topologies.logical import CapacityConstraint
from topologies.model import Topology

__all__ = ["AllreduceEncoding"]


class AllreduceEncoding:
    """One allreduce instance (S steps, R rounds) as a formula; no assumption literals."""

    def __init__(
        self,
        topology: Topology,
        collective: Collective,
        steps: int,
        rounds: int,
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        """``deadline`` is checked while the formula is built (:class:`synth.deadline.OutOfTime`)."""
        if collective.name != "allreduce":
            raise InfeasibleError(f"the direct encoding is for allreduce, not {collective.name}")
        if not 1 <= steps <= rounds:
            raise InfeasibleError(f"expected 1 <= steps <= rounds, got S={steps} R={rounds}")
        self.topology, self.collective = topology, collective
        self.num_steps, self.rounds = steps, rounds
        self.formula = f = Formula()
        self.y: dict[tuple[int, int, int, int], str] = {}
        self.copy: dict[tuple[int, int, int, int], str] = {}
        self._by_link: dict[tuple[int, int, int], list[str]] = {}
        self._h: dict[tuple[int, int, int, int], str] = {}
        self._sends(deadline)
        self._sums(deadline)
        n, c = collective.num_ranks, collective.chunks_per_rank
        for a in range(c):
            for r in range(n):
                for k in range(n):
                    f.clause([self._held(k, r, a, steps - 1)])  # every rank ends with every contribution
        self.units = step_units(f, [TRUE] * steps, rounds - steps + 1)
        capacity_constraints(f, topology.chunk_capacity(), self._load, self.units)
        total_rounds(f, self.units, rounds)

    def _sends(self, deadline: Deadline) -> None:
        """``y`` and ``p`` for every address, logical link and step (``p`` implies ``y``)."""
        f = self.formula
        links = sorted(self.topology.logical().links)
        for a in range(self.collective.chunks_per_rank):
            deadline.check()
            for u, v in links:
                for s in range(self.num_steps):
                    name = f.var(f"y_{a}_{u}_{v}_{s}")
                    self.y[(a, u, v, s)] = name
                    self.copy[(a, u, v, s)] = f.var(f"p_{a}_{u}_{v}_{s}")
                    self._by_link.setdefault((u, v, s), []).append(name)
                    f.implies(self.copy[(a, u, v, s)], name)

    def _held(self, k: int, r: int, a: int, s: int) -> str:
        """After step ``s`` (-1: at the start), rank ``r``'s sum of ``a`` contains ``k``'s contribution."""
        if s < 0:
            return TRUE if k == r else FALSE
        return self._h.get((k, r, a, s), FALSE)

    def _sums(self, deadline: Deadline) -> None:
        """``h``: what each rank's sum contains after each step (what it had, or what a send into
        it brought), and the rules every step's sends into it obey."""
        f, n = self.formula, self.collective.num_ranks
        logical = self.topology.logical()
        hops = logical.hops
        for s in range(self.num_steps):
            for a in range(self.collective.chunks_per_rank):
                deadline.check()
                for v in range(n):
                    senders = list(logical.predecessors(v))
                    for k in range(n):
                        if hops[k, v] < 0 or hops[k, v] > s + 1:
                            continue  # k's contribution cannot have reached v yet
                        terms = [self._held(k, v, a, s - 1)]
                        for u in senders:
                            before = self._held(k, u, a, s - 1)
                            if before == FALSE:
                                continue
                            z = f.var(f"z_{k}_{u}_{v}_{a}_{s}")
                            f.define_and(z, [self.y[(a, u, v, s)], before])
                            terms.append(z)
                        h = f.var(f"h_{k}_{v}_{a}_{s}")
                        f.define_or(h, [t for t in terms if t != FALSE])
                        self._h[(k, v, a, s)] = h
                    self._validity(a, v, s, senders, self._held)

    def _validity(self, a: int, v: int, s: int, senders: list[int], held) -> None:
        """Reductions into ``v`` are disjoint from ``v``'s sum and from each other; a copy contains
        ``v``'s sum and is the only send into ``v`` in the step."""
        f, n = self.formula, self.collective.num_ranks
        for u in senders:
            y, p = self.y[(a, u, v, s)], self.copy[(a, u, v, s)]
            for k in range(n):
                mine, theirs = held(k, v, a, s - 1), held(k, u, a, s - 1)
                f.clause([neg(y), p, neg(mine), neg(theirs)])
                f.clause([neg(p), neg(mine), theirs])
            for w in senders:
                if w != u:
                    f.clause([neg(p), neg(self.y[(a, w, v, s)])])
        for u, w in combinations(senders, 2):
            for k in range(n):
                f.clause(
                    [
                        neg(self.y[(a, u, v, s)]),
                        neg(self.y[(a, w, v, s)]),
                        neg(held(k, u, a, s - 1)),
                        neg(held(k, w, a, s - 1)),
                    ]
                )

    def _load(self, con: CapacityConstraint, step: int) -> list[tuple[int, str]]:
        return [(1, y) for u, v in sorted(con.pairs) for y in self._by_link.get((u, v, step), ())]

    def assumptions(self, steps: int, rounds: int) -> list[str]:
        if (steps, rounds) != (self.num_steps, self.rounds):
            raise InfeasibleError(f"this encoding is for S={self.num_steps} R={self.rounds}")
        return []

    def decode(self, true_names: set[str], steps: int) -> tuple[Step, ...]:
        out = []
        for s in range(steps):
            rounds = sum(1 for unit in self.units[s] if unit == TRUE or unit in true_names)
            sends = sorted(
                Send(a, u, v, "copy" if self.copy[(a, u, v, t)] in true_names else "reduce")
                for (a, u, v, t), name in self.y.items()
                if t == s and name in true_names
            )
            out.append(Step(rounds, tuple(sends)))
        return tuple(out)

    def smt2(self) -> str:
        """The instance as an SMT-LIB 2 script (declarations, assertions, ``(check-sat)``)."""
        return model_script(
            self.formula, f"{self.collective!r} on {self.topology.name}, steps {self.num_steps}"
        )

    def stats(self) -> dict[str, int]:
        return {
            "variables": self.formula.num_vars,
            "constraints": len(self.formula.assertions),
            "sends": len(self.y),
        }

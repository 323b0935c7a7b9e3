"""The SMT encoding of a non-combining collective (SCCL's path encoding, in Booleans).

Variables, for up to ``S`` steps:

- ``x_c_u_v_s``: chunk ``c`` is sent over the logical link ``u -> v`` in step ``s``;
- ``h_c_r_s``: rank ``r`` holds chunk ``c`` after step ``s`` (defined from the sends);
- ``u_s_k``: step ``s`` lasts more than ``k`` rounds (unary, ``u_s_0`` = the step exists);
- ``a_s``, ``rnd_R``: assumption literals that switch on step ``s`` and a total of ``R`` rounds.

Constraints (SCCL's, section 1.3 of the reference): a rank that needs a chunk gets it exactly once,
any other rank at most once; a send reads what its source held after the previous step; per step,
each capacity constraint carries at most ``capacity * rounds`` chunks; steps have at least one
round and the rounds add up to ``R``. Everything is Boolean with counting constraints, which z3
solves in its SAT core, where SCCL's integer times went through arithmetic.

An :class:`Encoding` is either one instance ``(S, R)`` (what :func:`build_model` returns, for a
dump) or a *family*: all ``S`` and ``R`` up to some maxima in one solver, selected per check with
assumptions, so that what the solver learns on one instance of a front serves the next.

A *tied* encoding is the quotient by the problem's symmetries (given as ``symmetry``, from
:class:`synth.reductions.SymmetryQuotient`): every send (and holding) variable is named after the
least member of its orbit under the automorphisms, so a symmetric algorithm is described once per
orbit and the formula shrinks by about the size of the group (each constraint and its images become
one). Its solutions are exactly the symmetric algorithms, decoded one send per orbit (the
reduction's ``invert`` completes the orbits); an unsatisfiable quotient proves nothing about the
full problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count, pairwise

from synth.algorithm import Send, Step
from synth.collectives import Collective
from synth.deadline import NO_DEADLINE, Deadline
from synth.errors import InfeasibleError
from synth.reductions.symmetry import ProblemSymmetry, orbit_representatives, problem_symmetry
from synth.smt.cuts import Cut, find_cuts
from synth.smt.formula import FALSE, TRUE, Formula, model_script, neg
from synth.smt.options import DEFAULT_OPTIONS, SmtOptions
from synth.smt.rounds import capacity_constraints, guarded_ge, guarded_le, spare, step_units, total_rounds
from topologies.logical import CapacityConstraint
from topologies.model import Topology

__all__ = ["Encoding"]

Key = tuple[int, int, int, int]
CHECK_EVERY = 4096
"""Flat loops over sends look at the deadline this often (a check costs about 50 ns)."""


@dataclass(frozen=True)
class _Chunk:
    pre: frozenset[int]
    post: frozenset[int]
    dist_in: tuple[int, ...]
    """Fewest hops from a source to each rank (a large number where unreachable)."""
    dist_out: tuple[int, ...]
    """0 for a rank that needs the chunk, else fewest hops to a rank that needs it."""


class Encoding:
    """The formula of one collective on one topology for ``min_steps..max_steps`` steps and at most
    ``max_rounds`` rounds. With ``min_steps == max_steps`` and one ``rounds`` value it is a single
    instance with no assumption literals for steps or rounds."""

    def __init__(
        self,
        topology: Topology,
        collective: Collective,
        min_steps: int,
        max_steps: int,
        max_rounds: int,
        options: SmtOptions = DEFAULT_OPTIONS,
        fixed_rounds: int | None = None,
        symmetry: ProblemSymmetry | None = None,
        saturation: bool | None = None,
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        """With ``symmetry`` the encoding is tied (the quotient; module docstring)."""
        if collective.combining:
            raise InfeasibleError(f"{collective.name} combines; solve its dual or use the allreduce encoding")
        if topology.num_ranks != collective.num_ranks:
            raise InfeasibleError(
                f"{collective.name} has {collective.num_ranks} ranks, {topology.name} {topology.num_ranks}"
            )
        if not 1 <= min_steps <= max_steps <= max_rounds:
            raise InfeasibleError(
                f"expected 1 <= steps <= rounds, got steps {min_steps}..{max_steps} and rounds {max_rounds}"
            )
        self.topology = topology
        self.collective = collective
        self.options = options
        self.min_steps = min_steps
        self.num_steps = max_steps
        self.max_rounds = max_rounds
        self.fixed_rounds = fixed_rounds
        self.deadline = deadline
        """Checked in the long loops of construction (:class:`synth.deadline.OutOfTime`)."""
        self.units_per_step = max_rounds - min_steps + 1
        self.capacity = topology.chunk_capacity()
        hops = topology.logical().hops
        self.links = sorted(topology.logical().links)
        self.x: dict[Key, str] = {}
        self._representatives: set[Key] = set()
        """Sends that have a variable of their own (every send, unless tied)."""
        self.hold: dict[tuple[int, int, int], str] = {}
        self._by_link: dict[tuple[int, int, int], list[tuple[int, str]]] = {}
        self._guards: dict[int, str] = {}
        self._chunks = [self._chunk_info(c.pre, c.post, hops) for c in collective.chunks]
        tied = symmetry is not None
        self.symmetry = symmetry or problem_symmetry(topology, collective, options.automorphism_limit)
        self.tied = tied and not self.symmetry.trivial
        self.saturation = options.cuts if saturation is None else saturation and options.cuts
        self.formula = f = Formula(canonical=self.tied)
        self.act = [TRUE if s < min_steps else f.var(f"a_{s}") for s in range(max_steps)]
        for s in range(min_steps + 1, max_steps):
            f.implies(self.act[s], self.act[s - 1])
        self._cuts = find_cuts(self.capacity, collective) if options.cuts else []
        self._sends()
        self._holds()
        self._rounds()
        if options.chunk_order:
            self._chunk_order()

    # -- construction ------------------------------------------------------------------------
    def _chunk_info(self, pre: frozenset[int], post: frozenset[int], hops) -> _Chunk:
        n = self.collective.num_ranks
        far = 1 << 20
        dist_in = []
        for r in range(n):
            d = [int(hops[p, r]) for p in pre if hops[p, r] >= 0]
            dist_in.append(min(d) if d else far)
        dist_out = []
        for r in range(n):
            if r in post and r not in pre:
                dist_out.append(0)
                continue
            d = [int(hops[r, w]) for w in post - pre if w != r and hops[r, w] >= 0]
            dist_out.append(min(d) if d else far)
        return _Chunk(pre, post, tuple(dist_in), tuple(dist_out))

    def _sends(self) -> None:
        f, prune, last = self.formula, self.options.prune, self.num_steps - 1
        keys = []
        for c, info in enumerate(self._chunks):
            self.deadline.check()
            for u, v in self.links:
                if v in info.pre:
                    continue
                for s in range(self.num_steps):
                    if s < info.dist_in[u]:
                        continue  # u cannot hold c before step dist_in[u]
                    if prune and s + info.dist_out[v] > last:
                        continue  # v could not pass it on to a rank that needs it in time
                    keys.append((c, u, v, s))
        rep = self._orbits(keys, lambda key, perm, image: (image[key[0]], perm[key[1]], perm[key[2]], key[3]))
        for key in keys:
            if key not in rep:
                continue  # tied to a send that cannot happen
            c, u, v, s = key
            first = rep[key] == key
            name = f.var("x_{}_{}_{}_{}".format(*rep[key])) if first else None
            self.x[key] = name or "x_{}_{}_{}_{}".format(*rep[key])
            if first:
                self._representatives.add(key)
        for i, (key, name) in enumerate(self.x.items()):
            if i % CHECK_EVERY == 0:
                self.deadline.check()
            c, u, v, s = key
            self._by_link.setdefault((u, v, s), []).append((c, name))
            f.implies(name, self.act[s])
            if prune and self._chunks[c].dist_out[v] > 0:
                f.implies(name, self.act[s + self._chunks[c].dist_out[v]])

    def _orbits(self, keys: list, move) -> dict:
        """Each key's representative: itself, or (tied) the least key of its orbit under the
        automorphisms. Orbits reaching a key that is not in ``keys`` are left out (those
        variables are false in every symmetric solution)."""
        if not self.tied:
            return {key: key for key in keys}
        maps = list(zip(self.symmetry.perms, self.symmetry.chunk_maps, strict=True))
        seen = count()

        def images(key):
            if next(seen) % CHECK_EVERY == 0:
                self.deadline.check()
            return (move(key, perm, image) for perm, image in maps)

        return orbit_representatives(keys, images)

    def _holds(self) -> None:
        f = self.formula
        incoming: dict[tuple[int, int], list[tuple[int, str]]] = {}
        outgoing: dict[tuple[int, int], list[tuple[int, str]]] = {}
        for (c, u, v, s), name in self.x.items():
            incoming.setdefault((c, v), []).append((s, name))
            outgoing.setdefault((c, u), []).append((s, name))
        defined = sorted({(c, v, s) for (c, v), arrivals in incoming.items() for s, _ in arrivals})
        rep = self._orbits(defined, lambda key, perm, image: (image[key[0]], perm[key[1]], key[2]))
        for c, info in enumerate(self._chunks):
            self.deadline.check()
            for r in range(self.collective.num_ranks):
                if r in info.pre:
                    continue
                arrivals = sorted(incoming.get((c, r), []))
                prev = FALSE
                for s in range(self.num_steps):
                    terms = [name for t, name in arrivals if t == s]
                    if not terms:
                        self.hold[(c, r, s)] = prev
                        continue
                    first = rep[(c, r, s)]
                    h = "h_{}_{}_{}".format(*first)
                    if first == (c, r, s):
                        f.var(h)
                    f.define_or(h, [*terms] if prev == FALSE else [prev, *terms])
                    self.hold[(c, r, s)] = prev = h
                names = [name for _, name in arrivals]
                if r in info.post:
                    f.exactly(names, 1)
                else:
                    f.at_most(names, 1)
                    if self.options.prune:  # a relay passes on what it receives
                        out = outgoing.get((c, r), [])
                        for s, name in arrivals:
                            f.clause([neg(name)] + [o for t, o in out if t > s])
        for (c, u, _v, s), name in self.x.items():
            if u not in self._chunks[c].pre:
                f.implies(name, self.hold[(c, u, s - 1)] if s > 0 else FALSE)

    def _rounds(self) -> None:
        self.units = step_units(self.formula, self.act, self.units_per_step)
        capacity_constraints(self.formula, self.capacity, self._load, self.units)
        if self.fixed_rounds is not None:
            self._guards[self.fixed_rounds] = TRUE
            self._round_constraints(self.fixed_rounds, TRUE)

    def _load(self, con: CapacityConstraint, step: int) -> list[tuple[int, str]]:
        return [(1, x) for u, v in sorted(con.pairs) for _, x in self._by_link.get((u, v, step), ())]

    def _round_constraints(self, rounds: int, guard: str) -> None:
        """Total rounds, and the cut constraints that depend on the rounds, under ``guard``."""
        f = self.formula
        total_rounds(f, self.units, rounds, guard)
        k_max = self.units_per_step
        for cut in self._cuts:
            slack = cut.slack(rounds)
            if slack < 0:
                f.clause([neg(guard)])
                return
            if slack == 0:
                self._zero_slack(cut, guard)
            if not self.saturation:
                continue
            for con in cut.cover:
                if slack >= con.capacity * k_max:
                    continue
                for s in range(self.num_steps):
                    terms = self._load(con, s) + spare(con, self.units[s])
                    guarded_ge(f, guard, terms, con.capacity * k_max - slack)

    def _zero_slack(self, cut: Cut, guard: str) -> None:
        """At zero slack a needed chunk enters the cut once, and the cover carries nothing else."""
        crossing: dict[int, list[str]] = {}
        for con in cut.cover:
            for u, v in sorted(con.pairs):
                for s in range(self.num_steps):
                    for c, name in self._by_link.get((u, v, s), ()):
                        if (u, v) in cut.crossing and c in cut.needing:
                            crossing.setdefault(c, []).append(name)
                        else:
                            self.formula.clause([neg(guard), neg(name)])
        for names in crossing.values():
            guarded_le(self.formula, guard, [(1, x) for x in sorted(set(names))], 1)

    def _chunk_order(self) -> None:
        """Lexicographic order of interchangeable chunks by when they reach each rank.

        Chunk ``a`` before ``b`` in a class: the vector of ``h_a_r_s`` over ranks ``r`` and steps
        ``s`` is lexicographically >= that of ``b`` (``a`` arrives no later at the first rank
        where they differ). A tied encoding orders one class per orbit; the others follow it.
        """
        f, sym = self.formula, self.symmetry
        for k, cls in enumerate(sym.classes):
            if self.tied and k not in sym.representatives:
                continue
            for a, b in pairwise(cls):
                self.deadline.check()
                positions = [
                    (self.hold[(a, r, s)], self.hold[(b, r, s)])
                    for r in range(self.collective.num_ranks)
                    if r not in self._chunks[a].pre
                    for s in range(self.num_steps - 1)
                ]
                positions = [(p, q) for p, q in positions if p != q]
                equal = TRUE
                for i, (p, q) in enumerate(positions):
                    f.clause([neg(equal), p, neg(q)])
                    if i == len(positions) - 1:
                        break
                    nxt = f.var(f"o_{a}_{i}")
                    f.clause([neg(equal), neg(p), neg(q), nxt])
                    f.clause([neg(equal), p, q, nxt])
                    equal = nxt

    # -- instances ---------------------------------------------------------------------------
    def guard(self, rounds: int) -> str:
        """The literal that means "R = rounds" (its constraints are added on first use)."""
        if rounds not in self._guards:
            if self.fixed_rounds is not None:
                raise InfeasibleError(f"this encoding is for {self.fixed_rounds} rounds, not {rounds}")
            lit = self.formula.var(f"rnd_{rounds}")
            self._guards[rounds] = lit
            self._round_constraints(rounds, lit)
        return self._guards[rounds]

    def assumptions(self, steps: int, rounds: int) -> list[str]:
        """Literals to assume for the instance (steps, rounds)."""
        if not self.min_steps <= steps <= self.num_steps or not steps <= rounds <= self.max_rounds:
            raise InfeasibleError(
                f"instance S={steps} R={rounds} is outside this encoding "
                f"(S {self.min_steps}..{self.num_steps}, R <= {self.max_rounds})"
            )
        out = [] if steps - 1 < self.min_steps else [self.act[steps - 1]]
        if steps < self.num_steps:
            out.append(neg(self.act[steps]))
        guard = self.guard(rounds)
        if guard != TRUE:
            out.append(guard)
        return out

    def decode(self, true_names: set[str], steps: int) -> tuple[Step, ...]:
        """The steps of the algorithm a model describes (sends sorted, rounds from the units); a
        tied encoding gives one send per orbit (:meth:`SymmetryQuotient.invert` adds the others)."""
        out = []
        own = self._representatives
        for s in range(steps):
            rounds = sum(1 for unit in self.units[s] if unit == TRUE or unit in true_names)
            sends = sorted(
                Send(c, u, v)
                for (c, u, v, t), name in self.x.items()
                if t == s and name in true_names and (c, u, v, t) in own
            )
            out.append(Step(rounds, tuple(sends)))
        return tuple(out)

    def smt2(self) -> str:
        """The instance as an SMT-LIB 2 script (declarations, assertions, ``(check-sat)``)."""
        steps = f"{self.min_steps}..{self.num_steps}" if self.min_steps < self.num_steps else self.num_steps
        return model_script(self.formula, f"{self.collective!r} on {self.topology.name}, steps {steps}")

    def stats(self) -> dict[str, int]:
        return {
            "variables": self.formula.num_vars,
            "constraints": len(self.formula.assertions),
            "sends": len(self.x),
        }

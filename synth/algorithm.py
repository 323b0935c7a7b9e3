"""The Algorithm: the chunk schedule every synthesizer produces and codegen consumes.

An algorithm is an ordered list of steps. Each step has a number of *rounds* (how many chunk
transfer times it lasts, SCCL's k-synchronous model) and a list of sends ``(chunk, src, dst, op)``.
All sends of a step read the state left by the previous step. For combining collectives ``chunk``
names the *address* whose partial sum travels, and ``op`` says whether the receiver overwrites its
slot (``copy``) or reduces into it (``reduce``).
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.errors import XcclError
from common.fields import Fields, is_number
from common.files import read_json_file, save_text
from synth.collectives import Collective, make_collective
from synth.errors import AlgorithmFormatError

if TYPE_CHECKING:
    from topologies.model import Topology

__all__ = ["FORMAT", "OPS", "Algorithm", "Provenance", "Send", "Step", "algorithm_name", "made_sends"]

FORMAT = "xccl-algorithm/1"
OPS = ("copy", "reduce")
Scalar = str | int | float | bool | None


def algorithm_name(collective: str, topology: str, steps: int, rounds: int, chunks: int) -> str:
    """An algorithm's name (:attr:`Algorithm.name`), also for a schedule still held as arrays."""
    return f"{collective}-{topology}-s{steps}-r{rounds}-c{chunks}"


@dataclass(frozen=True, order=True, slots=True)
class Send:
    """One chunk sent from ``src`` to ``dst`` (slots, no ``__dict__``: a 512-rank allreduce holds
    523,264 of them, made three times as fast and 60 MB smaller)."""

    chunk: int
    src: int
    dst: int
    op: str = "copy"
    start_us: float | None = field(default=None, compare=False)

    def __str__(self) -> str:
        arrow = "=+>" if self.op == "reduce" else "->"
        return f"{self.chunk}:{self.src}{arrow}{self.dst}"


@dataclass(frozen=True)
class Step:
    rounds: int
    sends: tuple[Send, ...]


@dataclass(frozen=True)
class Provenance:
    """Where an algorithm came from: method, solver, time, optimality, and how it was derived."""

    method: str
    solver: str | None = None
    solve_time_s: float | None = None
    optimal: bool | None = None
    via: str | None = None
    params: tuple[tuple[str, Scalar], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        for key in ("solver", "solve_time_s", "optimal", "via"):
            value = getattr(self, key)
            if value is not None:
                out[key] = round(value, 3) if key == "solve_time_s" else value
        if self.params:
            out["params"] = dict(self.params)
        return out

    def with_params(self, *pairs: tuple[str, Scalar]) -> Provenance:
        """This provenance with ``pairs`` recorded, each replacing the parameter of its name."""
        names = {k for k, _ in pairs}
        return replace(self, params=(*((k, v) for k, v in self.params if k not in names), *pairs))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Provenance:
        return cls(
            method=data["method"],
            solver=data.get("solver"),
            solve_time_s=data.get("solve_time_s"),
            optimal=data.get("optimal"),
            via=data.get("via"),
            params=tuple(sorted((data.get("params") or {}).items())),
        )


@dataclass(frozen=True)
class Algorithm:
    collective: Collective
    topology: str
    steps: tuple[Step, ...]
    provenance: Provenance = Provenance("unknown")

    # -- figures of merit ------------------------------------------------------------------
    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def rounds(self) -> int:
        return sum(s.rounds for s in self.steps)

    @property
    def chunks(self) -> int:
        return self.collective.chunks_per_rank

    @property
    def rounds_per_chunk(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)

    @property
    def num_sends(self) -> int:
        return sum(len(s.sends) for s in self.steps)

    @property
    def name(self) -> str:
        return algorithm_name(self.collective.name, self.topology, self.num_steps, self.rounds, self.chunks)

    @property
    def file_stem(self) -> str:
        """``name`` with characters unsafe in file names removed (``ring:8`` -> ``ring8``)."""
        return re.sub(r"[^A-Za-z0-9._-]", "", self.name)

    def verify(self, topology: Topology) -> None:
        """Replay symbolically; raise :class:`VerificationError` naming the first wrong step."""
        from synth.verify import verify

        verify(self, topology)

    def route(self, topology: Topology) -> None:
        """Route every rank pair the schedule sends between on ``topology`` now, one search per
        source (pairs over no link are skipped; the verifier says so), so that processes forked
        afterwards share the routes instead of each finding them: ``xccl compile`` verifies and
        times an Algorithm in children (about 2 s of routing each at 512 ranks)."""
        topology.logical().route({(s.src, s.dst) for step in self.steps for s in step.sends})

    def with_provenance(self, **changes: Any) -> Algorithm:
        return replace(self, provenance=replace(self.provenance, **changes))

    # -- JSON ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def send(s: Send) -> list:
            out: list = [s.chunk, s.src, s.dst, s.op]
            if s.start_us is not None:
                out.append(round(s.start_us, 6))
            return out

        return {
            "format": FORMAT,
            "name": self.name,
            "collective": self.collective.spec(),
            "topology": self.topology,
            "steps": self.num_steps,
            "rounds": self.rounds,
            "chunks": self.chunks,
            "provenance": self.provenance.to_dict(),
            "schedule": [{"rounds": st.rounds, "sends": [send(s) for s in st.sends]} for st in self.steps],
        }

    def to_json(self) -> str:
        """Deterministic text: one step per line."""
        doc = self.to_dict()
        schedule = doc.pop("schedule")
        head = json.dumps(doc, indent=2)[:-2]
        steps = ",\n".join(f"    {json.dumps(step)}" for step in schedule)
        return f'{head},\n  "schedule": [\n{steps}\n  ]\n}}\n'

    def save(self, path: str | Path, force: bool = False) -> Path:
        return save_text(path, self.to_json(), force=force, error=AlgorithmFormatError)

    @classmethod
    def from_dict(cls, data: Any, where: str = "<algorithm>") -> Algorithm:
        """Read the JSON form, checking every field (docs/algorithm-format.md); an error names
        ``where`` and the field."""
        r = _Fields(where, AlgorithmFormatError)
        if not isinstance(data, dict):
            raise r.fail("(top level)", "an object")
        if data.get("format") != FORMAT:
            raise r.fail("format", f'"{FORMAT}"')
        for key in ("collective", "topology", "schedule"):
            if key not in data:
                raise r.fail(key, "a value (required)")
        collective = r.collective(data["collective"])
        if not isinstance(data["topology"], str):
            raise r.fail("topology", "a topology name")
        if not isinstance(data["schedule"], list):
            raise r.fail("schedule", "a list of steps")
        steps = tuple(r.step(step, f"schedule[{i}]") for i, step in enumerate(data["schedule"]))
        prov = r.provenance(data.get("provenance") or {"method": "unknown"})
        algo = cls(collective, data["topology"], steps, prov)
        for key, value in (("steps", algo.num_steps), ("rounds", algo.rounds), ("chunks", algo.chunks)):
            if key in data and (r.integer(data[key], key, 0) != value):
                raise r.fail(key, f"{value} (what the schedule holds)", data[key])
        return algo

    @classmethod
    def load(cls, path: str | Path) -> Algorithm:
        return cls.from_dict(read_json_file(path, AlgorithmFormatError), where=str(path))

    def describe(self) -> str:
        """One line per step: ``(step i, rounds=r) chunk:src->dst ...``."""
        lines = [f"{self.name}  [{self.provenance.method}]"]
        for i, st in enumerate(self.steps):
            lines.append(f"(step {i}, rounds={st.rounds}) " + " ".join(str(s) for s in st.sends))
        return "\n".join(lines)


def _plain_sends(sends: list) -> tuple[Send, ...] | None:
    """The sends of a step whose every send :meth:`_Fields.send` plainly accepts (lists of three
    ``int`` >= 0 and an op, all with or all without a finite start >= 0), checked and made column
    by column in C; None where any send is otherwise, for the per-send path to report or accept
    (a 512-rank allreduce's 523,264 sends one by one were 2 s of its load)."""
    if not sends:
        return ()
    if set(map(type, sends)) != {list} or len(lengths := set(map(len, sends))) != 1 or lengths - {4, 5}:
        return None
    columns = list(zip(*sends, strict=True))
    for numbers in columns[:3]:
        if set(map(type, numbers)) != {int} or min(numbers) < 0:
            return None
    if set(map(type, columns[3])) != {str} or not set(columns[3]) <= set(OPS):
        return None
    starts = columns[4] if len(columns) == 5 else (None,) * len(sends)
    if len(columns) == 5:
        finite = set(map(type, starts)) <= {int, float} and all(map(math.isfinite, starts))
        if not finite or min(starts) < 0:
            return None
        starts = tuple(map(float, starts))
    return made_sends(*columns[:4], starts)


def made_sends(
    chunks: Sequence[int], srcs: Sequence[int], dsts: Sequence[int], ops: Sequence[str], starts: Sequence[float | None]
) -> tuple[Send, ...]:
    """``Send(chunk, src, dst, op, start)`` of each, every field set through its slot as the frozen
    ``__init__`` sets it, but a column at a time in C rather than one call per send."""
    made = tuple(map(object.__new__, repeat(Send, len(chunks))))
    names = ("chunk", "src", "dst", "op", "start_us")
    for name, column in zip(names, (chunks, srcs, dsts, ops, starts), strict=True):
        deque(map(getattr(Send, name).__set__, made, column), maxlen=0)
    return made


class _Fields(Fields):
    """The algorithm's own compound fields: collective, steps, sends, provenance."""

    def collective(self, spec: Any) -> Collective:
        if not isinstance(spec, dict) or not {"name", "ranks", "chunks_per_rank"} <= set(spec):
            raise self.fail("collective", "an object with name, ranks, chunks_per_rank (and root)")
        if not isinstance(spec["name"], str):
            raise self.fail("collective.name", "a collective name")
        ranks = self.integer(spec["ranks"], "collective.ranks", 1)
        chunks = self.integer(spec["chunks_per_rank"], "collective.chunks_per_rank", 1)
        root = spec.get("root")
        if root is not None:
            root = self.integer(root, "collective.root", 0)
        try:
            return make_collective(spec["name"], ranks, chunks, root)
        except XcclError as exc:  # unknown name, root out of range, beyond the size limits
            raise AlgorithmFormatError(f"{self.where}: collective: {exc}") from None

    def step(self, step: Any, field: str) -> Step:
        if not isinstance(step, dict) or set(step) != {"rounds", "sends"}:
            raise self.fail(field, 'an object {"rounds": R, "sends": [...]}')
        rounds = self.integer(step["rounds"], f"{field}.rounds", 1)
        if not isinstance(step["sends"], list):
            raise self.fail(f"{field}.sends", "a list of sends")
        sends = _plain_sends(step["sends"])
        if sends is None:  # something to report (or an unusual value): send by send, in order
            sends = tuple(self.send(s, f"{field}.sends[{j}]") for j, s in enumerate(step["sends"]))
        return Step(rounds, sends)

    def send(self, s: Any, field: str) -> Send:
        if not isinstance(s, list) or len(s) not in (4, 5) or s[3] not in OPS:
            raise self.fail(field, '[chunk, src, dst, "copy"|"reduce"] with an optional start time in us')
        chunk, src, dst = (self.integer(x, f"{field}[{k}]", 0) for k, x in enumerate(s[:3]))
        start = self.number(s[4], f"{field}[4] (start time)", 0, "microseconds") if len(s) == 5 else None
        return Send(chunk, src, dst, s[3], start)

    def provenance(self, prov: Any) -> Provenance:
        if not isinstance(prov, dict) or not isinstance(prov.get("method"), str):
            raise self.fail("provenance", "an object with a method")
        for key in ("solver", "via"):
            if prov.get(key) is not None and not isinstance(prov[key], str):
                raise self.fail(f"provenance.{key}", "a string")
        if prov.get("solve_time_s") is not None:
            self.number(prov["solve_time_s"], "provenance.solve_time_s", 0, "seconds")
        self.boolean(prov.get("optimal"), "provenance.optimal", null=True)
        params = prov.get("params") or {}
        if not isinstance(params, dict):
            raise self.fail("provenance.params", "an object of names to values")
        for key, value in params.items():
            if not (value is None or isinstance(value, str | bool) or is_number(value)):
                raise self.fail(f"provenance.params.{key}", "a string, finite number, boolean or null", value)
        return Provenance.from_dict(prov)


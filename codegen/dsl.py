"""The chunk DSL (GC3 / MSCCLang style): write a schedule as copies and reductions of chunks.

A :class:`ChunkProgram` is a context for one collective on one topology; inside ``with ChunkProgram(...)``
the module functions (:func:`chunk`) find it through a :class:`~contextvars.ContextVar`, and every
call also accepts the program explicitly (``prog.chunk(...)``). ``chunk(rank, buffer, index)``
names slots of a rank's ``input``, ``output`` or ``scratch`` buffer (any other name is a named
scratch slice, packed into the scratch buffer at compile time); ``ref.copy(...)`` and
``ref.reduce(...)`` record operations and execute them symbolically at once, so
:meth:`ChunkProgram.check` can report every output slot that ends up wrong.

>>> from codegen.dsl import ChunkProgram, chunk
>>> with ChunkProgram("ring", "ring:4", "allgather", inplace=True) as prog:
...     for r in range(4):
...         c = chunk(r, "output", r)
...         for step in range(3):
...             c = c.copy((r + step + 1) % 4, "output", r)
>>> prog.check()
()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass

from codegen.chunk_dag import ChunkDAG, ProgramInfo, aliases_of
from codegen.chunk_deps import recorded_dag
from codegen.dsl_ops import BulkRecording, is_time, slot
from codegen.dsl_ops import Op as _Op
from codegen.dsl_ops import Slot as _Slot
from codegen.errors import DslError
from codegen.ir import Buffer
from codegen.protocols import PROTOCOLS
from synth.collectives import Collective, make_collective
from topologies import Topology, load

__all__ = ["PROTOCOLS", "ChunkProgram", "ChunkRef", "WrongSlot", "chunk", "current_program"]

_CURRENT: ContextVar[ChunkProgram | None] = ContextVar("xccl_current_program", default=None)


_NAMES = {name: b.long_name for b in Buffer for name in (b.value, b.long_name)}
"""The buffers' names in the DSL, long (``input``) or as the IR spells them (``i``)."""

Value = tuple[int, ...]
"""What a slot holds: the sorted ids of the collective's chunks reduced into it (one id for a copy)."""


def current_program(program: ChunkProgram | None = None) -> ChunkProgram:
    """``program`` if given, else the one whose ``with`` block is active."""
    if program is not None:
        return program
    prog = _CURRENT.get()
    if prog is None:
        raise DslError("no program in context: use `with ChunkProgram(...):` or pass program=")
    return prog


def chunk(
    rank: int, buffer: str | Buffer, index: int, size: int = 1, program: ChunkProgram | None = None
) -> ChunkRef:
    """A reference to ``size`` chunks of ``buffer`` on ``rank`` from slot ``index``."""
    return current_program(program).chunk(rank, buffer, index, size)


@dataclass(frozen=True)
class WrongSlot:
    """An output slot whose final content differs from the collective's postcondition."""

    rank: int
    index: int
    expected: str
    got: str

    def __str__(self) -> str:
        return f"rank {self.rank} output[{self.index}]: expected {self.expected}, got {self.got}"


def _at(slot: _Slot, k: int) -> _Slot:
    """The slot ``k`` after ``slot`` (itself for 0: most ops move one chunk)."""
    return slot if k == 0 else _Slot(slot.rank, slot.buffer, slot.index + k)


class ChunkProgram(BulkRecording):
    """One collective's schedule, written as chunk operations (see the module docstring).

    ``collective`` is a :class:`~synth.collectives.Collective` or a name (then ``chunks_per_rank``
    and ``root`` apply). ``topology`` (a Topology or a name) is used to reject copies over links
    that do not exist; ``None`` allows any pair. ``inplace`` programs see the smaller buffer inside
    the larger one (allreduce: input is output), as an in-place NCCL call does. ``instances``
    replicates the whole program over interleaved slices of every chunk when it is compiled.
    """

    def __init__(
        self,
        name: str,
        topology: Topology | str | None,
        collective: Collective | str,
        instances: int = 1,
        protocol: str = "Simple",
        inplace: bool = False,
        *,
        chunks_per_rank: int = 1,
        root: int | None = None,
    ) -> None:
        self.topology = load(topology) if isinstance(topology, str) else topology
        if isinstance(collective, str):
            n = self.topology.num_ranks if self.topology is not None else None
            if n is None:
                raise DslError(f"program {name}: a collective given by name needs a topology")
            collective = make_collective(collective, n, chunks_per_rank, root)
        self.collective = collective
        if self.topology is not None and self.topology.num_ranks != collective.num_ranks:
            raise DslError(
                f"program {name}: {self.topology.name} has {self.topology.num_ranks} ranks, "
                f"the collective {collective.num_ranks}"
            )
        if protocol not in PROTOCOLS:
            raise DslError(
                f"program {name}: protocol: expected one of {', '.join(PROTOCOLS)}, got {protocol!r}"
            )
        if not isinstance(instances, int) or instances < 1:
            raise DslError(f"program {name}: instances: expected an integer >= 1, got {instances!r}")
        if inplace and collective.inplace_alias(0) is None:
            raise DslError(f"program {name}: {collective.name} has no in-place form")
        self.name = name
        self.instances = instances
        self.protocol = protocol
        self.inplace = inplace
        self.model_timed = False  # set by codegen.lower: the ops' times are the Algorithm model's
        self.ports: tuple[tuple[int, int, int, float, int], ...] = ()  # set by codegen.lower (ProgramInfo.ports)
        self.lowered: tuple[object, list[int]] | None = None  # set by codegen.lower: its steps, each op's send
        self._aliases = aliases_of(collective)
        self._sizes = {"input": collective.input_chunks, "output": collective.output_chunks}  # frozen: asked per copy
        # the logical links, asked per pair (it remembers each answer): not a set of all pairs, which
        # at 512 ranks of switched machines is 261,632 of them, each routed, for a ring that uses 512
        self._links = None if self.topology is None else self.topology.logical().links
        self._linked: set[tuple[int, int]] = set()  # pairs found linked (BulkRecording._unlinked_pairs)
        self._ops: list[_Op] = []
        self._slices: list[dict[str, int]] = [{} for _ in range(collective.num_ranks)]
        self._values: dict[tuple[int, str, int], Value] = {}
        self._verified = -1  # the ops recorded when verify() last passed (lowering, then the compiler, verify)
        canon = slot if not inplace else lambda key: self._canon(_Slot(*key))  # out of place: as named
        for r in range(collective.num_ranks):
            for j, cid in enumerate(collective.inputs[r]):
                if cid is not None:
                    self._values[canon((r, "input", j))] = (cid,)
        self._token: Token | None = None

    # -- context ---------------------------------------------------------------------------
    def __enter__(self) -> ChunkProgram:
        if self._token is not None:
            raise DslError(f"program {self.name} is already in a with block")
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None

    def __repr__(self) -> str:
        topo = self.topology.name if self.topology is not None else "any"
        return f"ChunkProgram({self.name!r}, {topo}, {self.collective!r}, {len(self._ops)} ops)"

    # -- references ------------------------------------------------------------------------
    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks

    @property
    def num_ops(self) -> int:
        return len(self._ops)

    def chunk(self, rank: int, buffer: str | Buffer, index: int, size: int = 1) -> ChunkRef:
        """A reference to ``size`` chunks of ``buffer`` on ``rank`` from slot ``index``."""
        name = self._buffer_name(buffer)
        self._check_rank(rank, "chunk")
        if not isinstance(size, int) or size < 1:
            raise DslError(f"{self.name}: chunk size: expected an integer >= 1, got {size!r}")
        self._check_range(rank, name, index, size, "chunk")
        return ChunkRef(self, rank, name, index, size)

    def _buffer_name(self, buffer: str | Buffer) -> str:
        if isinstance(buffer, Buffer):
            return buffer.long_name
        if not isinstance(buffer, str) or not buffer:
            raise DslError(
                f"{self.name}: buffer: expected input, output, scratch or a slice name, got {buffer!r}"
            )
        return _NAMES.get(buffer, buffer)

    def _size(self, name: str) -> int | None:
        return self._sizes.get(name)

    def _check_rank(self, rank: object, what: str) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            raise DslError(f"{self.name}: {what}: expected a rank in 0..{self.num_ranks - 1}, got {rank!r}")

    def _check_range(self, rank: int, name: str, index: object, size: int, what: str) -> None:
        limit = self._size(name)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise DslError(
                f"{self.name}: {what}: rank {rank} {name} index: expected an integer >= 0, got {index!r}"
            )
        if limit is not None and index + size > limit:
            raise DslError(
                f"{self.name}: {what}: rank {rank} {name}[{index}..{index + size - 1}] is outside the "
                f"buffer of {limit} chunks"
            )

    def _canon(self, slot: _Slot) -> tuple[int, str, int]:
        """The physical slot (in place, the smaller buffer lies in the larger: ``Alias``)."""
        alias = self._aliases[slot.rank] if self.inplace else None
        if alias is not None and slot.buffer == alias.small.long_name:
            return slot.rank, alias.large.long_name, alias.offset + slot.index
        return slot  # a tuple of (rank, buffer, index) itself

    def _value(self, slot: _Slot) -> Value | None:
        return self._values.get(self._canon(slot))

    # -- recording -------------------------------------------------------------------------
    def _record(self, op: _Op) -> None:
        if op.sendtb is not None or op.recvtb is not None or op.channel is not None:  # a lowered copy has none
            for hint, what in ((op.sendtb, "sendtb"), (op.recvtb, "recvtb"), (op.channel, "channel")):
                if hint is not None and (isinstance(hint, bool) or not isinstance(hint, int) or hint < 0):
                    raise DslError(f"{self.name}: {what}: expected an integer >= 0 or None, got {hint!r}")
        if op.time is not None and not is_time(op.time):
            raise DslError(
                f"{self.name}: time: expected (start, arrival) in microseconds, 0 <= start <= arrival, "
                f"got {op.time!r}"
            )
        if op.dst.buffer == "input" and not self.inplace:
            raise DslError(
                f"{self.name}: {op.kind} into rank {op.dst.rank} input[{op.dst.index}]: the input of an "
                "out-of-place call is read-only (use scratch or output, or inplace=True)"
            )
        if (
            op.src.rank != op.dst.rank
            and self._links is not None
            and (op.src.rank, op.dst.rank) not in self._links
        ):
            raise DslError(
                f"{self.name}: {op.kind} from rank {op.src.rank} to rank {op.dst.rank}: "
                f"{self.topology.name} has no link {op.src.rank} -> {op.dst.rank}"
            )
        if op.count == 1:  # most ops (every lowered send): one value, no lists per chunk
            value = self._held_one(op.src, "source", op)
            if op.kind == "reduce":
                value = tuple(sorted(self._held_one(op.operand or op.dst, "destination", op) + value))
            self._values[self._canon(op.dst)] = value
        else:
            self._execute(op)
        if op.dst.buffer not in ("input", "output"):
            slices = self._slices[op.dst.rank]
            slices[op.dst.buffer] = max(slices.get(op.dst.buffer, 0), op.dst.index + op.count)
        self._ops.append(op)

    def _execute(self, op: _Op) -> None:
        """What ``op`` writes, chunk by chunk, read before anything is written."""
        sources = [(op.src, "source")] + (
            [(op.operand or op.dst, "destination")] if op.kind == "reduce" else []
        )
        held = [self._held(base, role, op) for base, role in sources]  # per source, per chunk
        new: list[tuple[tuple[int, str, int], Value]] = []
        for k in range(op.count):
            src = held[0][k]
            value = tuple(sorted(held[1][k] + src)) if op.kind == "reduce" else src
            new.append((self._canon(_at(op.dst, k)), value))
        for key, value in new:
            self._values[key] = value

    def _held(self, base: _Slot, role: str, op: _Op) -> list[Value]:
        """What the ``op.count`` slots from ``base`` hold; an error if one holds nothing."""
        return [self._held_one(_at(base, k), role, op) for k in range(op.count)]

    def _held_one(self, slot: _Slot, role: str, op: _Op) -> Value:
        """What ``slot`` holds; an error if it holds nothing."""
        value = self._values.get(self._canon(slot))
        if value is None:
            raise DslError(
                f"{self.name}: {op.kind} {role} rank {slot.rank} {slot.buffer}[{slot.index}] holds no data"
            )
        return value

    def copy_slot(
        self, src: tuple[int, str, int], rank: int, buffer: str, index: int, time: tuple[float, float] | None = None
    ) -> tuple[int, str, int]:
        """Copy one chunk from ``src`` (``(rank, buffer, index)``, ``buffer`` by its long name or
        a scratch slice's) to ``rank``'s ``buffer[index]``, and return that slot: :meth:`ChunkRef.copy`
        for a caller whose ranks and slots are valid by construction (the lowering: a send of a
        verified Algorithm each, 262,144 at 512 ranks, where making and checking the references
        cost more than recording the op), checked only for what the op must satisfy (a link, data
        at the source, no out-of-place write to the input, a valid ``time``)."""
        src = src if type(src) is _Slot else _Slot(*src)
        dst = _Slot(rank, buffer, index)
        if src.rank != rank or self._canon(dst) != self._canon(src):
            self._record(_Op("copy", src, dst, 1, None, None, None, None, time))
        return dst

    def reduce_slot(
        self,
        src: tuple[int, str, int],
        mine: tuple[int, str, int],
        dst: tuple[int, str, int] | None = None,
        time: tuple[float, float] | None = None,
    ) -> tuple[int, str, int]:
        """``mine := mine (op) src`` for one chunk, or into ``dst`` (a slot of ``mine``'s rank), and
        return the slot holding the result: :meth:`ChunkRef.reduce` for the same callers as
        :meth:`copy_slot`, checked as it checks."""
        src = src if type(src) is _Slot else _Slot(*src)
        mine = mine if type(mine) is _Slot else _Slot(*mine)
        target = mine if dst is None else _Slot(*dst)
        self._record(_Op("reduce", src, target, 1, None if dst is None else mine, None, None, None, time))
        return target

    def _scratch_index(self, rank: int, name: str, index: int | None) -> int:
        if index is None or index == -1:
            return self._slices[rank].get(name, 0)
        return index

    # -- checking --------------------------------------------------------------------------
    def check(self) -> tuple[WrongSlot, ...]:
        """Every output slot whose symbolic content differs from the postcondition (empty: correct)."""
        coll = self.collective
        wrong = []
        wanted: dict[int, Value] = {}  # per address: at 512 ranks an allreduce's 262,144 output
        # slots want 512 sums of 512 contributions each, sorted once each, not once per slot; a slot
        # holding the very tuple found right before (copies share it) is not compared again
        held = self._values.get if not self.inplace else lambda key: self._value(_Slot(*key))
        for r in range(self.num_ranks):
            for j, addr in enumerate(coll.outputs[r]):
                if addr is None:
                    continue
                expected = wanted.get(addr)
                if expected is None:
                    expected = wanted[addr] = tuple(sorted(coll.contributions[addr])) if coll.combining else (addr,)
                got = held((r, "output", j))  # out of place, a slot is named as it lies
                if got is expected:
                    continue
                if got != expected:
                    wrong.append(WrongSlot(r, j, self._describe(expected), self._describe(got)))
                else:
                    wanted[addr] = got
        return tuple(wrong)

    def verify(self) -> None:
        """Raise :class:`DslError` naming the wrong output slots, if any (not checked again while no
        op was recorded since it last passed: the slots' contents change only by recording)."""
        if self._verified == len(self._ops):
            return
        wrong = self.check()
        if wrong:
            shown = "; ".join(str(w) for w in wrong[:3])
            more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
            raise DslError(f"{self.name}: {len(wrong)} wrong output slot(s): {shown}{more}")
        self._verified = len(self._ops)

    def _describe(self, value: Value | None) -> str:
        if value is None:
            return "nothing"
        coll = self.collective
        if not coll.combining and len(value) == 1:
            (cid,) = value
            (origin,) = sorted(coll.chunks[cid].pre) or [None]
            return f"chunk {cid} (from rank {origin})"
        addrs = sorted({coll.chunks[c].address for c in value})
        ranks = [r for c in value for r in sorted(coll.chunks[c].pre)]
        what = "+".join(map(str, ranks))
        return f"chunk {','.join(map(str, addrs))} reduced over ranks {what}"

    # -- compilation -----------------------------------------------------------------------
    def info(self) -> ProgramInfo:
        coll = self.collective
        return ProgramInfo(
            name=self.name,
            collective=coll.name,
            num_ranks=self.num_ranks,
            root=coll.root,
            input_chunks=coll.input_chunks,
            output_chunks=coll.output_chunks,
            scratch_chunks=tuple(sum(s.values()) for s in self._slices),
            nchunksperloop=coll.size_chunks,
            protocol=self.protocol,
            inplace=self.inplace,
            aliases=self._aliases,
            model_timed=self.model_timed,
            ports=self.ports,
        )

    def chunk_dag(self) -> ChunkDAG:
        """Trace into the chunk DAG; named scratch slices are packed into the scratch buffer
        (:func:`codegen.chunk_deps.recorded_dag`: in bulk, one ``Loc`` per slot)."""
        offsets = []
        for slices in self._slices:
            base, where = 0, {}
            for name, length in slices.items():
                where[name] = base
                base += length
            offsets.append(where)
        return recorded_dag(self.info(), self._ops, offsets)


@dataclass(frozen=True)
class ChunkRef:
    """``size`` consecutive chunks of one rank's buffer; copy and reduce them."""

    program: ChunkProgram
    rank: int
    buffer: str
    index: int
    size: int = 1

    def __repr__(self) -> str:
        span = f"{self.index}" if self.size == 1 else f"{self.index}:{self.index + self.size}"
        return f"ChunkRef(rank {self.rank} {self.buffer}[{span}])"

    def _slot(self) -> _Slot:
        return _Slot(self.rank, self.buffer, self.index)

    def _target(self, rank: int, buffer: str | Buffer | None, index: int | None, what: str) -> ChunkRef:
        prog = self.program
        prog._check_rank(rank, what)
        name = self.buffer if buffer is None else prog._buffer_name(buffer)
        if prog._size(name) is None:
            index = prog._scratch_index(rank, name, index)
        elif index is None:
            index = self.index
        prog._check_range(rank, name, index, self.size, what)
        return ChunkRef(prog, rank, name, index, self.size)

    def copy(
        self,
        rank: int,
        buffer: str | Buffer | None = None,
        index: int | None = None,
        sendtb: int | None = None,
        recvtb: int | None = None,
        channel: int | None = None,
        *,
        time: tuple[float, float] | None = None,
    ) -> ChunkRef:
        """Copy these chunks to ``rank``'s ``buffer[index]`` (default: same buffer and index; a
        scratch slice without index appends). Returns the destination reference.

        ``time`` = (start, arrival) in microseconds, when a timed schedule (a synthesized
        algorithm's ``start_us``) starts the transfer and when its data lands: the compiler then
        orders every threadblock by these times and aggregates only transfers close in time."""
        dst = self._target(rank, buffer, index, "copy")
        prog = self.program
        src_slot, dst_slot = self._slot(), dst._slot()  # each made once (a lowered send is a copy)
        if src_slot.rank == dst_slot.rank and prog._canon(dst_slot) == prog._canon(src_slot):
            return dst
        prog._record(_Op("copy", src_slot, dst_slot, self.size, None, sendtb, recvtb, channel, time))
        return dst

    def reduce(
        self,
        other: ChunkRef,
        sendtb: int | None = None,
        recvtb: int | None = None,
        channel: int | None = None,
        dst: ChunkRef | None = None,
        *,
        time: tuple[float, float] | None = None,
    ) -> ChunkRef:
        """``self := self (op) other``; ``other`` may live on another rank (it is sent here).
        With ``dst`` (a reference on this rank) the result goes there and ``self`` is only read.
        Returns the reference holding the result. ``time`` as in :meth:`copy`."""
        if not isinstance(other, ChunkRef) or other.program is not self.program:
            raise DslError(
                f"{self.program.name}: reduce: expected a ChunkRef of the same program, got {other!r}"
            )
        if other.size != self.size:
            raise DslError(f"{self.program.name}: reduce: sizes differ ({self.size} and {other.size})")
        target = self if dst is None else dst
        if target.rank != self.rank or target.size != self.size:
            raise DslError(
                f"{self.program.name}: reduce: dst must be {self.size} chunk(s) on rank {self.rank}"
            )
        operand = None if dst is None else self._slot()
        self.program._record(
            _Op("reduce", other._slot(), target._slot(), self.size, operand, sendtb, recvtb, channel, time)
        )
        return target

    def split(self, parts: int) -> list[ChunkRef]:
        """``parts`` equal consecutive pieces."""
        if parts < 1 or self.size % parts:
            raise DslError(f"{self.program.name}: split: {self.size} chunk(s) do not split into {parts}")
        step = self.size // parts
        return [
            ChunkRef(self.program, self.rank, self.buffer, self.index + k * step, step) for k in range(parts)
        ]

    def group(self, other: ChunkRef) -> ChunkRef:
        """The smallest reference covering both (same rank and buffer, adjacent or overlapping)."""
        if (other.rank, other.buffer) != (self.rank, self.buffer):
            raise DslError(f"{self.program.name}: group: {self!r} and {other!r} are not in the same buffer")
        lo = min(self.index, other.index)
        hi = max(self.index + self.size, other.index + other.size)
        if hi - lo > self.size + other.size:
            raise DslError(f"{self.program.name}: group: {self!r} and {other!r} are not contiguous")
        return ChunkRef(self.program, self.rank, self.buffer, lo, hi - lo)

    def __iter__(self) -> Iterator[ChunkRef]:
        return iter(self.split(self.size))

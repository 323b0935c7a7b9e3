"""What a :class:`~codegen.dsl.ChunkProgram` records (slots and operations), and its bulk path.

A lowered Algorithm records one operation per send: 262,144 at 512 ranks for an allgather, twice
that for an allreduce. Recorded one call each (:meth:`ChunkProgram.copy_slot`,
:meth:`ChunkProgram.reduce_slot`), the calls, their tuples and their checks cost more than the
operations; :class:`BulkRecording` records a whole step's in one call, with the same checks, and
hands any operation whose checks do not plainly pass to the per-call path, so what is recorded and
every error and its message are that path's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import partial
from itertools import repeat
from operator import eq, itemgetter, le
from typing import TYPE_CHECKING, NamedTuple, Self

if TYPE_CHECKING:
    from codegen.dsl import Value

__all__ = ["BulkRecording", "Op", "Slot", "SlotOp", "is_time", "slot"]


class Slot(NamedTuple):
    """A slot as the program names it (a tuple: two are made per copy, 262,144 copies at 512 ranks)."""

    rank: int
    buffer: str  # "input", "output" or a scratch slice name
    index: int


class Op(NamedTuple):
    """One recorded operation (a tuple, as :class:`Slot`)."""

    kind: str
    src: Slot
    dst: Slot
    count: int
    operand: Slot | None
    sendtb: int | None
    recvtb: int | None
    channel: int | None
    time: tuple[float, float] | None = None


Where = tuple[int, str, int]
SlotOp = tuple[str, Where, Where, Where | None, tuple[float, float] | None]
"""``(kind, src, a, b, time)`` for :meth:`BulkRecording.record_slots`: ``("copy", src, dst, None,
time)`` is ``copy_slot(src, *dst, time)``; ``("reduce", src, mine, dst, time)`` is
``reduce_slot(src, mine, dst, time)``."""

_new = tuple.__new__  # a Slot or an Op made without its generated __new__ (a Python call each)
slot: Callable[[tuple[int, str, int]], Slot] = partial(_new, Slot)
"""The :class:`Slot` of a ``(rank, buffer, index)`` tuple (a call in C)."""


_op: Callable[[tuple], Op] = partial(_new, Op)
_KIND, _SRC, _DST, _OTHER, _TIME = (itemgetter(k) for k in range(5))  # a SlotOp's fields
_RANK, _BUFFER = itemgetter(0), itemgetter(1)


def _slots(found: list[tuple[int, str, int]]) -> list[Slot]:
    """``found`` as :class:`Slot` tuples (those that are kept: ``record_slots`` keeps them)."""
    if set(map(type, found)) == {Slot}:
        return found
    return [s if type(s) is Slot else _new(Slot, s) for s in found]


def is_time(time: object) -> bool:
    """``(start, arrival)``: two numbers, ``0 <= start <= arrival``."""
    if not isinstance(time, tuple) or len(time) != 2:
        return False
    start, arrival = time
    numbers = isinstance(start, int | float) and isinstance(arrival, int | float)
    return numbers and not isinstance(start, bool) and not isinstance(arrival, bool) and 0 <= start <= arrival


def _plain_time(time: object) -> bool:
    """None or two floats ``0 <= start <= arrival``: a time :func:`is_time` accepts, asked cheaply."""
    if time is None:
        return True
    if type(time) is not tuple or len(time) != 2:
        return False
    start, arrival = time
    return type(start) is float and type(arrival) is float and 0 <= start <= arrival


def _plain_times(times: list[object]) -> bool:
    """Whether every one of ``times`` is one :func:`_plain_time` accepts, asked a field at a time
    in C where all are None or all pairs."""
    kinds = set(map(type, times))
    if kinds <= {type(None)}:
        return True
    if kinds != {tuple} or set(map(len, times)) != {2}:
        return all(map(_plain_time, times))
    starts, arrivals = zip(*times, strict=True)
    floats = set(map(type, starts)) == {float} == set(map(type, arrivals))
    return floats and min(starts) >= 0 and all(map(le, starts, arrivals))


class BulkRecording:
    """:class:`~codegen.dsl.ChunkProgram`'s recording of many operations in one call (a part of it:
    its ``copy_slot`` and ``reduce_slot`` are the per-call path this one hands over to)."""

    inplace: bool
    _values: dict[tuple[int, str, int], Value]
    _ops: list[Op]
    _links: object
    _linked: set[tuple[int, int]]
    _slices: list[dict[str, int]]
    _token: object

    def copy_slots(
        self, copies: list[tuple[tuple[int, str, int], int, str, int, tuple[float, float] | None]]
    ) -> list[tuple[int, str, int]]:
        """:meth:`copy_slot` of each ``(src, rank, buffer, index, time)`` in order, and the slots
        written: one call per step of a lowered Algorithm (:meth:`record_slots`)."""
        out = [_new(Slot, (rank, buffer, index)) for _, rank, buffer, index, _ in copies]
        self.record_slots([("copy", c[0], dst, None, c[4]) for c, dst in zip(copies, out, strict=True)])
        return out

    def record_slots(self, ops: list[SlotOp]) -> None:
        """Each of ``ops`` (:data:`SlotOp`) as :meth:`copy_slot` or :meth:`reduce_slot` records it,
        in order. An op of an out-of-place program whose checks plainly pass (a float time, a link,
        data at the source and in the reduced slot, no input written, not onto itself) is recorded
        here; any other goes through that method, so errors and their messages are its."""
        if self.inplace:  # slots are aliased: the per-call path asks each op's physical slots
            for op in ops:
                self._record_one(op)
            return
        if self._copied(ops):
            return
        values, record, slices = self._values, self._ops.append, self._slices
        unlinked = self._unlinked(ops)
        odd_times = not _plain_times(list(map(_TIME, ops)))  # asked per op only where one is
        for op in ops:
            kind, src, a, b, time = op
            target = a if b is None else b
            rank = target[0]
            value = values.get(src)
            if (
                value is None
                or target[1] == "input"
                or (odd_times and not _plain_time(time))
                or (unlinked and (src[0], rank) in unlinked)
            ):
                self._record_one(op)
                continue
            if kind == "copy":
                if src == target:
                    continue  # onto itself: nothing recorded
                operand = None
            else:
                mine = values.get(a)
                if mine is None:
                    self._record_one(op)
                    continue
                kind, value = "reduce", tuple(sorted(mine + value))
                operand = None if b is None else (a if type(a) is Slot else _new(Slot, a))
            src = src if type(src) is Slot else _new(Slot, src)
            target = target if type(target) is Slot else _new(Slot, target)
            values[target] = value
            if target[1] != "output":
                held = slices[rank]
                held[target[1]] = max(held.get(target[1], 0), target[2] + 1)
            record(_new(Op, (kind, src, target, 1, operand, None, None, None, time)))

    def with_times(self, times: Sequence[tuple[float, float] | None]) -> Self | None:
        """A copy of this program with op ``i`` at ``times[i]``, its slots and what each holds as
        they are: a schedule re-timed moves the same chunks between the same slots
        (:func:`codegen.lower.lower_algorithm`'s ``like``). None where a time is not one
        :meth:`record_slots` plainly accepts: the caller records the ops again, and has the error."""
        if len(times) != len(self._ops) or not _plain_times(list(times)):
            return None
        out = copy.copy(self)
        out._ops = [_new(Op, (*op[:8], time)) for op, time in zip(self._ops, times, strict=True)]
        out._values = dict(self._values)
        out._slices = [dict(held) for held in self._slices]
        out._token = None
        return out

    def _copied(self, ops: list[SlotOp]) -> bool:
        """Record ``ops`` a field at a time in C where they are copies that :meth:`record_slots`
        would record one by one, each plainly (data at the source, a link, a float time, no input
        written, not onto itself) and none reading a slot another writes (so that the reads may
        all come first); else record nothing and say so. A lowered copy-only Algorithm's steps
        (an allgather's 262,144 copies at 512 ranks) are such batches."""
        if not ops or set(map(_KIND, ops)) != {"copy"} or set(map(_OTHER, ops)) != {None}:
            return False
        srcs, dsts, times = list(map(_SRC, ops)), list(map(_DST, ops)), list(map(_TIME, ops))
        values = self._values
        held = list(map(values.get, srcs))
        if None in held or "input" in set(map(_BUFFER, dsts)) or not _plain_times(times):
            return False
        if any(map(eq, srcs, dsts)) or not set(dsts).isdisjoint(srcs):
            return False
        if self._unlinked_pairs(set(zip(map(_RANK, srcs), map(_RANK, dsts), strict=True))):
            return False
        srcs, dsts = _slots(srcs), _slots(dsts)
        values.update(zip(dsts, held, strict=True))
        slices = self._slices
        for rank, buffer, index in (d for d in dsts if d[1] != "output"):
            slices[rank][buffer] = max(slices[rank].get(buffer, 0), index + 1)
        none = repeat(None)
        self._ops.extend(map(_op, zip(repeat("copy"), srcs, dsts, repeat(1), none, none, none, none, times)))
        return True

    def _unlinked(self, ops: list[SlotOp]) -> set[tuple[int, int]]:
        """The ``(src rank, dst rank)`` pairs of ``ops`` without a link (:meth:`_unlinked_pairs`)."""
        return self._unlinked_pairs({(op[1][0], (op[2] if op[3] is None else op[3])[0]) for op in ops})

    def _unlinked_pairs(self, pairs: set[tuple[int, int]]) -> set[tuple[int, int]]:
        """Those of ``pairs`` of two ranks without a link. The topology's links answer through a
        Python call each: each pair is asked once per program, those that pass are kept
        (``_linked``; a rank's own pair needs none), and a step's pairs are a set difference."""
        if self._links is None:
            return set()
        known, links = self._linked, self._links
        bad = set()
        for pair in pairs.difference(known):
            if pair[0] == pair[1] or pair in links:
                known.add(pair)
            else:
                bad.add(pair)
        return bad

    def _record_one(self, op: SlotOp) -> None:
        """``op`` through the per-call path."""
        kind, src, a, b, time = op
        if kind == "copy":
            self.copy_slot(src, *a, time)
        else:
            self.reduce_slot(src, a, b, time)

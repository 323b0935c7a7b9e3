"""Lowering ``Algorithm -> ChunkProgram``: every send of a synthesized step becomes a DSL operation,
so synthesized and hand-written schedules go through one compiler.

Non-combining collectives: a chunk arrives in its output slot where the receiver has one, else in
a scratch slot (a relay); ranks' own chunks are copied from input to output (not in place).
Combining collectives (``Send.chunk`` is an address): each rank keeps one partial sum per address,
first in its input slot (its own contribution, never written out of place), then in its *home*
slot: its output slot for that address (in place: the input slot, which is that output slot),
else scratch, so no input slot but an output is ever written. A reduce
into a rank whose partial still sits in the input writes the home slot directly (``rrc`` with the
input as local operand). All sends of a step read the state the previous step left: within a
step, an op that reads a slot is traced before one that writes it; where two ops each write what
the other reads (an exchange), one of them receives into scratch and is applied after the step.

A timed algorithm (every send has ``start_us``, as the MILP's have) passes its schedule on: each
operation gets ``time=(start, arrival)``, the arrival ``alpha + bytes / bandwidth`` after the start
over the logical link at the size the schedule was made for (``params["size_bytes"]``), so the
compiler orders every threadblock as the schedule runs and keeps its pipelining. An untimed
algorithm on a known topology (SMT results, NCCL's layout; not the other baselines, whose dataflow
order is already the model's) is timed first: its sends start when the
Algorithm model's list schedule (:func:`synth.cost.start_times`) starts them at
:data:`SCHEDULE_SIZE`. Without that, the compiler ordered it by dataflow depth, merged transfers of
different steps that had equal critical-path height, and sent what the model runs in parallel over
a multi-link connection (DGX-1's doubled NVLinks) one after the other on one threadblock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from itertools import chain, compress, islice, repeat
from operator import add, attrgetter, itemgetter, mul, not_

from codegen.dsl import ChunkProgram
from codegen.dsl_ops import SlotOp, slot
from common.gc_pause import gc_paused
from synth.algorithm import Algorithm, Provenance, Send, Step, made_sends
from synth.cost import chunk_bytes, model_ordered, start_times
from synth.timing import IDEAL, Params, model_params
from topologies import Topology, TopologyError, load

_CHUNK, _SRC, _DST, _START = (attrgetter(k) for k in ("chunk", "src", "dst", "start_us"))
_ARRIVAL = itemgetter(1)
Times = Callable[[Sequence[Send]], list[tuple[float, float]]] | None
"""(start, arrival) of each of a list of sends, or None for an untimed schedule."""

__all__ = ["SCHEDULE_SIZE", "lower_algorithm", "retimed"]

SCHEDULE_SIZE = 1 << 30
"""Bytes at which an untimed algorithm is list-scheduled by the Algorithm model (large: the
bandwidth-bound regime, where the order of transfers matters most)."""

Where = tuple[str, int]
Slot = tuple[int, str, int]
"""A rank's chunk slot, ``(rank, buffer, index)`` (:meth:`ChunkProgram.copy_slot`)."""


@gc_paused()
def lower_algorithm(
    algo: Algorithm,
    topology: Topology | str | None = None,
    *,
    inplace: bool = False,
    instances: int = 1,
    protocol: str = "Simple",
    name: str | None = None,
    like: ChunkProgram | None = None,
) -> ChunkProgram:
    """A DSL program doing what ``algo`` does (checked symbolically before it is returned).
    ``like``: a program lowered before with the same options from the same sends at other times
    (a schedule and its re-timed copy, ``runtime.choice``); where it is a copy-only collective's,
    its slots and operations are taken at this schedule's times rather than lowered again."""
    if topology is None:
        try:
            topology = load(algo.topology)
        except TopologyError:
            topology = None  # a topology file we cannot find: links were checked by verify()
    prog = ChunkProgram(name or algo.name, topology, algo.collective, instances, protocol, inplace)
    topology = prog.topology
    untimed = any(s.start_us is None for step in algo.steps for s in step.sends)
    if topology is not None and untimed and model_ordered(algo):
        algo = _timed(algo, topology, SCHEDULE_SIZE)
        prog.model_timed = True
    times = _schedule_times(algo, topology)
    if times is not None and topology is not None:
        prog.ports = _ports(algo, topology)
    again = _again(like, prog, algo, times) if like is not None else None
    if again is not None:
        return again
    if algo.collective.combining:
        _Combining(prog, algo, times).run()
    else:
        _lower_copies(prog, algo, times)
    prog.verify()
    return prog


def _made_in(algo: Algorithm) -> Params:
    """The timing model a timed schedule was made in: the one its provenance names (a MILP made
    under the calibrated model records it), else the ideal model (SMT and MILP by default)."""
    made = dict(algo.provenance.params) if algo.provenance else {}
    model, protocol, send = made.get("timing_model"), made.get("protocol"), made.get("send_us")
    if not isinstance(model, str):
        return IDEAL
    return model_params(
        model, protocol if isinstance(protocol, str) else None, send if isinstance(send, int | float) else None
    )


def _timed(algo: Algorithm, topology: Topology, size: int) -> Algorithm:
    """``algo`` with every send's start in the Algorithm model's list schedule at ``size`` bytes
    (the ideal model's: the order of transfers at a large size, which its costs do not change)."""
    steps = _started(algo, start_times(algo, topology, size, IDEAL))
    prov = algo.provenance or Provenance("model")
    params = (*((k, v) for k, v in prov.params if k != "size_bytes"), ("size_bytes", size))
    return replace(algo, steps=steps, provenance=replace(prov, params=params))


def retimed(algo: Algorithm, topology: Topology, size_bytes: float, params: Params) -> Algorithm:
    """``algo`` with every send's start where the Algorithm model in ``params`` starts it at
    ``size_bytes`` (:func:`synth.cost.start_times`), recorded as made in that model (so the
    lowering times arrivals in it): the schedule as that model runs it. A MILP's own starts are
    the order of the model it was made in; the calibrated model runs side by side, through one
    port, sends that an ideal MILP puts one after the other (``runtime.choice``)."""
    steps = _started(algo, start_times(algo, topology, size_bytes, params))
    prov = algo.provenance or Provenance("model")
    model = (("timing_model", params.model), ("protocol", params.protocol), ("send_us", params.send_us))
    dropped = {"size_bytes", *(k for k, _ in model)}
    kept = tuple((k, v) for k, v in prov.params if k not in dropped)
    extra = model if params != IDEAL else ()
    return replace(algo, steps=steps, provenance=replace(prov, params=(*kept, ("size_bytes", _whole(size_bytes)), *extra)))


def _started(algo: Algorithm, starts: Iterable[float]) -> tuple[Step, ...]:
    """``algo``'s steps with each send started at the next of ``starts`` (a ``Send`` made
    directly: ``dataclasses.replace`` per send was a second of a 512-rank lowering)."""
    at = iter(starts)
    return tuple(replace(step, sends=_sends_at(step.sends, list(islice(at, len(step.sends))))) for step in algo.steps)


def _sends_at(sends: tuple[Send, ...], starts: list[float]) -> tuple[Send, ...]:
    """``sends`` started at ``starts``, made a field at a time (:func:`synth.algorithm.made_sends`)."""
    columns = [list(map(attrgetter(name), sends)) for name in ("chunk", "src", "dst", "op")]
    return made_sends(*columns, starts)


def _whole(x: float) -> float | int:
    """A size as the MILP records it (an integer where it is one)."""
    return int(x) if float(x).is_integer() else x


def _schedule_times(algo: Algorithm, topology: Topology | None) -> Times:
    """(start, arrival) of each send of a timed algorithm; None for an untimed one."""
    sends = [s for step in algo.steps for s in step.sends]
    if not sends or any(s.start_us is None for s in sends):
        return None
    size = dict(algo.provenance.params).get("size_bytes") if algo.provenance else None
    logical = topology.logical() if topology is not None else None
    nbytes = chunk_bytes(algo.collective, float(size)) if isinstance(size, int | float) and size > 0 else 0.0

    params = _made_in(algo)
    n = algo.collective.num_ranks
    delays: dict[int, float | None] = {}  # per connection src * n + dst: every send moves one chunk

    def times(sends: Sequence[Send]) -> list[tuple[float, float]]:
        """Each send's, a field at a time (one call per send was a second at 512 ranks)."""
        keys = list(map(add, map(mul, map(_SRC, sends), repeat(n)), map(_DST, sends)))
        for key in set(keys).difference(delays):
            link = logical.links.get(divmod(key, n)) if logical is not None else None
            delays[key] = None if link is None else params.delay_us(link, nbytes)
        starts, found = list(map(_START, sends)), list(map(delays.__getitem__, keys))
        if None in found:  # a pair without a link (a topology file we cannot find): lands at once
            return [(t, t if d is None else t + d) for t, d in zip(starts, found, strict=True)]
        return list(zip(starts, map(add, starts, found), strict=True))

    return times


def _ports(algo: Algorithm, topology: Topology) -> tuple[tuple[int, int, int, float, int], ...]:
    """``(src, dst, port, alpha_us, lanes)`` for every connection ``algo`` sends over: ``port``
    numbers the physical edge its logical link leaves ``src`` by, ``alpha_us`` is the link's
    latency, ``lanes`` the edge's parallel links (``ProgramInfo.ports``)."""
    logical = topology.logical()
    ids: dict[object, int] = {}
    n = algo.collective.num_ranks
    sends = list(chain.from_iterable(step.sends for step in algo.steps))
    keys = sorted(set(map(add, map(mul, map(_SRC, sends), repeat(n)), map(_DST, sends))))  # (src, dst) order
    out = []
    for src, dst in map(divmod, keys, repeat(n)):
        link = logical.links[(src, dst)]
        edge = link.edges[0]
        out.append((src, dst, ids.setdefault(edge, len(ids)), link.alpha_us, logical.resources[edge].count))
    return tuple(out)


def _again(like: ChunkProgram, prog: ChunkProgram, algo: Algorithm, times: Times) -> ChunkProgram | None:
    """``like`` with ``algo``'s times, where it is what lowering ``algo`` into the empty ``prog``
    makes but for them: a copy-only collective's program lowered (each op the initial copy or a
    send, :attr:`ChunkProgram.lowered`) with the same options from the same sends."""
    if like.lowered is None or algo.collective.combining:
        return None
    if like.topology is not prog.topology or like.collective is not prog.collective:
        return None
    if any(getattr(like, k) != getattr(prog, k) for k in ("name", "instances", "protocol", "inplace")):
        return None
    steps, sent = like.lowered
    fields = attrgetter("chunk", "src", "dst", "op")
    if len(steps) != len(algo.steps) or any(
        list(map(fields, a.sends)) != list(map(fields, b.sends)) for a, b in zip(steps, algo.steps, strict=True)
    ):
        return None
    if times is None:
        at: list = [None] * len(sent)
    else:
        sends = list(chain.from_iterable(step.sends for step in algo.steps))
        whens = iter(times([sends[i] for i in sent if i >= 0]))
        at = [(0.0, 0.0) if i < 0 else next(whens) for i in sent]
    again = like.with_times(at)
    if again is None:  # a time the recording refuses: lowered again, to say why
        return None
    again.model_timed, again.ports, again.lowered = prog.model_timed, prog.ports, (algo.steps, sent)
    again.verify()
    return again


class _Scratch:
    def __init__(self, n: int) -> None:
        self.next = [0] * n

    def take(self, rank: int) -> Where:
        self.next[rank] += 1
        return ("scratch", self.next[rank] - 1)


def _lower_copies(prog: ChunkProgram, algo: Algorithm, times: Times) -> None:
    """Each send a copy into the receiver's output slot for the chunk, else into scratch. What is
    kept per ``(rank, chunk)`` (the slot holding it there, its output slot) is keyed by
    ``rank * chunks + chunk`` (a verified Algorithm's chunks lie below ``chunks``): pairs as keys,
    each made and hashed per send, were an eighth of a 512-rank alltoall's lowering."""
    coll = algo.collective
    n, width = coll.num_ranks, len(coll.chunks)
    scratch = _Scratch(n)
    where: dict[int, Slot] = {}  # rank * width + chunk -> the slot holding it there
    out_slot: dict[int, int] = {}
    for r in range(n):
        for j, cid in enumerate(coll.outputs[r]):
            if cid is not None:
                out_slot.setdefault(r * width + cid, j)
    copy = prog.copy_slot  # the slots are the collective's and fresh scratch: no references made
    sent: list[int] = []  # per copy recorded, the send it makes (-1: a rank's own chunk)
    for r in range(n):
        for j, cid in enumerate(coll.inputs[r]):
            if cid is not None:
                key = r * width + cid
                where[key] = slot((r, "input", j))
                if key in out_slot:
                    copy((r, "input", j), r, "output", out_slot[key], None if times is None else (0.0, 0.0))
                    sent.append(-1)
    at = 0  # the step's first send's place among all sends
    widths = repeat(width)
    for step in algo.steps:  # the step's copies made a field at a time, recorded in one call
        sends = step.sends
        receivers = list(map(_DST, sends))
        keys = list(map(add, map(mul, receivers, widths), map(_CHUNK, sends)))
        fresh = list(map(not_, map(where.__contains__, keys)))  # else the receiver holds it already
        moved, got = list(compress(sends, fresh)), list(compress(keys, fresh))
        take = scratch.take  # where the receiver has no output slot for the chunk (j None)
        outs = zip(compress(receivers, fresh), map(out_slot.get, got), strict=True)
        dsts = [slot((d, "output", j) if j is not None else (d, *take(d))) for d, j in outs]
        srcs = list(map(where.__getitem__, map(add, map(mul, map(_SRC, moved), widths), map(_CHUNK, moved))))
        when = times(moved) if times is not None else repeat(None)
        prog.record_slots(list(zip(repeat("copy"), srcs, dsts, repeat(None), when)))
        sent.extend(compress(range(at, at + len(keys)), fresh))
        where.update(zip(got, dsts, strict=True))
        at += len(keys)
    if len(sent) == prog.num_ops:  # each copy recorded as one op (in place, some are not)
        prog.lowered = (algo.steps, sent)


class _Combining:
    """The lowering of a combining collective. What it keeps per ``(rank, address)`` (the slot
    holding the partial sum, its home slot: whole ``(rank, buffer, index)`` slots, as the ops name
    them) lies in lists at ``rank * addresses + address``: dicts keyed by the pairs, hashed three
    times per send, were half a 512-rank allreduce's lowering."""

    def __init__(self, prog: ChunkProgram, algo: Algorithm, times: Times) -> None:
        self.prog = prog
        self.algo = algo
        self.times = times
        coll = algo.collective
        n, width = coll.num_ranks, coll.num_addresses
        self.width = width
        self.scratch = _Scratch(n)
        self.partial: list[Slot | None] = [None] * (n * width)
        self.out_slot: dict[int, int] = {}  # rank * width + address -> its first output slot
        self.homes: list[Slot | None] = [None] * (n * width)
        for r in range(n):
            for j, cid in enumerate(coll.inputs[r]):
                if cid is not None:
                    self.partial[r * width + coll.chunks[cid].address] = slot((r, "input", j))
            for j, addr in enumerate(coll.outputs[r]):
                if addr is not None:
                    self.out_slot.setdefault(r * width + addr, j)
        if not prog.inplace:  # each output's home is its slot: found once here, not per first send
            for key, j in self.out_slot.items():
                self.homes[key] = slot((key // width, "output", j))

    def home(self, rank: int, addr: int) -> Slot:
        key = rank * self.width + addr
        found = self.homes[key]
        if found is None:
            j = self.out_slot.get(key)
            if j is not None:  # in place the input slot is the output slot: reduce where the contribution lies
                found = self.partial[key] if self.prog.inplace else slot((rank, "output", j))
            else:
                found = slot((rank, *self.scratch.take(rank)))
            self.homes[key] = found
        return found

    def run(self) -> None:
        """Each step's operations recorded in one call (:meth:`ChunkProgram.record_slots`), then
        each output slot copied from where its partial ended, where that is not the slot."""
        timed = self.times is not None
        landed: dict[int, float] = {}  # rank * width + address -> when its partial was last written
        partial, widths = self.partial, repeat(self.width)
        for step in self.algo.steps:
            order, diverted = _step_order(step.sends, self.width)
            whens = self.times(order) if timed else [None] * len(order)
            if diverted:
                ops = self.diverting(order, diverted, whens)
            else:  # every send reads its source before any send of the step writes it
                data = list(map(partial.__getitem__, map(add, map(mul, map(_SRC, order), widths), map(_CHUNK, order))))
                ops = self.ops(zip(order, data, whens, strict=True))
            if timed:
                keys = map(add, map(mul, map(_DST, order), widths), map(_CHUNK, order))
                landed.update(zip(keys, map(_ARRIVAL, whens), strict=True))
            self.prog.record_slots(ops)
        finals: list[SlotOp] = []
        for key, j in sorted(self.out_slot.items()):  # by (rank, address)
            r, addr = divmod(key, self.width)
            if partial[key] != self.home(r, addr):
                at = landed.get(key, 0.0)
                finals.append(("copy", partial[key], (r, "output", j), None, (at, at) if timed else None))
        self.prog.record_slots(finals)

    def diverting(self, order: list[Send], diverted: set[Send], whens: list) -> list[SlotOp]:
        """The operations of a step where ``diverted`` sends receive into scratch first, applied
        after the step's other sends."""
        out, later = [], []
        for s, when in zip(order, whens, strict=True):
            src = self.partial[s.src * self.width + s.chunk]
            if s in diverted:
                temp = slot((s.dst, *self.scratch.take(s.dst)))
                out.append(("copy", src, temp, None, when))
                later.append((s, temp, when and (when[1], when[1])))
            else:
                out += self.ops([(s, src, when)])
        return out + self.ops(later)

    def ops(self, moves: Iterable[tuple[Send, Slot, tuple[float, float] | None]]) -> list[SlotOp]:
        """Per ``(s, data, time)``: ``s.dst``'s partial of ``s.chunk`` := itself (op) ``data``
        (reduce) or ``data`` (copy)."""
        partial, homes, home, width = self.partial, self.homes, self.home, self.width
        out: list[SlotOp] = []
        for s, data, time in moves:
            key = s.dst * width + s.chunk
            target = homes[key] or home(s.dst, s.chunk)
            held = partial[key]
            partial[key] = target
            if s.op == "copy":
                out.append(("copy", data, target, None, time))
            else:
                out.append(("reduce", data, held, None if held == target else target, time))
        return out


def _step_order(sends: tuple[Send, ...], width: int) -> tuple[list[Send], set[Send]]:
    """Readers of a slot before its writer; sends on a cycle are diverted through scratch
    (``width``: the addresses, so that ``rank * width + address`` keys a rank's partial)."""
    sends = list(sends)
    chunks, widths = list(map(_CHUNK, sends)), repeat(width)
    written = set(map(add, map(mul, map(_DST, sends), widths), chunks))
    if written.isdisjoint(map(add, map(mul, map(_SRC, sends), widths), chunks)):
        return sends, set()  # no send reads what another writes (most steps): their own order
    writers: dict[tuple[int, int], list[int]] = {}
    for j, y in enumerate(sends):
        writers.setdefault((y.dst, y.chunk), []).append(j)
    diverted: set[int] = set()
    while True:
        after: list[list[int]] = [[] for _ in sends]  # i -> sends that must come after i
        indegree = [0] * len(sends)
        for i, x in enumerate(sends):
            for j in writers.get((x.src, x.chunk), ()):
                if j != i and j not in diverted:  # x reads what sends[j] writes: x first
                    after[i].append(j)
                    indegree[j] += 1
        ready = [j for j in range(len(sends)) if indegree[j] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in after[i]:
                indegree[j] -= 1
                if indegree[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) == len(sends):
            return [sends[j] for j in order], {sends[j] for j in diverted}
        diverted.add(min(j for j in range(len(sends)) if indegree[j] > 0))

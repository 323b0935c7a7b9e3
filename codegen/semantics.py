"""What an IR computes: symbolic execution against its collective's postcondition.

Every chunk slot holds a symbol: for a collective that moves data, the id of the input chunk it
holds a copy of; for a reducing one, the address and the set of ranks whose contributions it sums
(a chunk counted twice, or contributions to two addresses mixed, can never be undone and is
marked so). Threadblocks run their steps in order, a step waiting for its dependencies and, if it
receives, for the message on its connection (one FIFO per sender, receiver and channel), with the
runtimes' op semantics (reference/msccl-xml.md, 3.6). Each call the IR is marked for (in place, out
of place) runs once; the first output chunk whose symbol differs from the postcondition is the
answer, naming rank, buffer and chunk.

The collective comes from :func:`synth.collectives.make_collective` with one chunk per rank, and
chunk ``x`` of it stands for chunks ``x*c .. x*c+c-1`` of the IR's ``c`` chunks per rank (how every
collective lays out its chunks; a test holds this against the full model), so the model stays small
however many chunks a rank has. Run it on an IR the static checker passed: it needs a sound
structure (:func:`codegen.check.find_problems`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from codegen.errors import IRCheckError
from codegen.ir import IR, Buffer, Op, OpType
from codegen.limits import SLOTS
from codegen.rules import Problem, chunk_factor
from common.gc_pause import gc_paused
from synth.collectives import COLLECTIVES, ROOTED, Collective, CollectiveError, make_collective

__all__ = ["check_result", "find_wrong_result", "modes"]

_UNWRITTEN = "nothing (never written)"
_GARBAGE = "data nothing wrote (read from a slot before anything was written there)"
_MIXED = (
    "a mix that can never be right (a chunk reduced twice, or chunks of different slots reduced together)"
)


def modes(ir: IR) -> list[bool]:
    """The calls ``ir`` is marked for: ``True`` in place, ``False`` out of place."""
    return [place for place, marked in ((False, ir.outofplace), (True, ir.inplace)) if marked]


def check_result(ir: IR) -> None:
    """Raise :class:`IRCheckError` naming the first wrong output chunk, if any."""
    wrong = find_wrong_result(ir)
    if wrong is not None:
        raise IRCheckError(f"{ir.name}: computes a wrong result: {wrong}")


@gc_paused()
def find_wrong_result(ir: IR) -> Problem | None:
    """The first output chunk (by call, rank, index) that does not hold what the collective
    promises, or a problem that stops the execution; None when every call is right, or for a
    ``custom`` collective (no postcondition to check)."""
    if ir.collective not in COLLECTIVES:
        return None
    SLOTS.check(ir.num_ranks * ir.nchunksperloop, f"{ir.name}: checking what it computes", IRCheckError)
    if ir.collective in ROOTED and ir.root is None:
        return Problem(f'{ir.collective} without a root, and none can be inferred: write root="r" in <algo>')
    try:
        layout = _Layout(ir, make_collective(ir.collective, ir.num_ranks, 1, ir.root))
    except CollectiveError as exc:
        return Problem(str(exc))
    program = _Program(ir)
    for inplace in modes(ir):
        call = "in-place call" if inplace else "out-of-place call"
        if inplace and layout.alias(0) is None:
            return Problem(f"inplace=1, but {ir.collective} has no in-place form")
        run = _Run(ir, program, layout, inplace)
        stuck = run.execute()
        if stuck is not None:
            return Problem(f"{call}: {stuck.message}", stuck.rank, stuck.tb, stuck.step)
        wrong = run.wrong_outputs()
        if wrong:
            rank, j, got, want = wrong[0]
            more = f" (and {len(wrong) - 1} more wrong output chunk(s))" if len(wrong) > 1 else ""
            held = "nothing wrote it" if got == _UNWRITTEN else f"it holds {layout.describe(got)}"
            return Problem(
                f"output chunk {j} ({call}) must hold {layout.describe(want)}, but {held}{more}", rank
            )
    return None


class _Layout:
    """The collective's chunks in the IR's terms: what each input slot holds at the start and
    what each output slot must hold at the end, a rank's buffer at a time."""

    def __init__(self, ir: IR, coll: Collective) -> None:
        self.coll = coll
        self.c = chunk_factor(ir)
        self.inputs = coll.input_chunks * self.c
        self.outputs = coll.output_chunks * self.c
        self.bit: dict[int, int] = {}
        self.full: list[int] = []
        if coll.combining:
            for members in coll.contributions:
                for b, cid in enumerate(sorted(members)):
                    self.bit[cid] = b
                self.full.append((1 << len(members)) - 1)

    def alias(self, rank: int) -> tuple[Buffer, int] | None:
        """For in-place calls: the smaller buffer and where it starts in the larger one."""
        found = self.coll.inplace_alias(rank)
        if found is None:
            return None
        return (Buffer.INPUT if found[0] == "input" else Buffer.OUTPUT), found[1] * self.c

    def initial(self, rank: int) -> list[Any]:
        """What each of ``rank``'s input slots holds at the start."""
        coll, c = self.coll, self.c
        if not coll.combining:
            return [_GARBAGE if cid is None else cid * c + i for cid in coll.inputs[rank] for i in range(c)]
        chunks, bit = coll.chunks, self.bit
        return [
            _GARBAGE if cid is None else (chunks[cid].address * c + i, 1 << bit[cid])
            for cid in coll.inputs[rank]
            for i in range(c)
        ]

    def expected(self, rank: int) -> list[Any]:
        """What each of ``rank``'s output slots must hold at the end (None: anything)."""
        c, full = self.c, self.full
        if not self.coll.combining:
            return [None if a is None else a * c + i for a in self.coll.outputs[rank] for i in range(c)]
        return [
            None if a is None else (a * c + i, full[a]) for a in self.coll.outputs[rank] for i in range(c)
        ]

    def reduce(self, a: Any, b: Any) -> Any:
        if a in (_UNWRITTEN, _GARBAGE) or b in (_UNWRITTEN, _GARBAGE):
            return _GARBAGE
        if not self.coll.combining or a == _MIXED or b == _MIXED or a[0] != b[0] or a[1] & b[1]:
            return _MIXED
        return (a[0], a[1] | b[1])

    def describe(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if not self.coll.combining:
            cid, i = divmod(value, self.c)
            rank = min(self.coll.chunks[cid].pre)
            return (
                f"chunk {value} (rank {rank}'s input chunk {self.coll.inputs[rank].index(cid) * self.c + i})"
            )
        x, mask = value
        members = sorted(self.coll.contributions[x // self.c])
        ranks = [min(self.coll.chunks[cid].pre) for b, cid in enumerate(members) if mask >> b & 1]
        if mask == self.full[x // self.c]:
            return f"chunk {x} reduced over all {len(members)} ranks"
        shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
        return f"chunk {x} reduced over {len(ranks)} of {len(members)} ranks ({shown})"


_BUFFERS = {Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}
_SEND, _RECV, _RCS, _RRS, _RRC, _RRCS, _COPY, _REDUCE, _NOP = range(9)
_CODES = {
    OpType.SEND: _SEND,
    OpType.RECV: _RECV,
    OpType.RECV_COPY_SEND: _RCS,
    OpType.RECV_REDUCE_SEND: _RRS,
    OpType.RECV_REDUCE_COPY: _RRC,
    OpType.RECV_REDUCE_COPY_SEND: _RRCS,
    OpType.COPY: _COPY,
    OpType.REDUCE: _REDUCE,
    OpType.NOP: _NOP,
}
"""Step type -> its code in :class:`_Program`: receiving types are 1..5."""
_WRITERS = frozenset({_RECV, _RCS, _RRC, _RRCS})
_SENDERS = frozenset({_SEND, _RCS, _RRS, _RRCS})


class _Program:
    """The IR's threadblocks in (rank, id) order, read once for every call: per threadblock its
    steps as plain tuples (code, src buffer, src index, dst buffer, dst index, count, dependencies
    as (threadblock, step)), where its rank's threadblock 0 is, and its connections' FIFOs by
    number. Steps are read once per distinct ``Op`` object (the IR shares one among steps written
    alike)."""

    def __init__(self, ir: IR) -> None:
        self.names: list[tuple[int, int]] = []
        self.steps: list[list[tuple]] = []
        self.first: list[int] = []  # per threadblock: the index of its rank's threadblock 0
        self.inbox: list[int] = []  # per threadblock: its connections' numbers
        self.outbox: list[int] = []
        conns: dict[tuple[int | None, int | None, int], int] = {}
        read: dict[int, tuple] = {}
        for g in ir.gpus:
            first = len(self.names)
            for tb in sorted(g.threadblocks, key=lambda t: t.id):
                self.names.append((g.rank, tb.id))
                self.first.append(first)
                self.inbox.append(conns.setdefault((tb.recv, g.rank, tb.channel), len(conns)))
                self.outbox.append(conns.setdefault((g.rank, tb.send, tb.channel), len(conns)))
                self.steps.append([read[id(op)] if id(op) in read else _read(op, read) for op in tb.ops])
        self.connections = len(conns)
        self.width = max((len(s) for s in self.steps), default=0) + 1  # step keys: threadblock * width + step


def _read(op: Op, read: dict[int, tuple]) -> tuple:
    src, dst = op.src, op.dst
    found = read[id(op)] = (
        _CODES[op.type],
        0 if src is None else _BUFFERS[src.buffer],
        0 if src is None else src.index,
        0 if dst is None else _BUFFERS[dst.buffer],
        0 if dst is None else dst.index,
        op.count,
        tuple((d.tb, d.op) for d in op.deps),
    )
    return found


class _Run:
    """One call executed symbolically (see the module docstring): every rank's buffers in one
    list, each buffer at its rank's base (an in-place call's smaller buffer inside the larger)."""

    def __init__(self, ir: IR, program: _Program, layout: _Layout, inplace: bool) -> None:
        self.ir, self.program, self.layout = ir, program, layout
        self.mem: list[Any] = []
        self.bases: list[list[int]] = []  # per rank: where input, output and scratch slot 0 lie in mem
        for g in ir.gpus:
            self.bases.append(
                self._allocate(g.rank, (g.input_chunks, g.output_chunks, g.scratch_chunks), inplace)
            )

    def _allocate(self, rank: int, declared: tuple[int, int, int], inplace: bool) -> list[int]:
        """Lay out ``rank``'s buffers at the end of ``mem``, filled as a call starts."""
        layout, mem = self.layout, self.mem
        alias = layout.alias(rank) if inplace else None
        initial = layout.initial(rank)
        base = [len(mem), len(mem), 0]
        if alias is None or alias[0] is not Buffer.INPUT:  # the input has room of its own
            mem.extend(initial)
            mem.extend([_UNWRITTEN] * (max(declared[0], layout.inputs) - layout.inputs))
        base[1] = len(mem)
        if alias is None or alias[0] is not Buffer.OUTPUT:
            mem.extend([_UNWRITTEN] * max(declared[1], layout.outputs))
        base[2] = len(mem)
        mem.extend([_UNWRITTEN] * declared[2])
        if alias is not None and alias[0] is Buffer.INPUT:  # the input, in place inside the output
            base[0] = base[1] + alias[1]
            mem[base[0] : base[0] + layout.inputs] = initial
        elif alias is not None:  # the output, in place inside the input
            base[1] = base[0] + alias[1]
        return base

    def execute(self) -> Problem | None:
        """Run every threadblock to its end (None), or say where it stops: threadblocks take turns
        from a queue, each running until a step waits for a dependency or a message."""
        prog, mem, reduce = self.program, self.mem, self.layout.reduce
        fifo = [deque() for _ in range(prog.connections)]
        done = [0] * len(prog.steps)
        width = prog.width
        waiting: dict[int, list[int]] = {}  # step key (>= 0) or ~connection -> threadblocks waiting for it
        ready = deque(range(len(prog.steps)))
        while ready:
            t = ready.popleft()
            steps, first, i = prog.steps[t], prog.first[t], done[t]
            base = self.bases[prog.names[t][0]]
            inbox, outbox, out_key = fifo[prog.inbox[t]], fifo[prog.outbox[t]], ~prog.outbox[t]
            while i < len(steps):
                code, sb, si, db, di, count, deps = steps[i]
                blocker = None
                for dtb, dop in deps:
                    if done[first + dtb] <= dop:
                        blocker = (first + dtb) * width + dop
                        break
                if blocker is None and 0 < code < _COPY and not inbox:
                    blocker = ~prog.inbox[t]
                if blocker is not None:
                    waiting.setdefault(blocker, []).append(t)
                    break
                data = inbox.popleft() if 0 < code < _COPY else None
                if code == _SEND:
                    p = base[sb] + si
                    data = mem[p : p + count]
                elif code == _COPY:
                    p = base[sb] + si
                    data, code = mem[p : p + count], _RECV  # written below as a receive's data is
                elif code == _REDUCE:
                    p, q = base[db] + di, base[sb] + si
                    data = [reduce(a, b) for a, b in zip(mem[p : p + count], mem[q : q + count], strict=True)]
                    code = _RECV
                elif code >= _RRS and code != _NOP:  # rrs, rrc, rrcs
                    p = base[sb] + si
                    data = [reduce(a, b) for a, b in zip(data, mem[p : p + count], strict=True)]
                if code in _WRITERS:
                    p = base[db] + di
                    mem[p : p + len(data)] = (
                        [_GARBAGE if v is _UNWRITTEN else v for v in data] if _UNWRITTEN in data else data
                    )
                if waiting:
                    woken = waiting.pop(t * width + i, None)
                    if woken:
                        ready.extend(woken)
                i += 1
                done[t] = i
                if code in _SENDERS:
                    outbox.append(data)
                    if waiting:
                        woken = waiting.pop(out_key, None)
                        if woken:
                            ready.extend(woken)
        stuck = next((t for t, steps in enumerate(prog.steps) if done[t] < len(steps)), None)
        if stuck is not None:
            return Problem(
                "never completes: it waits for a step or a message that never comes",
                *prog.names[stuck],
                done[stuck],
            )
        return None

    def wrong_outputs(self) -> list[tuple[int, int, Any, Any]]:
        """(rank, output chunk, what it holds, what it must hold) of every wrong output chunk."""
        out = []
        n = self.layout.outputs
        for rank in range(self.ir.num_ranks):
            want = self.layout.expected(rank)
            p = self.bases[rank][1]
            got = self.mem[p : p + n]
            if got != want:
                out.extend(
                    (rank, j, g, w)
                    for j, (g, w) in enumerate(zip(got, want, strict=True))
                    if w is not None and g != w
                )
        return out

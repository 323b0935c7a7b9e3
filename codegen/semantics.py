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

from collections import defaultdict, deque
from typing import Any

from codegen.errors import IRCheckError
from codegen.ir import IR, Buffer, Op, OpType, Ref
from codegen.limits import SLOTS
from codegen.rules import Problem, chunk_factor
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
    for inplace in modes(ir):
        call = "in-place call" if inplace else "out-of-place call"
        if inplace and layout.alias(0) is None:
            return Problem(f"inplace=1, but {ir.collective} has no in-place form")
        run = _Run(ir, layout, inplace)
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
    what each output slot must hold at the end."""

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

    def initial(self, rank: int, j: int) -> Any:
        cid = self.coll.inputs[rank][j // self.c]
        if cid is None:
            return _GARBAGE
        i = j % self.c
        if self.coll.combining:
            return (self.coll.chunks[cid].address * self.c + i, 1 << self.bit[cid])
        return cid * self.c + i

    def expected(self, rank: int, j: int) -> Any:
        address = self.coll.outputs[rank][j // self.c]
        if address is None:
            return None
        x = address * self.c + j % self.c
        return (x, self.full[address]) if self.coll.combining else x

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


class _Run:
    """One call executed symbolically (see the module docstring)."""

    def __init__(self, ir: IR, layout: _Layout, inplace: bool) -> None:
        self.ir = ir
        self.layout = layout
        self.aliases = [layout.alias(r) if inplace else None for r in range(ir.num_ranks)]
        self.mem: dict[tuple[int, Buffer, int], Any] = {}

    def slot(self, rank: int, buffer: Buffer, k: int) -> tuple[int, Buffer, int]:
        alias = self.aliases[rank]
        if alias is not None and buffer is alias[0]:
            large = Buffer.OUTPUT if buffer is Buffer.INPUT else Buffer.INPUT
            return rank, large, alias[1] + k
        return rank, buffer, k

    def value(self, key: tuple[int, Buffer, int]) -> Any:
        if key in self.mem:
            return self.mem[key]
        rank, buffer, k = key
        alias = self.aliases[rank]
        if buffer is Buffer.INPUT:
            return self.layout.initial(rank, k)
        if alias is not None and alias[0] is Buffer.INPUT and 0 <= k - alias[1] < self.layout.inputs:
            return self.layout.initial(rank, k - alias[1])  # the input, in place inside the output
        return _UNWRITTEN

    def read(self, rank: int, ref: Ref, count: int) -> list[Any]:
        if count == 1 and self.aliases[rank] is None:  # most steps: one chunk, no alias to follow
            key = (rank, ref.buffer, ref.index)
            return [self.mem[key] if key in self.mem else self.value(key)]
        return [self.value(self.slot(rank, ref.buffer, ref.index + k)) for k in range(count)]

    def write(self, rank: int, ref: Ref, values: list[Any]) -> None:
        for k, v in enumerate(values):
            self.mem[self.slot(rank, ref.buffer, ref.index + k)] = _GARBAGE if v == _UNWRITTEN else v

    def step(self, rank: int, op: Op, received: list[Any] | None) -> list[Any] | None:
        """Apply ``op``; what it sends, if it sends."""
        kind = op.type
        data = received
        if kind.receives and kind.reduces:  # rrs, rrc, rrcs
            data = [
                self.layout.reduce(a, b) for a, b in zip(data, self.read(rank, op.src, op.count), strict=True)
            ]
        elif kind is OpType.SEND:
            data = self.read(rank, op.src, op.count)
        elif kind is OpType.COPY:
            self.write(rank, op.dst, self.read(rank, op.src, op.count))
        elif kind is OpType.REDUCE:
            mine, other = self.read(rank, op.dst, op.count), self.read(rank, op.src, op.count)
            self.write(rank, op.dst, [self.layout.reduce(a, b) for a, b in zip(mine, other, strict=True)])
        if kind.writes_dst and kind.receives:
            self.write(rank, op.dst, data)
        return data if kind.sends else None

    def execute(self) -> Problem | None:
        """Run every threadblock to its end (None), or say where it stops."""
        ir = self.ir
        tbs = {(g.rank, tb.id): tb for g in ir.gpus for tb in g.threadblocks}
        done = dict.fromkeys(tbs, 0)
        fifo: dict[tuple[int, int, int], deque] = defaultdict(deque)
        waiting: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        ready = deque(sorted(tbs))
        while ready:
            key = ready.popleft()
            rank, tb = key[0], tbs[key]
            # the threadblock's connections, named once per turn (half a million steps at 512 ranks)
            inbox, outbox = fifo[(tb.recv, rank, tb.channel)], fifo[(rank, tb.send, tb.channel)]
            ops, i = tb.ops, done[key]
            while i < len(ops):
                op = ops[i]
                blocker = None
                if op.deps:
                    blocker = next(((rank, d.tb, d.op) for d in op.deps if done[(rank, d.tb)] <= d.op), None)
                if blocker is None and op.type.receives and not inbox:
                    blocker = ("conn", tb.recv, rank, tb.channel)
                if blocker is not None:
                    waiting[blocker].append(key)
                    break
                sent = self.step(rank, op, inbox.popleft() if op.type.receives else None)
                if waiting:
                    ready.extend(waiting.pop((rank, tb.id, i), ()))
                i += 1
                done[key] = i
                if sent is not None:
                    outbox.append(sent)
                    if waiting:
                        ready.extend(waiting.pop(("conn", rank, tb.send, tb.channel), ()))
        stuck = next((k for k in sorted(tbs) if done[k] < len(tbs[k].ops)), None)
        if stuck is not None:
            return Problem(
                "never completes: it waits for a step or a message that never comes", *stuck, done[stuck]
            )
        return None

    def wrong_outputs(self) -> list[tuple[int, int, Any, Any]]:
        """(rank, output chunk, what it holds, what it must hold) of every wrong output chunk."""
        out = []
        for rank in range(self.ir.num_ranks):
            for j in range(self.layout.outputs):
                want = self.layout.expected(rank, j)
                if want is None:
                    continue
                got = self.value(self.slot(rank, Buffer.OUTPUT, j))
                if got != want:
                    out.append((rank, j, got, want))
        return out

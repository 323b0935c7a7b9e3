"""Lower a checked IR into an MSCCL++ execution plan (reference/mscclpp-plan-and-torch.md, 4.2, 4.3).

The IR is two-sided (a send on one rank meets a receive on another through NCCL's FIFO); a plan is
one-sided (a rank writes into a peer's memory and tells it so). Push to scratch, the reference's
baseline:

- every IR connection (sender, receiver, channel) that carries data is a *link*: one memory
  channel on each end, declared in the same order on both ranks (the executor pairs the j-th
  channel of A to B with the j-th of B to A);
- every transfer lands in a scratch slot of its own on the receiver (after the IR's own scratch),
  so no write of a launch meets another access of that launch; the sender ``put``s the data there
  and ``signal``s, the receiver ``wait``s and then copies or reduces out of the slot;
- at the start of a launch the receiver ``rlxsignal``s each link it receives on ("my slots are
  free"), and the sender ``rlxwait``s before its first ``put`` (a peer still in the previous
  launch may not have read them yet): per link and direction, signals equal waits in a launch;
- a dependency between threadblocks is a semaphore (``sem_release`` after the producer,
  ``sem_acquire`` before the consumer), one per edge;
- ``nop`` (``__syncthreads``) before a signal or release that publishes earlier work, after a wait
  or acquire that guards later work, and between two data ops of a threadblock whose chunks
  conflict (as the mscclpp DSL's ``auto_sync``);
- a threadblock longer than the executor's op limit continues in another threadblock, handed
  over by a semaphore.

:func:`build_plan` returns the plan as a JSON-ready ``dict``; :mod:`codegen.formats.mscclpp_json`
checks the IR first and prints it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from codegen.errors import CodegenError
from codegen.ir import IR, Op, OpType, Ref, Threadblock
from codegen.rules import Dialect, PlanSpelling, buffer_sizes, chunk_factor, connections
from common.units import format_size
from synth.collectives import ROOTED, make_collective

__all__ = ["Mode", "build_plan", "plan_mode"]

_SIGNALS = frozenset({"signal", "rlxsignal", "sem_release"})
_WAITS = frozenset({"wait", "rlxwait", "sem_acquire"})
_REMOTE_OPS = frozenset({"put", "res"})


@dataclass(frozen=True)
class Mode:
    """Which calls a plan is for: a plan has one ``inplace`` flag (one plan per mode)."""

    inplace: bool


def plan_mode(ir: IR) -> Mode:
    """Out of place where the IR is correct for it, else in place; an IR marked for neither is refused."""
    if not (ir.inplace or ir.outofplace):
        raise CodegenError(f"{ir.name}: marked for no call (inplace=0, outofplace=0): no plan to write")
    return Mode(inplace=not ir.outofplace)


@dataclass(frozen=True)
class _Ref:
    """Chunks ``index .. index+size`` of ``buffer``; on rank ``owner`` (None: the op's own rank)."""

    buffer: str
    index: int
    size: int
    owner: int | None = None


@dataclass(frozen=True)
class _Op:
    """A plan op before threadblock-local numbering: gpu-level channels and semaphores."""

    name: str
    channels: tuple[int, ...] = ()
    semaphores: tuple[int, ...] = ()
    src: tuple[_Ref, ...] = ()
    dst: tuple[_Ref, ...] = ()


_NOP = _Op("nop")


@dataclass
class _Rank:
    """What one rank of the plan declares at gpu level, filled while lowering."""

    peers: list[int] = field(default_factory=list)  # memory channel k connects to peers[k]
    scratch: int = 0
    remote: list[int] = field(default_factory=list)  # remote_buffers[b] is peer remote[b]'s scratch
    semaphores: int = 0

    def semaphore(self) -> int:
        self.semaphores += 1
        return self.semaphores - 1

    def remote_buffer(self, owner: int) -> int:
        if owner not in self.remote:
            self.remote.append(owner)
        return self.remote.index(owner)


class _Lowering:
    """The links, slots and semaphores of one IR, and each threadblock's ops."""

    def __init__(self, ir: IR, d: Dialect, mode: Mode) -> None:
        self.ir, self.d, self.mode = ir, d, mode
        self.ranks = [_Rank(scratch=g.scratch_chunks) for g in ir.gpus]
        self.channel: dict[tuple[int, tuple[int, int, int]], int] = {}  # (rank, link) -> gpu channel index
        self.slots: dict[tuple[int, int, int], list[int]] = {}  # link -> receiver slot of each transfer
        self.releases: dict[tuple[int, int, int], list[int]] = defaultdict(list)  # (rank, tb, op) -> sems
        self.acquires: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        self.alias: list[tuple[str, int] | None] = [None] * ir.num_ranks
        if mode.inplace:
            coll = make_collective(ir.collective, ir.num_ranks, chunk_factor(ir), ir.root)
            self.alias = [coll.inplace_alias(r) for r in range(ir.num_ranks)]
        self._links()
        self._dependencies()

    def _links(self) -> None:
        """Channels in one canonical order on both ends, and a scratch slot per transfer."""
        for link, (stb, rtb) in sorted(connections(self.ir).items()):
            a, b, _ = link
            if stb is None or rtb is None:
                continue
            counts = [op.count for op in self.ir.gpu(a).threadblock(stb).ops if op.type.sends]
            if not counts:
                continue
            for rank, peer in ((a, b), (b, a)):
                self.channel[(rank, link)] = len(self.ranks[rank].peers)
                self.ranks[rank].peers.append(peer)
            slots = []
            for n in counts:
                slots.append(self.ranks[b].scratch)
                self.ranks[b].scratch += n
            self.slots[link] = slots

    def _dependencies(self) -> None:
        """One semaphore per dependency edge between two threadblocks of a rank."""
        for gpu in self.ir.gpus:
            edges = sorted(
                {
                    (dep.tb, dep.op, tb.id, k)
                    for tb in gpu.threadblocks
                    for k, op in enumerate(tb.ops)
                    for dep in op.deps
                }
            )
            for ptb, pk, ctb, ck in edges:
                if ptb == ctb:
                    continue  # program order already holds it
                sem = self.ranks[gpu.rank].semaphore()
                self.releases[(gpu.rank, ptb, pk)].append(sem)
                self.acquires[(gpu.rank, ctb, ck)].append(sem)

    def threadblock(self, rank: int, tb: Threadblock) -> list[_Op]:
        """The ops of one IR threadblock, synchronized (before any split)."""
        recv = self._link(tb.recv, rank, tb.channel)
        send = self._link(rank, tb.send, tb.channel)
        ops: list[_Op] = []
        if recv is not None:
            ops.append(_Op("rlxsignal", channels=(self.channel[(rank, recv)],)))
        if send is not None:
            ops.append(_Op("rlxwait", channels=(self.channel[(rank, send)],)))
        moved = {"sent": 0, "received": 0}
        sems = self.d.plan.max_semaphores_per_op if self.d.plan else 1
        for k, op in enumerate(tb.ops):
            ops.extend(_grouped("sem_acquire", self.acquires.get((rank, tb.id, k), []), sems))
            ops.extend(self._body(rank, op, send, recv, moved))
            ops.extend(_grouped("sem_release", self.releases.get((rank, tb.id, k), []), sems))
        return _synced(ops, lambda ref: self._region(rank, ref))

    def _link(self, src: int | None, dst: int | None, channel: int) -> tuple[int, int, int] | None:
        if src is None or dst is None:
            return None
        link = (src, dst, channel)
        return link if link in self.slots else None

    def _body(self, rank: int, op: Op, send, recv, moved: dict[str, int]) -> list[_Op]:
        """One IR op (reference 4.2); ``moved`` counts the transfers sent and received so far."""
        n = op.count
        out: list[_Op] = []
        slot = dest = None
        if op.type.receives:
            slot = _Ref("s", self.slots[recv][moved["received"]], n)
            moved["received"] += 1
            out += [_Op("wait", channels=(self.channel[(rank, recv)],))]
        if op.type.sends:
            dest = _Ref("s", self.slots[send][moved["sent"]], n, owner=send[1])
            moved["sent"] += 1
        kind = op.type
        if kind is OpType.SEND:
            out.append(_Op("put", src=(_local(op.src, n),), dst=(dest,)))
        elif kind is OpType.RECV:
            out.append(_Op("copy", src=(slot,), dst=(_local(op.dst, n),)))
        elif kind is OpType.RECV_COPY_SEND:
            out += [_Op("copy", src=(slot,), dst=(_local(op.dst, n),)), _Op("put", src=(slot,), dst=(dest,))]
        elif kind is OpType.RECV_REDUCE_SEND:
            out.append(_Op("res", src=(_local(op.src, n), slot), dst=(slot, dest)))
        elif kind is OpType.RECV_REDUCE_COPY:
            out.append(_Op("re", src=(_local(op.src, n), slot), dst=(_local(op.dst, n),)))
        elif kind is OpType.RECV_REDUCE_COPY_SEND:
            out.append(_Op("res", src=(_local(op.src, n), slot), dst=(_local(op.dst, n), dest)))
        elif kind is OpType.COPY:
            out.append(_Op("copy", src=(_local(op.src, n),), dst=(_local(op.dst, n),)))
        elif kind is OpType.REDUCE:
            out.append(_Op("re", src=(_local(op.dst, n), _local(op.src, n)), dst=(_local(op.dst, n),)))
        if op.type.sends:
            out.append(_Op("signal", channels=(self.channel[(rank, send)],)))
        return out

    def _region(self, rank: int, ref: _Ref) -> tuple[int, str, int]:
        """(owner, buffer, first chunk) with an in-place call's smaller buffer inside the larger one."""
        owner = rank if ref.owner is None else ref.owner
        alias = self.alias[owner]
        small = {"input": "i", "output": "o"}.get(alias[0]) if alias else None
        if small is not None and ref.buffer == small:
            return owner, "o" if small == "i" else "i", alias[1] + ref.index
        return owner, ref.buffer, ref.index


def _local(ref: Ref | None, n: int) -> _Ref:
    if ref is None:  # the checker guarantees every operand the op type uses
        raise CodegenError("an IR op without the operand its type uses reached the MSCCL++ writer")
    return _Ref(ref.buffer.value, ref.index, n)


def _grouped(name: str, sems: list[int], per_op: int) -> list[_Op]:
    return [_Op(name, semaphores=tuple(sems[i : i + per_op])) for i in range(0, len(sems), per_op)]


def _kind(op: _Op) -> str:
    if op.name == "nop":
        return "nop"
    if op.name in _SIGNALS:
        return "signal"
    return "wait" if op.name in _WAITS else "data"


def _synced(ops: list[_Op], region) -> list[_Op]:
    """``ops`` with a ``nop`` wherever threads of the block must meet: before a signal or release
    that follows other work, before work that follows a wait or acquire, and between data ops whose
    chunks conflict (one writes what the other reads or writes) since the last ``nop``."""
    out: list[_Op] = []
    kinds: set[str] = set()
    touched: list[tuple[tuple[int, str], int, int, bool]] = []
    for op in ops:
        kind = _kind(op)
        accesses = [(region(r), r.size, False) for r in op.src] + [(region(r), r.size, True) for r in op.dst]
        spans = [((o, b), i, i + n, w) for (o, b, i), n, w in accesses]
        need = (
            (kind == "signal" and kinds - {"signal"})
            or (kind == "data" and "wait" in kinds)
            or (kind == "data" and _conflicts(spans, touched))
        )
        if need:
            out.append(_NOP)
            kinds, touched = set(), []
        out.append(op)
        if kind == "nop":
            kinds, touched = set(), []
            continue
        kinds.add(kind)
        touched.extend(spans)
    return out


def _conflicts(spans: list, touched: list) -> bool:
    return any(
        key == k2 and lo < hi2 and lo2 < hi and (w or w2)
        for key, lo, hi, w in spans
        for k2, lo2, hi2, w2 in touched
    )


def _split(ops: list[_Op], limit: int, handover) -> list[list[_Op]]:
    """``ops`` in pieces of at most ``limit`` ops, each handing over to the next through a new
    semaphore (``handover()`` allocates one): ``nop, sem_release`` ends a piece, ``sem_acquire,
    nop`` starts the next."""
    if len(ops) <= limit:
        return [ops]
    if limit < 5:
        raise CodegenError(f"an MSCCL++ threadblock of {limit} ops cannot hand over to another")
    pieces: list[list[_Op]] = []
    rest = ops
    start: list[_Op] = []
    while len(start) + len(rest) > limit:
        take = limit - len(start) - 2
        sem = handover()
        pieces.append([*start, *rest[:take], _NOP, _Op("sem_release", semaphores=(sem,))])
        rest = rest[take:]
        start = [_Op("sem_acquire", semaphores=(sem,)), _NOP]
    pieces.append([*start, *rest])
    return pieces


def build_plan(ir: IR, d: Dialect, mode: Mode, name: str) -> dict:
    """The plan of a checked ``ir`` for the runtime ``d`` (its ``plan`` spelling), as a dict in the
    key order mscclpp's own writer uses."""
    spelling = d.plan
    if spelling is None:
        raise CodegenError(f"the {d.name} runtime reads no MSCCL++ plan")
    low = _Lowering(ir, d, mode)
    per_rank = []
    for gpu in ir.gpus:
        state = low.ranks[gpu.rank]
        tbs: list[list[_Op]] = []
        for tb in sorted(gpu.threadblocks, key=lambda t: t.id):
            tbs.extend(_split(low.threadblock(gpu.rank, tb), spelling.max_ops, state.semaphore))
        if len(tbs) > d.max_threadblocks:
            raise CodegenError(
                f"{ir.name}: rank {gpu.rank} needs {len(tbs)} threadblocks in an MSCCL++ plan (its threadblocks "
                f"of more than {spelling.max_ops} ops continue in others): {d.runtime} runs at most "
                f"{d.max_threadblocks}, all resident at once (compile with fewer --channels or --instances)"
            )
        per_rank.append(tbs)
    i_chunks, o_chunks = buffer_sizes(ir.collective, ir.num_ranks, ir.nchunksperloop)
    largest = max(i_chunks, o_chunks, *(r.scratch for r in low.ranks))
    window = _window(ir, spelling, largest, o_chunks if ir.collective == "allgather" else i_chunks)
    gpus = [
        _gpu(g.rank, i_chunks, o_chunks, low.ranks[g.rank], tbs)
        for g, tbs in zip(ir.gpus, per_rank, strict=True)
    ]
    return {
        "name": name,
        "collective": d.xml_collective(ir.collective),
        "protocol": ir.protocol,
        "inplace": mode.inplace,
        "reuse_resources": False,
        "num_threads_per_block": spelling.threads_per_block,
        "use_double_scratch_buffer": False,
        "buffer_alignment": spelling.buffer_alignment,
        "min_message_size": window[0],
        "max_message_size": window[1],
        "xccl": {
            "format": f"mscclpp execution plan, format of {spelling.version}",
            "loads_on": list(spelling.loads_on),
            "root": ir.root if ir.collective in ROOTED else None,
        },
        "gpus": gpus,
    }


def _window(ir: IR, spelling: PlanSpelling, largest: int, compared: int) -> tuple[int, int]:
    """(min, max) message size of the plan: the IR's window, and no size whose chunks lie past the
    32-bit byte offsets of the executor (the largest buffer, scratch included, of ``largest`` chunks;
    the executor compares a buffer of ``compared`` chunks)."""
    align = spelling.buffer_alignment
    chunk = (spelling.max_offset_bytes - 1) // largest // align * align
    cap = chunk * compared
    if ir.max_bytes > cap or ir.min_bytes > cap:
        asked = "maxBytes" if ir.max_bytes > cap else "minBytes"
        value = max(ir.max_bytes, ir.min_bytes)
        raise CodegenError(
            f"{ir.name}: {asked} {value} ({format_size(value)}): an MSCCL++ plan of this schedule takes at most "
            f"{cap} bytes ({format_size(cap)}): its largest buffer holds {largest} chunks, and the executor's byte "
            "offsets are 32-bit (give a smaller --max-bytes)"
        )
    return ir.min_bytes, ir.max_bytes or cap


def _gpu(rank: int, i_chunks: int, o_chunks: int, state: _Rank, tbs: list[list[_Op]]) -> dict:
    threadblocks = [_threadblock(k, ops, state) for k, ops in enumerate(tbs)]  # numbers remote buffers
    return {
        "id": rank,
        "input_chunks": i_chunks,
        "output_chunks": o_chunks,
        "scratch_chunks": state.scratch,
        "channels": [{"channel_type": "memory", "connected_to": state.peers}] if state.peers else [],
        "remote_buffers": [
            {"rank": owner, "type": "s", "access_channel_types": ["memory"]} for owner in state.remote
        ],
        "semaphores": [{"init_value": 0} for _ in range(state.semaphores)],
        "threadblocks": threadblocks,
    }


def _threadblock(tb_id: int, ops: list[_Op], state: _Rank) -> dict:
    """Threadblock-local numbering: the channels its ops name, and the remote buffers its ops write."""
    channels: list[int] = []
    buffers: list[int] = []
    for op in ops:
        channels.extend(c for c in op.channels if c not in channels)
        for ref in op.dst:
            if ref.owner is not None and state.remote_buffer(ref.owner) not in buffers:
                buffers.append(state.remote_buffer(ref.owner))
    return {
        "id": tb_id,
        "channels": [{"channel_type": "memory", "channel_ids": channels}] if channels else [],
        "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": buffers}]
        if buffers
        else [],
        "ops": [_op(op, channels, buffers, state) for op in ops],
    }


def _op(op: _Op, channels: list[int], buffers: list[int], state: _Rank) -> dict:
    doc: dict = {"name": op.name}
    if op.channels:
        doc["channel_ids"] = [channels.index(c) for c in op.channels]
    if op.semaphores:
        doc["semaphore_ids"] = list(op.semaphores)
    if op.src:
        doc["src_buff"] = [_ref(r, buffers, state) for r in op.src]
    if op.dst:
        doc["dst_buff"] = [_ref(r, buffers, state) for r in op.dst]
    if op.channels or op.name in _REMOTE_OPS:
        doc["channel_type"] = "memory"
    return doc


def _ref(ref: _Ref, buffers: list[int], state: _Rank) -> dict:
    if ref.owner is None:
        return {"type": ref.buffer, "index": ref.index, "size": ref.size}
    return {"buffer_id": buffers.index(state.remote_buffer(ref.owner)), "index": ref.index, "size": ref.size}

"""What every IR must satisfy, whichever runtime runs it.

A known protocol; ``nchunksperloop`` at least 1 and a multiple of the ranks where each rank has a
share of the larger buffer; a root among the ranks; gpus 0..n-1 in order; input and output no
larger than ``nchunksperloop`` makes them; threadblock ids 0..k-1; peers that are other ranks; at
most one threadblock per (channel, peer) connection and direction; channels >= 0; ops that fit
their threadblock's peers, move at least one chunk, have the operands they use, inside their
buffers; dependencies on steps that exist; and, once final, ``has_dep`` on every awaited step.
The static checker and the runtime loader both ask here; the loader passes the buffers the
runtime really has (the collective's) where the checker reads the IR's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

from codegen.ir import IR, Buffer, Gpu, Op, OpType, Ref, Threadblock
from codegen.protocols import PROTOCOLS
from codegen.rules.problem import Problem
from common.memo import Marks
from synth.collectives import ROOTED

__all__ = [
    "Sizes",
    "buffer_sizes",
    "chunk_factor",
    "collective_problems",
    "connections",
    "declared_sizes",
    "header_problems",
    "ranks_in_order",
    "structure_problems",
    "threadblock_problems",
]

Sizes = Sequence[Mapping[Buffer, int]]
"""Per rank, the chunks each buffer holds."""

_SMALL_INPUT = frozenset({"allgather", "gather"})
_SMALL_OUTPUT = frozenset({"reducescatter", "scatter"})
_PER_RANK = _SMALL_INPUT | _SMALL_OUTPUT | {"alltoall"}
"""Collectives whose larger buffer holds a share per rank: ``nchunksperloop`` is ranks x chunks per rank."""
_KNOWN = _PER_RANK | {"allreduce", "broadcast", "reduce"}


def chunk_factor(ir: IR) -> int:
    """Chunks per rank of the collective: ``nchunksperloop`` over the ranks for collectives whose
    larger buffer holds every rank's share (allgather, reducescatter, alltoall, gather, scatter)."""
    if ir.collective in _PER_RANK:
        return ir.nchunksperloop // ir.num_ranks
    return ir.nchunksperloop


def buffer_sizes(collective: str, num_ranks: int, nchunksperloop: int) -> tuple[int, int] | None:
    """(input chunks, output chunks) of a known collective, else None."""
    if collective not in _KNOWN:
        return None
    small = nchunksperloop // num_ranks
    return (
        small if collective in _SMALL_INPUT else nchunksperloop,
        small if collective in _SMALL_OUTPUT else nchunksperloop,
    )


def declared_sizes(ir: IR) -> tuple[dict[Buffer, int], ...]:
    """The buffers each rank's ``<gpu>`` declares."""
    return tuple(
        {Buffer.INPUT: g.input_chunks, Buffer.OUTPUT: g.output_chunks, Buffer.SCRATCH: g.scratch_chunks}
        for g in ir.gpus
    )


def structure_problems(ir: IR, sizes: Sizes | None = None, final: bool = True) -> list[Problem]:
    """Every universal rule ``ir`` breaks (the checker's set, before the flow of its connections);
    ``sizes`` the buffers its operands must lie in (default: those the IR declares)."""
    out = header_problems(ir)
    if not ranks_in_order(ir):
        return out
    out.extend(collective_problems(ir))
    if _chunking_problem(ir) is None:
        out.extend(_declared_size_problems(ir))
    out.extend(threadblock_problems(ir, sizes, final))
    return out


def ranks_in_order(ir: IR) -> bool:
    """Whether ``gpus`` are ranks 0..n-1 in order (nothing else can be judged without it)."""
    return len(ir.gpus) == ir.num_ranks and all(g.rank == r for r, g in enumerate(ir.gpus))


def header_problems(ir: IR) -> list[Problem]:
    """A known protocol, and the gpus 0..n-1 in order (nothing else can be read without them)."""
    out = []
    if ir.protocol not in PROTOCOLS:
        out.append(Problem(f"protocol {ir.protocol!r}: expected one of {', '.join(PROTOCOLS)}"))
    if not ranks_in_order(ir):
        ranks = [g.rank for g in ir.gpus]
        out.append(Problem(f"gpus: expected ranks 0..{ir.num_ranks - 1} in order, got {ranks}"))
    return out


def collective_problems(ir: IR) -> list[Problem]:
    """``nchunksperloop`` at least 1 and a multiple of the ranks where every rank has a share of
    the larger buffer, and the root of a rooted collective among the ranks."""
    out = [p for p in (_chunking_problem(ir),) if p is not None]
    if ir.collective in ROOTED and ir.root is not None and not 0 <= ir.root < ir.num_ranks:
        out.append(Problem(f"root {ir.root}: expected a rank in 0..{ir.num_ranks - 1}"))
    return out


def _chunking_problem(ir: IR) -> Problem | None:
    if ir.nchunksperloop < 1:
        return Problem(f"nchunksperloop must be >= 1, got {ir.nchunksperloop}")
    c = chunk_factor(ir)
    if ir.collective in _KNOWN and (
        c < 1 or (c != ir.nchunksperloop and c * ir.num_ranks != ir.nchunksperloop)
    ):
        return Problem(
            f"nchunksperloop={ir.nchunksperloop}: {ir.collective} on {ir.num_ranks} ranks needs a "
            f"multiple of {ir.num_ranks} (each rank's share of the larger buffer)"
        )
    return None


def _declared_size_problems(ir: IR) -> list[Problem]:
    """Input and output no larger than ``nchunksperloop`` makes them: a buffer said to hold more
    chunks than the user's buffer has lets steps run past its end."""
    sizes = buffer_sizes(ir.collective, ir.num_ranks, ir.nchunksperloop)
    if sizes is None:
        return []
    return [
        Problem(
            f"{what}={declared}, but nchunksperloop={ir.nchunksperloop} makes {ir.collective}'s "
            f"{buffer.long_name} {real} chunk(s): steps past them run outside the user's buffer",
            gpu.rank,
        )
        for gpu in ir.gpus
        for what, declared, real, buffer in (
            ("i_chunks", gpu.input_chunks, sizes[0], Buffer.INPUT),
            ("o_chunks", gpu.output_chunks, sizes[1], Buffer.OUTPUT),
        )
        if declared > real
    ]


def threadblock_problems(ir: IR, sizes: Sizes | None = None, final: bool = False) -> list[Problem]:
    """Threadblock ids, peers, connections, channels, and every op against its threadblock and
    the buffers (``sizes``, default the declared ones) of its rank; ``final``: ``has_dep`` on every
    step another threadblock waits for (the runtime publishes progress only after such steps).
    An IR found sound before for the same buffers, and ``final`` or not then, is sound again."""
    sizes = declared_sizes(ir) if sizes is None else sizes
    held = tuple(tuple(m.items()) for m in sizes)
    if _SOUND.holds(ir, (held, True)) or _SOUND.holds(ir, (held, final)):
        return []
    out = _threadblock_problems(ir, sizes, final)
    if not out:
        _SOUND.add(ir, (held, final))
    return out


_SOUND = Marks()
"""The IRs :func:`threadblock_problems` found sound, each with the buffers and ``final`` it judged
them for (``final`` judges all that a judgement without it does, and more): the compiler checks the
IR it keeps, and the IR simulator loads that IR again (over a second each at 512 ranks)."""


def _threadblock_problems(ir: IR, sizes: Sizes, final: bool) -> list[Problem]:
    """:func:`threadblock_problems`, judged."""
    suspects = _suspects(ir, sizes, final)  # None: every step is judged
    out = []
    for at, gpu in enumerate(ir.gpus):
        ids = sorted(tb.id for tb in gpu.threadblocks)
        if ids != list(range(len(ids))):
            missing = sorted(set(range(len(ids))) - set(ids))
            out.append(Problem(f"threadblock ids must be 0..{len(ids) - 1}, missing {missing}", gpu.rank))
            continue
        owners: dict[tuple[int, str, int], int] = {}
        steps = {tb.id: len(tb.ops) for tb in gpu.threadblocks}
        awaited = _awaited(gpu) if final and (suspects is None or at in suspects) else {}
        for tb in sorted(gpu.threadblocks, key=lambda t: t.id):
            out.extend(_peer_problems(ir, gpu.rank, tb, owners))
            if tb.channel < 0:
                out.append(Problem(f"channel {tb.channel}: expected >= 0", gpu.rank, tb.id))
            held = sizes[gpu.rank]
            waited = awaited.get(tb.id, {})
            judged = range(len(tb.ops)) if suspects is None else suspects.get(at, {}).get(tb.id, ())
            for k in judged:  # the place (rank, tb, k) made only for a problem
                op = tb.ops[k]
                if not _fine(tb, op, held, steps):
                    out.extend(_op_problems(tb, op, held, steps, (gpu.rank, tb.id, k)))
                if k in waited and not op.has_dep:
                    (u, v), at_ = waited[k], (gpu.rank, tb.id, k)
                    out.append(
                        Problem(f"threadblock {u} step {v} waits for this step, but hasdep is not set", *at_)
                    )
    return out


def _suspects(ir: IR, sizes: Sizes, final: bool) -> dict[int, dict[int, list[int]]] | None:
    """Gpu (its place in ``ir.gpus``) -> threadblock id -> the steps that may break an op rule
    (:func:`_fine` says which do) or, ``final``, lack the ``has_dep`` another step awaits: every
    step judged at once by NumPy, each distinct ``Op`` object read once. Worth it where steps share
    their ops (an IR read from XML: half a million steps are some 30,000 ops at 512 ranks; a
    compiled IR: a third of its steps are ops of their own, of a few thousand shapes); None where
    nearly every step has its own, whose steps :func:`_fine` judges about as fast."""
    import numpy as np  # not loaded by building the CLI's parser

    tbs = [(at, gpu.rank, tb) for at, gpu in enumerate(ir.gpus) for tb in gpu.threadblocks]
    ops = list(chain.from_iterable(tb.ops for _, _, tb in tbs))
    if not ops:
        return {}
    ids = np.fromiter(map(id, ops), np.int64, len(ops))
    if 5 * _distinct_estimate(ids) > 4 * len(ops):
        return None
    lens = np.fromiter((len(tb.ops) for _, _, tb in tbs), np.int64, len(tbs))
    tb_of = np.repeat(np.arange(len(tbs)), lens)
    first = np.concatenate(([0], np.cumsum(lens)))
    table = _OpTable(ops, ids)
    row = table.which
    no_peer = np.array([(tb.send is None, tb.recv is None) for _, _, tb in tbs], dtype=bool).reshape(-1, 2)
    bad = (table.sends[row] & no_peer[tb_of, 0]) | (table.receives[row] & no_peer[tb_of, 1]) | table.bad[row]
    per_gpu = [
        [_clamp(sizes[g.rank][b]) for b in (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH)] for g in ir.gpus
    ]
    gpu_of = np.fromiter((at for at, _, _ in tbs), np.int64, len(tbs))
    held = np.array(per_gpu, np.int64).reshape(-1, 3)[gpu_of[tb_of]]
    for buf, lo, hi in (
        (table.src_buf, table.src_lo, table.src_hi),
        (table.dst_buf, table.dst_lo, table.dst_hi),
    ):
        b = buf[row]
        bad |= (b >= 0) & ((lo[row] < 0) | (hi[row] > held[np.arange(len(ops)), np.maximum(b, 0)]))
    _judge_deps(bad, table, tbs, first, tb_of, final)
    out: dict[int, dict[int, list[int]]] = {}
    for i in np.flatnonzero(bad).tolist():
        at, _, tb = tbs[tb_of[i]]
        out.setdefault(at, {}).setdefault(tb.id, []).append(i - int(first[tb_of[i]]))
    return out


def _distinct_estimate(ids: Any) -> int:
    """About how many distinct objects the ids ``ids`` name (a few percent under, at most): each id
    marks a slot of 4 million by its bits past the 16-byte alignment; a set of half a million ids
    took longer than judging a compiled IR's steps in bulk saves."""
    import numpy as np

    slots = np.zeros(1 << 22, dtype=bool)
    slots[(ids >> 4) & ((1 << 22) - 1)] = True
    return int(np.count_nonzero(slots))


def _judge_deps(
    bad: Any, table: _OpTable, tbs: list[tuple[int, int, Threadblock]], first: Any, tb_of: Any, final: bool
) -> None:
    """Mark in ``bad`` the steps with a dependency on no step of their rank and, ``final``, the
    steps some step awaits that lack ``has_dep``."""
    import numpy as np

    from topologies.numeric import ranges  # NumPy: loaded when an IR is judged, not with the CLI

    n = table.ndeps[table.which]  # per step, its dependencies
    at = np.repeat(np.arange(n.size), n)  # per dependency, the step waiting
    picked = ranges(table.dep_first[table.which], n)
    dep_tb, dep_op = table.dep_tb[picked], table.dep_op[picked]
    gpu = np.fromiter((a for a, _, _ in tbs), np.int64, len(tbs))
    ids = np.fromiter((tb.id for _, _, tb in tbs), np.int64, len(tbs))
    scale = int(ids.max(initial=0)) + 1
    keys = gpu * scale + ids
    order = np.argsort(keys, kind="stable")
    wanted = gpu[tb_of[at]] * scale + np.clip(dep_tb, 0, scale - 1)
    found = order[np.maximum(np.searchsorted(keys[order], wanted, side="right") - 1, 0)]
    exists = (dep_tb >= 0) & (dep_tb < scale) & (gpu[found] == gpu[tb_of[at]]) & (ids[found] == dep_tb)
    ok = exists & (dep_op >= 0) & (dep_op < first[found + 1] - first[found])
    bad[at[~ok]] = True
    if final:
        target = first[found[ok]] + dep_op[ok]
        bad[target[~table.has_dep[table.which[target]]]] = True


def _awaited(gpu: Gpu) -> dict[int, dict[int, tuple[int, int]]]:
    """Threadblock -> step a dependency names -> (threadblock, step) of one that waits for it
    (the last one, in threadblock and step order)."""
    found: dict[int, dict[int, tuple[int, int]]] = {}
    for tb in gpu.threadblocks:
        for k, op in enumerate(tb.ops):
            for d in op.deps:
                found.setdefault(d.tb, {})[d.op] = (tb.id, k)
    return found


def _peer_problems(
    ir: IR, rank: int, tb: Threadblock, owners: dict[tuple[int, str, int], int]
) -> list[Problem]:
    """Peers that are other ranks, and one threadblock per (channel, peer) and direction
    (``owners``: the threadblock that took each so far)."""
    out = []
    for what, peer in (("send", tb.send), ("recv", tb.recv)):
        if peer is None:
            continue
        if not 0 <= peer < ir.num_ranks or peer == rank:
            out.append(
                Problem(f"{what} peer {peer}: expected another rank in 0..{ir.num_ranks - 1}", rank, tb.id)
            )
            continue
        other = owners.setdefault((tb.channel, what, peer), tb.id)
        if other != tb.id:
            verb = "sends to" if what == "send" else "receives from"
            moves = (lambda t: t.sends) if what == "send" else (lambda t: t.receives)
            step = next((k for k, op in enumerate(tb.ops) if moves(op.type)), 0)
            out.append(
                Problem(
                    f"{verb} rank {peer} on channel {tb.channel}, as threadblock {other} does, so it shares "
                    f"its connection with rank {peer} on channel {tb.channel}: one threadblock per "
                    "(channel, peer) connection and direction",
                    rank,
                    tb.id,
                    step,
                )
            )
    return out


def _op_problems(
    tb: Threadblock, op: Op, sizes: Mapping[Buffer, int], steps: Mapping[int, int], at: tuple[int, int, int]
) -> list[Problem]:
    """One op against its threadblock's peers, its rank's buffers and its rank's threadblocks
    (``steps``: id -> how many steps)."""
    out = []
    if op.type.sends and tb.send is None:
        out.append(Problem(f"{op.type.value} sends but the threadblock has no send peer", *at))
    if op.type.receives and tb.recv is None:
        out.append(Problem(f"{op.type.value} receives but the threadblock has no receive peer", *at))
    if op.type is not OpType.NOP and op.count < 1:
        out.append(Problem(f"count {op.count}: expected >= 1", *at))
    for name, ref, used, verb in (
        ("src", op.src, op.type.reads_src, "read"),
        ("dst", op.dst, op.type.writes_dst, "write"),
    ):
        if ref is None:
            if used:
                out.append(
                    Problem(f"{name}: expected a buffer location, got none ({op.type.value} uses one)", *at)
                )
            continue
        problem = _outside(name, ref, max(op.count, 1), sizes[ref.buffer], verb)
        if problem:
            out.append(Problem(problem, *at))
    out.extend(
        Problem(f"depends on threadblock {d.tb} step {d.op}: no such op on rank {at[0]}", *at)
        for d in op.deps
        if not 0 <= d.op < steps.get(d.tb, 0)
    )
    return out


def _fine(tb: Threadblock, op: Op, sizes: Mapping[Buffer, int], steps: Mapping[int, int]) -> bool:
    """Whether :func:`_op_problems` finds nothing, by its tests without their messages (the
    static check and every program build judge each op: 1.5 million at 512 ranks)."""
    kind, count = op.type, op.count
    if (kind.sends and tb.send is None) or (kind.receives and tb.recv is None):
        return False
    if count < 1 and kind is not OpType.NOP:
        return False
    span = count if count > 1 else 1
    for ref, used in ((op.src, kind.reads_src), (op.dst, kind.writes_dst)):
        if ref is None:
            if used:
                return False
        elif ref.index < 0 or ref.index + span > sizes[ref.buffer]:
            return False
    for d in op.deps:  # noqa: SIM110 - none or one, mostly: the generator all() takes cost more
        if not 0 <= d.op < steps.get(d.tb, 0):
            return False
    return True


def _outside(name: str, ref: Ref, count: int, size: int, verb: str) -> str | None:
    if ref.index >= 0 and ref.index + count <= size:
        return None
    last = ref.index + count - 1
    return (
        f"{name} {ref.buffer.value}[{ref.index}..{last}] is outside the buffer of {size} chunk(s): the step "
        f"would {verb} outside the {ref.buffer.long_name} buffer"
    )


def connections(ir: IR) -> dict[tuple[int, int, int], tuple[int | None, int | None]]:
    """(sender, receiver, channel) -> (sending threadblock, receiving threadblock)."""
    ends: dict[tuple[int, int, int], list[int | None]] = defaultdict(lambda: [None, None])
    for gpu in ir.gpus:
        for tb in gpu.threadblocks:
            if tb.send is not None:
                ends[(gpu.rank, tb.send, tb.channel)][0] = tb.id
            if tb.recv is not None:
                ends[(tb.recv, gpu.rank, tb.channel)][1] = tb.id
    return {k: (v[0], v[1]) for k, v in ends.items()}


class _OpTable:
    """Per distinct op object of ``ops`` (``which``: each op's row), what :func:`_fine` asks of it:
    whether it sends or receives (needing that peer), a bad count or a used operand missing
    (``bad``), each operand's buffer (-1: none; 0, 1, 2: input, output, scratch) and the chunks it
    spans, its dependencies (``ndeps`` of them from ``dep_first`` in ``dep_tb``, ``dep_op``) and
    ``has_dep``. The ops alike but for their dependencies and mark (a compiled IR's ops with a
    dependency are an object each: a third of its steps) share their shape's row, read once per
    shape; the dependencies and marks are read through ``map``, in C."""

    def __init__(self, ops: list[Op], ids: Any) -> None:
        import numpy as np

        _, at, self.which = np.unique(ids, return_index=True, return_inverse=True)
        distinct = [ops[i] for i in at.tolist()]
        types, srcs, dsts = (map(id, map(get, distinct)) for get in (_TYPE, _SRC, _DST))
        keys = list(zip(types, srcs, dsts, map(_COUNT, distinct), strict=True))  # by ids: alive in ops
        shapes = dict(zip(keys, distinct, strict=True))  # one op of each shape
        number = {key: k for k, key in enumerate(shapes)}
        shape = np.fromiter(map(number.__getitem__, keys), np.int64, len(keys))
        rows = np.array([_row(op) for op in shapes.values()], np.int64).reshape(-1, 9)[shape]
        self.sends, self.receives, self.bad = rows[:, 0] > 0, rows[:, 1] > 0, rows[:, 2] > 0
        self.src_buf, self.src_lo, self.src_hi = rows[:, 3], rows[:, 4], rows[:, 5]
        self.dst_buf, self.dst_lo, self.dst_hi = rows[:, 6], rows[:, 7], rows[:, 8]
        self.ndeps = np.fromiter(map(len, map(_DEPS, distinct)), np.int64, len(distinct))
        self.has_dep = np.fromiter(map(_HAS_DEP, distinct), bool, len(distinct))
        self.dep_first = np.cumsum(self.ndeps) - self.ndeps
        deps = list(chain.from_iterable(map(_DEPS, distinct)))
        self.dep_tb, self.dep_op = _ints(list(map(_TB, deps))), _ints(list(map(_OP, deps)))


def _row(op: Op) -> tuple[Any, ...]:
    """What :func:`_fine` asks of ``op`` but its dependencies and mark."""
    kind, span = op.type, max(op.count, 1)
    bad = op.count < 1 and kind is not OpType.NOP
    operands = []
    for ref, used in ((op.src, kind.reads_src), (op.dst, kind.writes_dst)):
        if ref is None:
            bad = bad or used
            operands += (-1, 0, 0)
        else:
            b = ref.buffer  # by identity: a StrEnum's hash is a Python call
            code = 0 if b is Buffer.INPUT else 1 if b is Buffer.OUTPUT else 2
            operands += (code, _clamp(ref.index), _clamp(ref.index + span))
    return (kind.sends, kind.receives, bad, *operands)


def _ints(values: list[int]) -> Any:
    """``values`` as an int64 array, each :func:`_clamp`-ed (one pass in C where none needs it)."""
    import numpy as np

    if values and not -_LARGE <= min(values) <= max(values) <= _LARGE:
        values = [_clamp(v) for v in values]
    return np.array(values, np.int64).reshape(len(values))


_TYPE, _SRC, _DST, _COUNT = attrgetter("type"), attrgetter("src"), attrgetter("dst"), attrgetter("count")
_DEPS, _HAS_DEP, _TB, _OP = attrgetter("deps"), attrgetter("has_dep"), attrgetter("tb"), attrgetter("op")


_LARGE = 1 << 62


def _clamp(value: int) -> int:
    """``value`` within int64, where no comparison with a size or a step count changes."""
    return -_LARGE if value < -_LARGE else _LARGE if value > _LARGE else value

"""The static checker: prove what the runtimes need before an IR is written or run.

Universal rules: threadblock ids 0..k-1, peers that exist, at most one threadblock per (channel,
peer) and direction, ops that fit their threadblock's peers, offsets inside the buffers, buffers
no larger than ``nchunksperloop`` makes them (and ``nchunksperloop`` a multiple of the ranks where
each rank has a share), dependencies that name existing steps; on every connection (sender,
receiver, channel) the sender's counts equal the receiver's, in order; no cycle through
dependencies, program order and connection order together (a cycle is a deadlock), also once every
connection holds only as many calls as NCCL's FIFO does (``codegen.protocols``) and every step moves
one call per chunk, as at large sizes. ``final`` adds: every awaited step has ``has_dep``. A
dialect adds the rules of its runtime (:mod:`codegen.dialects`, which owns them all), and an XML
file's facts the rules on what the file says beyond its IR. Every problem names rank, threadblock
and step. What the schedule computes is :mod:`codegen.semantics`'s to check.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING

from codegen.dialects import Dialect, dialect_problems, file_problems, get_dialect
from codegen.errors import IRCheckError
from codegen.ir import IR, Buffer, Gpu, OpType
from codegen.limits import TRANSFERS
from codegen.passes.size_buffers import buffer_sizes
from codegen.problems import Problem
from codegen.protocols import PROTOCOLS, fifo_calls
from synth.collectives import ROOTED

if TYPE_CHECKING:
    from codegen.formats.xml_reader import XmlFacts

__all__ = ["Problem", "check_ir", "find_deadlock", "find_problems"]


def check_ir(ir: IR, dialect: str | Dialect | None = None, final: bool = True) -> None:
    """Raise :class:`IRCheckError` with the first problem (and how many more there are)."""
    problems = find_problems(ir, dialect, final)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise IRCheckError(f"{ir.name}: {problems[0]}{more}")


def find_problems(
    ir: IR, dialect: str | Dialect | None = None, final: bool = True, facts: XmlFacts | None = None
) -> list[Problem]:
    """Every rule the IR breaks (empty: it is safe to run). ``facts``: what the XML file it was
    read from says beyond it, for the rules on the file (:func:`codegen.dialects.file_problems`)."""
    out: list[Problem] = []
    if ir.protocol not in PROTOCOLS:
        out.append(Problem(f"protocol {ir.protocol!r}: expected one of {', '.join(PROTOCOLS)}"))
    if ir.nchunksperloop < 1:
        out.append(Problem(f"nchunksperloop must be >= 1, got {ir.nchunksperloop}"))
    if len(ir.gpus) != ir.num_ranks or any(g.rank != r for r, g in enumerate(ir.gpus)):
        out.append(Problem(f"expected gpus 0..{ir.num_ranks - 1} in order, got {[g.rank for g in ir.gpus]}"))
        return out
    out.extend(_check_collective(ir))
    for gpu in ir.gpus:
        out.extend(_check_gpu(ir, gpu, final))
    if not out:  # the flow checks need a sound structure
        out.extend(_check_connections(ir))
        if not out:
            out.extend(_check_deadlock(ir))
    d = None if dialect is None else get_dialect(dialect)
    if facts is not None:
        out.extend(file_problems(ir, facts, d))
    if d is not None:
        out.extend(dialect_problems(ir, d))
    return out


def _check_collective(ir: IR) -> list[Problem]:
    """``nchunksperloop`` against the buffers it makes (a buffer said to hold more chunks than the
    user's buffer has lets steps run past its end) and the root of a rooted collective."""
    out = []
    if ir.collective in ROOTED and ir.root is not None and not 0 <= ir.root < ir.num_ranks:
        out.append(Problem(f"root {ir.root}: expected a rank in 0..{ir.num_ranks - 1}"))
    sizes = buffer_sizes(ir.collective, ir.num_ranks, ir.nchunksperloop)
    if sizes is None or ir.nchunksperloop < 1:
        return out
    c = ir.chunk_factor
    if c < 1 or (c != ir.nchunksperloop and c * ir.num_ranks != ir.nchunksperloop):
        out.append(
            Problem(
                f"nchunksperloop={ir.nchunksperloop}: {ir.collective} on {ir.num_ranks} ranks needs a "
                f"multiple of {ir.num_ranks} (each rank's share of the larger buffer)"
            )
        )
        return out
    for gpu in ir.gpus:
        for what, declared, real, buffer in (
            ("i_chunks", gpu.input_chunks, sizes[0], "input"),
            ("o_chunks", gpu.output_chunks, sizes[1], "output"),
        ):
            if declared > real:
                out.append(
                    Problem(
                        f"{what}={declared}, but nchunksperloop={ir.nchunksperloop} makes {ir.collective}'s "
                        f"{buffer} {real} chunk(s): steps past them run outside the user's buffer",
                        gpu.rank,
                    )
                )
    return out


def _check_gpu(ir: IR, gpu: Gpu, final: bool) -> list[Problem]:
    out = []
    r = gpu.rank
    ids = [tb.id for tb in gpu.threadblocks]
    if sorted(ids) != list(range(len(ids))):
        missing = sorted(set(range(len(ids))) - set(ids))
        out.append(Problem(f"threadblock ids must be 0..{len(ids) - 1}, missing {missing}", r))
        return out
    sizes = {
        Buffer.INPUT: gpu.input_chunks,
        Buffer.OUTPUT: gpu.output_chunks,
        Buffer.SCRATCH: gpu.scratch_chunks,
    }
    owners: dict[tuple[int, str, int], int] = {}
    awaited = {
        (d.tb, d.op): (tb.id, k) for tb in gpu.threadblocks for k, op in enumerate(tb.ops) for d in op.deps
    }
    for tb in sorted(gpu.threadblocks, key=lambda t: t.id):
        for what, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer is None:
                continue
            if not 0 <= peer < ir.num_ranks or peer == r:
                out.append(
                    Problem(f"{what} peer {peer}: expected another rank in 0..{ir.num_ranks - 1}", r, tb.id)
                )
                continue
            other = owners.setdefault((tb.channel, what, peer), tb.id)
            if other != tb.id:
                verb = "sends to" if what == "send" else "receives from"
                moves = (lambda t: t.sends) if what == "send" else (lambda t: t.receives)
                step = next((k for k, op in enumerate(tb.ops) if moves(op.type)), 0)
                out.append(
                    Problem(
                        f"{verb} rank {peer} on channel {tb.channel}, as threadblock {other} does: one "
                        f"(channel, peer) connection per direction may have only one threadblock",
                        r,
                        tb.id,
                        step,
                    )
                )
        if tb.channel < 0:
            out.append(Problem(f"channel {tb.channel}: expected >= 0", r, tb.id))
        for k, op in enumerate(tb.ops):
            at = (r, tb.id, k)
            if op.type.sends and tb.send is None:
                out.append(Problem(f"{op.type.value} sends but the threadblock has no send peer", *at))
            if op.type.receives and tb.recv is None:
                out.append(Problem(f"{op.type.value} receives but the threadblock has no receive peer", *at))
            if op.type is not OpType.NOP and op.count < 1:
                out.append(Problem(f"count {op.count}: expected >= 1", *at))
            for name, ref, needed in (
                ("src", op.src, op.type.reads_src),
                ("dst", op.dst, op.type.writes_dst),
            ):
                if ref is None:
                    if needed:
                        out.append(Problem(f"{op.type.value} needs a {name} operand", *at))
                    continue
                size = sizes[ref.buffer]
                if ref.index < 0 or ref.index + max(op.count, 1) > size:
                    last = ref.index + max(op.count, 1) - 1
                    out.append(
                        Problem(
                            f"{name} {ref.buffer.value}[{ref.index}..{last}] is outside the buffer of {size} chunk(s)",
                            *at,
                        )
                    )
            for d in op.deps:
                if not 0 <= d.tb < len(ids) or not 0 <= d.op < len(gpu.threadblock(d.tb).ops):
                    out.append(
                        Problem(f"depends on threadblock {d.tb} step {d.op}, which does not exist", *at)
                    )
            if final and (tb.id, k) in awaited and not op.has_dep:
                u, v = awaited[(tb.id, k)]
                out.append(
                    Problem(f"threadblock {u} step {v} waits for this step, but hasdep is not set", *at)
                )
    return out


def _connections(ir: IR) -> dict[tuple[int, int, int], tuple[int | None, int | None]]:
    """(sender, receiver, channel) -> (sending threadblock, receiving threadblock)."""
    conns: dict[tuple[int, int, int], list] = defaultdict(lambda: [None, None])
    for gpu in ir.gpus:
        for tb in gpu.threadblocks:
            if tb.send is not None:
                conns[(gpu.rank, tb.send, tb.channel)][0] = tb.id
            if tb.recv is not None:
                conns[(tb.recv, gpu.rank, tb.channel)][1] = tb.id
    return {k: (v[0], v[1]) for k, v in conns.items()}


def _transfers(ir: IR, rank: int, tb_id: int | None, sends: bool) -> list[tuple[int, int]]:
    if tb_id is None:
        return []
    tb = ir.gpu(rank).threadblock(tb_id)
    return [(k, op.count) for k, op in enumerate(tb.ops) if (op.type.sends if sends else op.type.receives)]


def _check_connections(ir: IR) -> list[Problem]:
    out = []
    for (a, b, ch), (stb, rtb) in sorted(_connections(ir).items()):
        sent = _transfers(ir, a, stb, True)
        got = _transfers(ir, b, rtb, False)
        if not sent and not got:
            continue
        if rtb is None:
            out.append(
                Problem(
                    f"sends to rank {b} on channel {ch}, but no threadblock of rank {b} receives from rank {a} on it",
                    a,
                    stb,
                    sent[0][0],
                )
            )
            continue
        if stb is None:
            out.append(
                Problem(
                    f"receives from rank {a} on channel {ch}, but no threadblock of rank {a} sends to rank {b} on it",
                    b,
                    rtb,
                    got[0][0],
                )
            )
            continue
        for n, ((sk, sc), (rk, rc)) in enumerate(zip(sent, got, strict=False)):
            if sc != rc:
                out.append(
                    Problem(
                        f"transfer {n} to rank {b} on channel {ch} sends cnt={sc}, but rank {b} threadblock {rtb} "
                        f"step {rk} receives cnt={rc}",
                        a,
                        stb,
                        sk,
                    )
                )
                break
        else:
            if len(sent) > len(got):
                out.append(
                    Problem(
                        f"sends {len(sent)} transfers to rank {b} on channel {ch}, rank {b} threadblock {rtb} "
                        f"receives {len(got)}: this step's transfer is never received",
                        a,
                        stb,
                        sent[len(got)][0],
                    )
                )
            elif len(got) > len(sent):
                out.append(
                    Problem(
                        f"receives {len(got)} transfers from rank {a} on channel {ch}, rank {a} threadblock {stb} "
                        f"sends {len(sent)}: this step waits forever",
                        b,
                        rtb,
                        got[len(sent)][0],
                    )
                )
    return out


def find_deadlock(ir: IR) -> Problem | None:
    """The deadlock of a structurally sound IR (see :func:`_check_deadlock`), or None."""
    found = _check_deadlock(ir)
    return found[0] if found else None


def _check_deadlock(ir: IR) -> list[Problem]:
    """A cycle through program order, dependencies and connection order, with unbounded FIFOs; else
    one that NCCL's bounded FIFOs add (see :func:`_calls_graph`)."""
    transfers = sum(
        op.count
        for g in ir.gpus
        for tb in g.threadblocks
        for op in tb.ops
        if op.type.sends or op.type.receives
    )
    TRANSFERS.check(transfers, f"{ir.name}: the deadlock check", IRCheckError)
    for depth in (None, fifo_calls(ir.protocol) if ir.protocol in PROTOCOLS else None):
        name, preds = _calls_graph(ir, depth)
        cycle = _find_cycle(preds)
        if cycle is None:
            continue
        steps = [name[i] for i in cycle]
        steps = [s for k, s in enumerate(steps) if not k or s != steps[k - 1]]
        shown = " -> ".join("r{}.tb{}.s{}".format(*s) for s in steps[:8]) + (
            " -> ..." if len(steps) > 8 else ""
        )
        if depth is None:
            what = f"a cycle of {len(steps)} steps through dependencies and connection order"
        else:
            what = (
                f"a cycle of {len(steps)} steps once connections hold {depth} calls, as NCCL's FIFOs do "
                f"with {ir.protocol} (a step moves one call per chunk at large sizes)"
            )
        return [Problem(f"deadlock: {what} ({shown})", *steps[0])]
    return []


def _calls_graph(ir: IR, depth: int | None) -> tuple[list[tuple[int, int, int]], list[list[int]]]:
    """Each step's primitive calls (one per chunk for steps that send or receive: how a step runs at
    large sizes, which is also when it needs most FIFO room) and what each call waits for: the
    previous call of its threadblock, its dependencies, the matching call on its connection and,
    with a ``depth``, the call received ``depth`` calls earlier on the connection it sends on."""
    name: list[tuple[int, int, int]] = []
    first: dict[tuple[int, int, int], int] = {}
    preds: list[list[int]] = []
    for gpu in ir.gpus:
        for tb in gpu.threadblocks:
            for k, op in enumerate(tb.ops):
                first[(gpu.rank, tb.id, k)] = len(name)
                calls = op.count if op.type.sends or op.type.receives else 1
                for _ in range(max(1, calls)):
                    preds.append([len(name) - 1] if name and name[-1][:2] == (gpu.rank, tb.id) else [])
                    name.append((gpu.rank, tb.id, k))
    ends = {key: i for i, key in enumerate(name)}  # the last call of each step
    for gpu in ir.gpus:
        for tb in gpu.threadblocks:
            for k, op in enumerate(tb.ops):
                preds[first[(gpu.rank, tb.id, k)]].extend(ends[(gpu.rank, d.tb, d.op)] for d in op.deps)
    for (a, b, _ch), (stb, rtb) in _connections(ir).items():
        sent = [i for k, _ in _transfers(ir, a, stb, True) for i in _span(first, ends, (a, stb, k))]
        got = [i for k, _ in _transfers(ir, b, rtb, False) for i in _span(first, ends, (b, rtb, k))]
        for m, (s, r) in enumerate(zip(sent, got, strict=False)):
            preds[r].append(s)
            if depth is not None and m + depth < len(sent):
                preds[sent[m + depth]].append(r)
    return name, preds


def _span(first: dict, ends: dict, key: tuple[int, int, int]) -> range:
    return range(first[key], ends[key] + 1)


def _find_cycle(preds: list[list[int]]) -> list[int] | None:
    """Kahn's algorithm; the nodes of one cycle in order, or None when there is none."""
    succs: list[list[int]] = [[] for _ in preds]
    indegree = [0] * len(preds)
    for me, ps in enumerate(preds):
        for p in ps:
            succs[p].append(me)
            indegree[me] += 1
    queue = deque(i for i, d in enumerate(indegree) if d == 0)
    done = 0
    while queue:
        i = queue.popleft()
        done += 1
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                queue.append(j)
    if done == len(preds):
        return None
    node = next(i for i, d in enumerate(indegree) if d > 0)
    path: list[int] = []
    seen: dict[int, int] = {}
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(p for p in preds[node] if indegree[p] > 0)
    return list(reversed(path[seen[node] :]))

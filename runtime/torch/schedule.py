"""The level schedule: an IR as rounds that every rank, in its own process, runs in lockstep.

Executing an IR with one process per rank and real point-to-point transfers deadlocks easily
(blocking sends in a cycle; NCCL running ungrouped P2P in issue order on one stream). The
schedule avoids it by construction (reference/mscclpp-plan-and-torch.md, 3.2). Nodes are the
transmissions the runtime executes (:mod:`runtime.program`: nops folded, ``re`` chains joined);
edges are program order within a threadblock and dependencies (weight 0), and each sending
transmission to the receiving one it is matched with (weight 1; on a connection ``(src, dst,
channel)`` the k-th send of the sending threadblock meets the k-th receive of the receiving one,
as in MSCCL). A node's level is its longest weighted path from a source. Round ``l`` on every rank
is: run this rank's transmissions of level ``l`` in one global topological order (a receive takes
data exchanged in an earlier round; a send sets aside a copy of its payload), then exchange every
transfer whose sender has level ``l``, all in one batch. Levels never decrease along an edge, so
each rank's order respects program order and dependencies, every transfer is exchanged after its
sender ran and before its receiver runs, and each round's transfers are posted together at both
ends. Tiles and FIFO depths change timing, not values, so they disappear here (the static checker
and the NumPy executor judge deadlock freedom under bounded FIFOs).

A dependency on ``(tb, op)`` waits, as in the runtime, for the first transmission of ``tb`` at or
after ``op`` that publishes progress (``has_dep``). This module needs neither torch nor NumPy.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.errors import BlockedStep, DeadlockError, ExecutionError
from runtime.program import Program, TbProgram, Transmission

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Schedule", "Step", "Stuck", "Transfer", "build_schedule"]

_SHOWN_IN_CYCLE = 8


@dataclass(frozen=True)
class Transfer:
    """One matched send and receive: ``count`` chunks from ``src`` to ``dst`` on ``channel``, the
    ``seq``-th on that connection, exchanged in round ``level`` (its sender's level)."""

    id: int
    src: int
    dst: int
    channel: int
    seq: int
    count: int
    level: int
    sender: tuple[int, int, int]
    """(rank, threadblock, IR op) of the sending transmission, for reports."""
    receiver: tuple[int, int, int]


@dataclass(frozen=True)
class Stuck:
    """A receive that waits forever: its connection has fewer sends than receives (a send was
    dropped), so on a real runtime this rank hangs here. ``node`` is (rank, tb, transmission)."""

    node: tuple[int, int, int]
    op: int
    label: str
    connection: str
    sends: int
    receives: int

    def __str__(self) -> str:
        rank, tb, _ = self.node
        return (
            f"rank {rank} tb {tb} op {self.op} ({self.label}) waits for a transfer that is never sent "
            f"({self.connection}: {self.sends} sends, {self.receives} receives)"
        )


@dataclass(frozen=True)
class Step:
    """One transmission as its rank runs it: the threadblock, what it does, and the transfers it
    takes its data from (``incoming``) and sets data aside for (``outgoing``)."""

    tb: int
    tx: Transmission
    incoming: int | None
    outgoing: int | None


@dataclass(frozen=True, eq=False)
class Schedule:
    """``steps[rank][level]``: what ``rank`` runs in that round, in order; ``sends`` and ``receives``
    ``[rank][level]``: its transfers of that round's exchange, each sorted by (peer, channel,
    sequence), the order both ends post them in."""

    program: Program
    levels: int
    transfers: tuple[Transfer, ...]
    steps: tuple[tuple[tuple[Step, ...], ...], ...]
    sends: tuple[tuple[tuple[Transfer, ...], ...], ...]
    receives: tuple[tuple[tuple[Transfer, ...], ...], ...]
    stuck: tuple[Stuck, ...] = ()
    """Receives that nothing sends to: they, and all that waits on them, never run."""

    @property
    def num_ranks(self) -> int:
        return len(self.steps)


@dataclass
class _Graph:
    """Nodes are ``(rank, tb, index of the transmission)``; ``preds[node]`` lists ``(pred, weight)``."""

    nodes: list[tuple[int, int, int]]
    index: dict[tuple[int, int, int], int]
    preds: list[list[tuple[int, int]]]

    def add(self, node: int, pred: int, weight: int) -> None:
        self.preds[node].append((pred, weight))


def build_schedule(program: Program) -> Schedule:
    """The level schedule of ``program`` (``runtime.program.build_program``). A receive that no
    send matches (a dropped send) is :attr:`Schedule.stuck`: it and what waits on it are left out,
    so the run ends and its outputs show what is missing, where a real runtime would hang. Raises
    :class:`ExecutionError` when a matched send and receive move different chunk counts and
    :class:`DeadlockError` for a dependency nothing publishes or a cycle through dependencies and
    transfers."""
    graph = _nodes(program)
    _order_and_deps(program, graph)
    pairs, stuck = _pair(program, graph)
    order = _topological(program, graph)
    never = _never(graph, stuck)
    order = [node for node in order if node not in never]
    level = _levels(graph, order)
    transfers = tuple(dataclasses.replace(t, level=level[node]) for t, node in pairs if node not in never)
    levels = 1 + max((level[node] for node in order), default=-1)
    return _assemble(program, graph, order, level, transfers, levels, tuple(stuck))


def _nodes(program: Program) -> _Graph:
    nodes = [(tb.rank, tb.id, i) for tb in program.tbs for i in range(len(tb.transmissions))]
    return _Graph(nodes, {n: i for i, n in enumerate(nodes)}, [[] for _ in nodes])


def _published_by(tb: TbProgram, op: int) -> int | None:
    """The first transmission of ``tb`` at or after IR op ``op`` that publishes progress."""
    for i, tx in enumerate(tb.transmissions):
        if tx.step >= op and tx.has_dep:
            return i
    return None


def _order_and_deps(program: Program, graph: _Graph) -> None:
    ir = program.ir
    for tb in program.tbs:
        for i, tx in enumerate(tb.transmissions):
            me = graph.index[(tb.rank, tb.id, i)]
            if i:
                graph.add(me, me - 1, 0)
            for dep in tx.deps:
                target = _published_by(program.tb(tb.rank, dep.tb), dep.op)
                if target is None:
                    blocked = BlockedStep(
                        tb.rank,
                        tb.id,
                        tx.op,
                        0,
                        f"({tx.label()}) waits for tb {dep.tb} op {dep.op} (nothing in tb {dep.tb} from "
                        f"op {dep.op} on has has_dep, so it never publishes that far)",
                    )
                    raise DeadlockError(ir.name, (blocked,))
                graph.add(me, graph.index[(tb.rank, dep.tb, target)], 0)


def _moves(tb: TbProgram | None, sends: bool) -> list[int]:
    if tb is None:
        return []
    return [i for i, tx in enumerate(tb.transmissions) if (tx.type.sends if sends else tx.type.receives)]


def _pair(program: Program, graph: _Graph) -> tuple[list[tuple[Transfer, int]], list[Stuck]]:
    """Match the k-th send with the k-th receive on every connection; add the weight-1 edges. A
    receive beyond the connection's sends waits forever (:class:`Stuck`); a send beyond its
    receives is never taken (the data stays in the FIFO, as in the runtime). Each transfer comes
    with its sending node, and its level still unknown (-1)."""
    ir = program.ir
    out: list[tuple[Transfer, int]] = []
    stuck: list[Stuck] = []
    for (src, dst, ch), conn in sorted(program.connections.items()):
        stb = None if conn.sender is None else program.tb(src, conn.sender)
        rtb = None if conn.receiver is None else program.tb(dst, conn.receiver)
        sent, got = _moves(stb, True), _moves(rtb, False)
        for ri in got[len(sent) :]:
            rtx = rtb.transmissions[ri]
            stuck.append(Stuck((dst, rtb.id, ri), rtx.op, rtx.label(), str(conn), len(sent), len(got)))
        for seq, (si, ri) in enumerate(zip(sent, got, strict=False)):
            stx, rtx = stb.transmissions[si], rtb.transmissions[ri]
            if stx.count != rtx.count:
                raise ExecutionError(
                    f"{ir.name}: rank {dst} tb {rtb.id} op {rtx.op} ({rtx.label()}) receives {rtx.count} "
                    f"chunks, but rank {src} tb {stb.id} op {stx.op} sent {stx.count}: send and receive "
                    "counts differ on this connection"
                )
            node = graph.index[(src, stb.id, si)]
            graph.add(graph.index[(dst, rtb.id, ri)], node, 1)
            sender, receiver = (src, stb.id, stx.op), (dst, rtb.id, rtx.op)
            out.append((Transfer(len(out), src, dst, ch, seq, stx.count, -1, sender, receiver), node))
    return out, stuck


def _never(graph: _Graph, stuck: list[Stuck]) -> set[int]:
    """The nodes that never run: each stuck receive, and everything after it in program order,
    waiting on it, or receiving from it."""
    succs: list[list[int]] = [[] for _ in graph.nodes]
    for me, preds in enumerate(graph.preds):
        for pred, _ in preds:
            succs[pred].append(me)
    never: set[int] = set()
    todo = [graph.index[s.node] for s in stuck]
    while todo:
        node = todo.pop()
        if node not in never:
            never.add(node)
            todo.extend(succs[node])
    return never


def _topological(program: Program, graph: _Graph) -> list[int]:
    """Kahn's order (nodes in their listed order where free); DeadlockError on a cycle."""
    succs: list[list[int]] = [[] for _ in graph.nodes]
    indegree = [0] * len(graph.nodes)
    for me, preds in enumerate(graph.preds):
        for pred, _ in preds:
            succs[pred].append(me)
            indegree[me] += 1
    queue = deque(i for i, d in enumerate(indegree) if d == 0)
    order = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for nxt in succs[node]:
            indegree[nxt] -= 1
            if not indegree[nxt]:
                queue.append(nxt)
    if len(order) < len(graph.nodes):
        stuck = [i for i, d in enumerate(indegree) if d > 0]
        raise DeadlockError(
            program.ir.name, tuple(_blocked(program, graph, i) for i in stuck[:_SHOWN_IN_CYCLE])
        )
    return order


def _blocked(program: Program, graph: _Graph, node: int) -> BlockedStep:
    rank, tb, i = graph.nodes[node]
    tx = program.tb(rank, tb).transmissions[i]
    return BlockedStep(rank, tb, tx.op, 0, f"({tx.label()}) waits in a cycle of dependencies and transfers")


def _levels(graph: _Graph, order: list[int]) -> list[int]:
    level = [0] * len(graph.nodes)
    for node in order:
        level[node] = max((level[p] + w for p, w in graph.preds[node]), default=0)
    return level


def _assemble(
    program: Program,
    graph: _Graph,
    order: list[int],
    level: list[int],
    transfers: tuple[Transfer, ...],
    levels: int,
    stuck: tuple[Stuck, ...],
) -> Schedule:
    n = program.ir.num_ranks
    incoming = {t.receiver: t.id for t in transfers}
    outgoing = {t.sender: t.id for t in transfers}
    steps: list[list[list[Step]]] = [[[] for _ in range(levels)] for _ in range(n)]
    for node in order:
        rank, tb_id, i = graph.nodes[node]
        tx = program.tb(rank, tb_id).transmissions[i]
        key = (rank, tb_id, tx.op)
        steps[rank][level[node]].append(
            Step(
                tb_id,
                tx,
                incoming.get(key) if tx.type.receives else None,
                outgoing.get(key) if tx.type.sends else None,
            )
        )
    sends: list[list[list[Transfer]]] = [[[] for _ in range(levels)] for _ in range(n)]
    receives: list[list[list[Transfer]]] = [[[] for _ in range(levels)] for _ in range(n)]
    for t in sorted(transfers, key=lambda t: (t.channel, t.seq)):
        sends[t.src][t.level].append(t)
        receives[t.dst][t.level].append(t)
    return Schedule(
        program,
        levels,
        transfers,
        _frozen(steps),
        _frozen(_by_peer(sends, "dst")),
        _frozen(_by_peer(receives, "src")),
        stuck,
    )


def _by_peer(table: list[list[list[Transfer]]], peer: str) -> Iterator[Iterator[list[Transfer]]]:
    return ((sorted(ts, key=lambda t: (getattr(t, peer), t.channel, t.seq)) for ts in row) for row in table)


def _frozen(table) -> tuple:
    return tuple(tuple(tuple(cell) for cell in row) for row in table)

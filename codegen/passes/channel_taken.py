"""What the flows ``assign_channels`` has placed hold on each channel, and whether a flow fits one:
its transfers received in the order sent on every connection, a rank's peers per channel within
``MAX_PEERS_PER_CHANNEL``, a pinned threadblock's peers its own, and (``serializes``) no exchange
between two ranks drained on one channel; in a program timed by the Algorithm model, which
connections are busy while a send holds them (``InstrDAG.holds``).
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from codegen.instr_dag import InstrDAG
from codegen.protocols import fifo_calls
from codegen.rules import MAX_PEERS_PER_CHANNEL

__all__ = [
    "Conn",
    "Moves",
    "Taken",
    "busy_while",
    "commit",
    "connection_busy",
    "fits",
    "hold",
    "in_order",
    "serializes",
]


class Conn:
    """What the flows placed so far hold on one connection and local channel: its transfers'
    (send position, receive position), sorted; in a program timed by the Algorithm model the sends
    on it, and the sorted starts and the sorted ends of what they hold (``InstrDAG.holds``, to count
    overlaps by search instead of a scan); whether one of those holds ends before it starts (then
    scanned). One record, so a channel tried costs one lookup."""

    __slots__ = ("ends", "fifo", "held", "inverted", "starts")

    def __init__(self) -> None:
        self.fifo: list[tuple[int, int]] = []
        self.held: list[int] = []
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.inverted = False

    def add(self, pair: tuple[int, int]) -> None:
        """A transfer (send, receive position): flows come in the global order, so most go last."""
        if not self.fifo or self.fifo[-1][0] < pair[0]:
            self.fifo.append(pair)
        else:
            bisect.insort(self.fifo, pair)

    def hold(self, send: int, start: float, end: float) -> None:
        """Record that ``send`` holds the connection from ``start`` to ``end``."""
        self.held.append(send)
        bisect.insort(self.starts, start)
        bisect.insort(self.ends, end)
        if end < start:
            self.inverted = True


@dataclass
class Taken:
    """What the flows placed so far hold, per instance and local channel ``ch``."""

    conns: dict[tuple, Conn] = field(default_factory=dict)
    """(src, dst, inst, ch) -> what its transfers hold; there once one is placed on it."""
    owner: dict[tuple, tuple] = field(default_factory=dict)
    """(rank, inst, ch, "send"|"recv", peer) -> the threadblock group that holds it."""
    peers: dict[tuple, set] = field(default_factory=lambda: defaultdict(set))
    """(rank, inst, ch, "send"|"recv") -> its peers."""
    by_depth: dict[tuple, bool] = field(default_factory=dict)
    """(src, dst, inst, ch, depth of the send) -> whether one of its transfers is drained (has more
    calls than the FIFO holds and runs with its receive, see :func:`serializes`); a flow of one
    transfer with no transfer the other way at its depth (read by none) is not kept."""
    passed_busy: bool = False  # whether a flow passed a channel over for being busy while it runs


class Moves:
    """What every candidate channel's checks read of a flow's transfers, computed once per flow:
    per connection its (send position, receive position) pairs, sorted; per rank the peers it sends
    to and receives from; per transfer its ranks, positions, the send's depth and whether it is
    drained (see :func:`serializes`)."""

    def __init__(self, dag: InstrDAG, transfers: list[tuple[int, int]]) -> None:
        instrs, pos, depth = dag.instrs, dag.position, dag.depth
        room = fifo_calls(dag.info.protocol)
        self.each = [
            (
                instrs[s].rank,
                instrs[r].rank,
                pos[s],
                pos[r],
                depth[s],
                instrs[s].count > room and pos[r] == pos[s] + 1,
            )
            for s, r in transfers
        ]
        self.pairs: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        self.sends: dict[int, set[int]] = defaultdict(set)
        self.recvs: dict[int, set[int]] = defaultdict(set)
        for a, b, ps, pr, _, _ in self.each:
            self.pairs[(a, b)].append((ps, pr))
            self.sends[a].add(b)
            self.recvs[b].add(a)
        for pairs in self.pairs.values():
            pairs.sort()


def fits(moves: Moves, pinned: list[tuple], inst: int, ch: int, taken: Taken) -> bool:
    peers = taken.peers
    for side, table in (("send", moves.sends), ("recv", moves.recvs)):
        for rank, new in table.items():
            have = peers.get((rank, inst, ch, side), ())
            if len(new) + len(have) > MAX_PEERS_PER_CHANNEL and len(new | have) > MAX_PEERS_PER_CHANNEL:
                return False
    conns = taken.conns
    if not all(in_order(_fifo(conns, (a, b, inst, ch)), pairs) for (a, b), pairs in moves.pairs.items()):
        return False
    owner = taken.owner
    claims: dict[tuple, tuple] = {}
    for rank, key, send, recv in pinned:
        for side, peer in (("send", send), ("recv", recv)):
            if peer is None:
                continue
            slot = (rank, inst, ch, side, peer)
            holder = claims.get(slot, owner.get(slot, key))
            if holder != key:
                return False
            claims[slot] = key
    return True


def _fifo(conns: dict[tuple, Conn], key: tuple) -> list[tuple[int, int]]:
    there = conns.get(key)
    return [] if there is None else there.fifo


def in_order(placed: list[tuple[int, int]], pairs: list[tuple[int, int]]) -> bool:
    """Whether a connection whose transfers ``placed`` (send, receive positions, sorted, received in
    send order) gains ``pairs`` still receives in send order: the new pairs among themselves, and
    each against its neighbours in ``placed`` (a search, not a scan: a ring's connections carry
    thousands of transfers at 512 ranks)."""
    if len(pairs) > 1:
        pairs.sort()
        if any(a[1] > b[1] for a, b in itertools.pairwise(pairs)):
            return False
    for pair in pairs:
        k = bisect.bisect(placed, pair)
        if (k > 0 and placed[k - 1][1] > pair[1]) or (k < len(placed) and pair[1] > placed[k][1]):
            return False
    return True


def connection_busy(dag: InstrDAG, send: int, inst: int, ch: int, taken: Taken) -> bool:
    """Whether a transfer on the connection ``send`` would use on channel ``ch`` holds it while
    ``send`` runs (``InstrDAG.overlap``)."""
    ins = dag.instrs[send]
    return busy_while(dag, send, (ins.rank, ins.send_to, inst, ch), *dag.holds(send), taken)


def busy_while(dag: InstrDAG, send: int, key: tuple, start: float, end: float, taken: Taken) -> bool:
    """:func:`connection_busy` on connection ``key`` with ``send``'s hold ``start .. end``: those that start
    before it ends, less those that end before it starts (a subset of them when holds do not end
    before they start): a search in the sorted starts and ends, where a scan made a timed 512-rank
    schedule quadratic."""
    there = taken.conns.get(key)
    if there is None:
        return False
    if start < end and not there.inverted:
        return bisect.bisect_left(there.starts, end) - bisect.bisect_right(there.ends, start) > 0
    return any(dag.overlap(send, other) for other in there.held)


def hold(dag: InstrDAG, send: int, key: tuple, taken: Taken, span: tuple[float, float] | None = None) -> None:
    """Record that ``send`` holds connection ``key`` (see :func:`connection_busy`); ``span``: its hold, if
    known (``InstrDAG.holds``)."""
    there = taken.conns.get(key)
    if there is None:
        there = taken.conns[key] = Conn()
    there.hold(send, *(dag.holds(send) if span is None else span))


def serializes(dag: InstrDAG, moves: Moves, inst: int, ch: int, by_depth: dict) -> bool:
    """Whether a transfer of the flow and one the other way between the same ranks, of the same
    depth (meant to run together), would share the channel while one of them has more calls than
    the FIFO holds and runs with its receive (next in the order, see ``order_by_critical_path``):
    the threadblock the two share would run them one after the other. Whether any transfer of a
    depth is drained is kept as it is placed (a scan of them all made a 64-rank trees allgather
    look at 26 per flow)."""
    if not by_depth:
        return False
    for a, b, _, _, d, drained in moves.each:
        there = by_depth.get((b, a, inst, ch, d))
        if there is not None and (there or drained):
            return True
    return False


def commit(moves: Moves, pinned: list[tuple], inst: int, ch: int, taken: Taken) -> None:
    conns = taken.conns
    for (a, b), pairs in moves.pairs.items():
        there = conns.get((a, b, inst, ch))
        if there is None:
            there = conns[(a, b, inst, ch)] = Conn()
        for pair in pairs:
            there.add(pair)
    by_depth = taken.by_depth
    for a, b, _, _, d, drained in moves.each:
        slot = (a, b, inst, ch, d)
        by_depth[slot] = by_depth.get(slot, False) or drained
    for side, table in (("send", moves.sends), ("recv", moves.recvs)):
        for rank, new in table.items():
            taken.peers[(rank, inst, ch, side)] |= new
    owner = taken.owner
    for rank, key, send, recv in pinned:
        for side, peer in (("send", send), ("recv", recv)):
            if peer is not None:
                owner[(rank, inst, ch, side, peer)] = key

"""The channel assignment's lone flows in bulk: where each rank pair's flows meet no other pair's,
whole pairs take the channel each flow tries first, checked in NumPy.

``assign_channels`` places flows one at a time, in the global order: each tries its channels in
turn (round robin over all flows, or per connection in a compact layout) and takes the first that
is not busy while it runs and fits. Where every flow that communicates is one send and its
receive with nothing pinned (``channel_flows.lone_flows``) and no rank has more peers than a
channel holds (``MAX_PEERS_PER_CHANNEL``: then that check never refuses), what one flow's tries
read is written only by the flows between the same two ranks: its connection's transfers and
holds on the channel, and those of the transfers the other way at its depth. So each rank pair
is placed alone, and a pair all of whose flows take their first channel is known without placing
it: the first flow that would not take it finds what every flow before it placed there, the
others' first channels. Such a pair's flows (at 128 ranks of DGX H100 trees 75-100%, 3-4 s of
placement a compile) are checked at once: on each channel of a connection, receives in the order
of their sends, no two transfers held at once, and no transfer the other way at the same depth
where either drains the FIFO (``channel_taken.serializes``). Only the other pairs are placed
one flow at a time. Where ranks have more peers than a channel holds (at 512 ranks of DGX H100
every rank has 70), pairs meet only by a channel's peers: :func:`placed_in_rounds` places all
flows then, given when each side of a channel fills, until those fills settle.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codegen.instr_dag import InstrDAG
from codegen.rules import MAX_PEERS_PER_CHANNEL

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Pairs", "first_channels", "placed_in_rounds", "rank_pairs"]


@dataclass(frozen=True)
class Pairs:
    """The lone flows of a DAG that :func:`first_channels` can judge, as arrays in the global
    order (one entry per flow): the flow's index, its send and receive, its connection (an index
    into ``connections``, the (sender, receiver) of each), its instance, receive position, depth,
    whether it drains the FIFO, its hold (start, end), whether a transfer the other way is of its
    depth, its rank pair and direction, and how many flows of its connection come before it."""

    flow: np.ndarray
    send: np.ndarray
    recv: np.ndarray
    connection: np.ndarray
    connections: list[tuple[int, int]]
    instance: np.ndarray
    received: np.ndarray
    depth: np.ndarray
    drained: np.ndarray
    start: np.ndarray
    end: np.ndarray
    facing: np.ndarray
    pair: np.ndarray
    forward: np.ndarray
    turn: np.ndarray
    crowded: bool
    """Whether a rank sends to, or receives from, more peers in an instance than a channel holds:
    then :func:`placed_in_rounds` places the flows, not :func:`first_channels`."""


def rank_pairs(dag: InstrDAG, flows: list[list[int]], lone: tuple | None, pinned: bool) -> Pairs | None:
    """The lone flows (``lone``: ``channel_flows.lone_arrays``) as :class:`Pairs`, or None where
    the rank pairs may meet otherwise than by a channel's peers (``Pairs.crowded``): a flow that
    communicates and is not lone, a hint or a pinned threadblock (``pinned``), a hold that does not
    end after it starts (the busy check then scans), or sends out of the global order."""
    import numpy as np  # not loaded by building the CLI's parser

    if pinned or lone is None or not len(lone[0]):
        return None
    kept, (s, a, b, ps, pr, d, drained, start, end, inst, facing, recv) = lone
    instrs = dag.instrs
    is_lone = np.zeros(len(flows), bool)
    is_lone[kept] = True
    if any(
        not one and any(instrs[i].send_match is not None for i in flow)
        for flow, one in zip(flows, is_lone.tolist(), strict=True)
    ):
        return None
    ranks = dag.info.num_ranks
    if (start.size and not np.all(start < end)) or np.any(np.diff(ps) <= 0):
        return None
    codes, connection = np.unique(a * ranks + b, return_inverse=True)
    turn = _running_count(connection)
    _, pair = np.unique(np.minimum(a, b) * ranks + np.maximum(a, b), return_inverse=True)
    return Pairs(
        flow=kept,
        send=s,
        recv=recv,
        connection=connection,
        connections=[(int(c) // ranks, int(c) % ranks) for c in codes.tolist()],
        instance=inst,
        received=pr,
        depth=d,
        drained=drained.astype(bool),
        start=start.astype(np.float64),
        end=end.astype(np.float64),
        facing=facing.astype(bool),
        pair=pair,
        forward=a < b,
        turn=turn,
        crowded=_crowded(a, b, inst, ranks),
    )


def _crowded(a: np.ndarray, b: np.ndarray, inst: np.ndarray, ranks: int) -> bool:
    """Whether a rank sends to, or receives from, more peers in one instance than a channel holds
    (then a flow may be refused a channel for what another pair placed: at 512 ranks of DGX H100
    trees a rank's flows spread over three channels so)."""
    import numpy as np

    from topologies.numeric import distinct

    for me, peer in ((a, b), (b, a)):
        links = distinct((inst * ranks + me) * ranks + peer)
        if np.bincount(links // ranks).max(initial=0) > MAX_PEERS_PER_CHANNEL:
            return True
    return False


def _running_count(group: np.ndarray) -> np.ndarray:
    """Per entry, how many entries of its group come before it."""
    import numpy as np

    order = np.argsort(group, kind="stable")
    sorted_group = group[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_group[1:] != sorted_group[:-1])))
    lengths = np.diff(np.append(starts, len(group)))
    out = np.empty(len(group), np.int64)
    out[order] = np.arange(len(group)) - np.repeat(starts, lengths)
    return out


def first_channels(
    pairs: Pairs, channels: int, shares: dict[tuple[int, int], int] | None, timed: bool
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per flow the channel it tries first (round robin over ``channels``, or over its
    connection's share in a compact layout), whether every flow of its rank pair takes that one,
    and whether one of those passes a channel over for being busy (only where its share is one
    channel: it then takes it all the same)."""
    import numpy as np

    if shares is None:
        first = np.arange(len(pairs.flow)) % channels
        alone = np.zeros(len(first), bool)
    else:
        own = np.fromiter((shares.get(c, 1) for c in pairs.connections), np.int64, len(pairs.connections))
        own = own[pairs.connection]
        first, alone = pairs.turn % own, own == 1
    instances, wide = int(pairs.instance.max(initial=0)) + 1, int(first.max(initial=0)) + 1
    slot = (pairs.connection * instances + pairs.instance) * wide + first  # a connection's channel
    refused = _out_of_order(slot, pairs.received) | _serialized(pairs, first)
    overlapping = _overlapping(slot, pairs.start, pairs.end) if timed else np.zeros(len(first), bool)
    refused |= overlapping & ~alone
    bad = np.zeros(int(pairs.pair.max(initial=-1)) + 1, bool)
    bad[pairs.pair[refused]] = True
    taken = ~bad[pairs.pair]
    return first, taken, bool(np.any(overlapping & taken))


def _out_of_order(slot: np.ndarray, received: np.ndarray) -> np.ndarray:
    """Per flow, whether the transfer before it on its channel of its connection is received
    after it (sends come in the order, so that one is its only neighbour)."""
    import numpy as np

    order = np.argsort(slot, kind="stable")
    same = slot[order][1:] == slot[order][:-1]
    out = np.zeros(len(slot), bool)
    out[order[1:][same & (received[order][1:] < received[order][:-1])]] = True
    return out


def _overlapping(slot: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per flow, whether a transfer on its channel of its connection that starts no later holds
    it while it starts (then of two transfers held at once the later one placed is refused: the
    flags mark which rank pairs have any)."""
    import numpy as np

    order = np.lexsort((start, slot))
    ends = end[order]
    rank = np.argsort(np.argsort(ends, kind="stable"), kind="stable")  # each end's place among all
    slots = slot[order]
    dense = np.concatenate(([0], np.cumsum(slots[1:] != slots[:-1])))
    latest = np.maximum.accumulate(dense * len(ends) + rank) - dense * len(ends)  # per slot, so far
    by_rank = np.empty(len(ends))
    by_rank[rank] = ends
    held = np.zeros(len(slot), bool)
    later = np.flatnonzero(slots[1:] == slots[:-1]) + 1
    held[later] = start[order][later] < by_rank[latest[later - 1]]
    out = np.zeros(len(slot), bool)
    out[order] = held
    return out


def _serialized(pairs: Pairs, first: np.ndarray) -> np.ndarray:
    """Per flow, whether a transfer the other way of its depth is on its first channel before it
    while one of them drains the FIFO (``channel_taken.serializes``)."""
    import numpy as np

    out = np.zeros(len(first), bool)
    facing = np.flatnonzero(pairs.facing)
    if not len(facing):
        return out
    key = pairs.pair[facing] * (int(pairs.instance.max()) + 1) + pairs.instance[facing]
    key = (key * (int(first.max()) + 1) + first[facing]) * (int(pairs.depth.max()) + 1) + pairs.depth[facing]
    _, group = np.unique(key, return_inverse=True)
    order = np.argsort(group, kind="stable")
    g, fwd, drained = group[order], pairs.forward[facing][order], pairs.drained[facing][order]
    opens = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    lengths = np.diff(np.append(opens, len(g)))

    def before(x: np.ndarray) -> np.ndarray:
        """How many of ``x`` come earlier in the entry's group."""
        total = np.cumsum(x) - x
        return total - np.repeat(total[opens], lengths)

    other = np.where(fwd, before(~fwd), before(fwd))
    other_drained = np.where(fwd, before(~fwd & drained), before(fwd & drained))
    out[facing[order]] = (other > 0) & ((other_drained > 0) | drained)
    return out


_PASSES = 16
"""The most passes :func:`placed_in_rounds` makes before it leaves the flows to be placed one at a
time (at 512 ranks of DGX H100 the fills settle in 3-6)."""


def placed_in_rounds(
    pairs: Pairs, width: tuple[int, int, dict[tuple[int, int], int] | None], timed: bool
) -> tuple[np.ndarray, bool] | None:
    """Per flow the channel ``assign_channels`` places it on one at a time in the order, and
    whether a flow passed a channel over for being busy; None where this cannot tell (a
    connection's holds not in the order of its sends in a timed program, a flow no channel takes,
    fills that do not settle). ``width``: the channels, the most, each connection's share in a
    compact layout.

    Rank pairs meet only by a channel's peers: a flow that would open its connection on a channel
    is refused where its sender already sends to ``MAX_PEERS_PER_CHANNEL`` peers there (or its
    receiver receives from as many), that is after the flow that *fills* that side of the channel.
    Given when each side fills, the pairs are independent: round ``r`` places the ``r``-th flow of
    every pair at once, trying each flow's channels in its order in NumPy. The fills the placement
    makes are then read off it; where they are those it was given, it is the one-at-a-time
    placement (by induction over the order: each flow sees the same flows before it, so the same
    fills before it, and decides the same), else it is made again with them."""
    import numpy as np  # not loaded by building the CLI's parser

    if timed and not _held_in_order(pairs):
        return None
    rounds = _Rounds(pairs, width)
    fills = rounds.unfilled()
    for _ in range(_PASSES):
        placed = rounds.placed(fills, timed)
        if placed is None:
            return None
        again = rounds.fills(placed[2])
        if all(np.array_equal(x, y) for x, y in zip(again, fills, strict=True)):
            return placed[0], placed[1]
        fills = again
    return None


def _held_in_order(pairs: Pairs) -> bool:
    """Whether each connection's holds start in the order of its sends: then a transfer is busy on
    a channel exactly where one placed there before it ends after it starts (no interval search)."""
    import numpy as np

    key = pairs.connection * (int(pairs.instance.max(initial=0)) + 1) + pairs.instance
    order = np.argsort(key, kind="stable")
    same = key[order][1:] == key[order][:-1]
    return not np.any(same & (pairs.start[order][1:] < pairs.start[order][:-1]))


class _Rounds:
    """What :func:`placed_in_rounds` reads per flow, in arrays: its tries (the channel it tries
    first, its own channels, how many lead), its connection's slot, the keys of its sender's and
    receiver's sides of a channel, its facing groups (:func:`channel_taken.serializes`: the one
    it writes, the one it reads), and the flows of each round."""

    def __init__(self, pairs: Pairs, width: tuple[int, int, dict[tuple[int, int], int] | None]) -> None:
        import numpy as np

        channels, most, shares = width
        n, instances = len(pairs.flow), int(pairs.instance.max(initial=0)) + 1
        ends = np.asarray(pairs.connections, dtype=np.int64).reshape(-1, 2)[pairs.connection]
        self.pairs, self.most, self.n = pairs, most, n
        if shares is None:  # the j-th flow of all starts its round robin at j, and all of its tries lead
            self.first, self.own = np.arange(n) % channels, np.full(n, channels)
            self.lead = np.full(n, most)
        else:
            own = np.fromiter((shares.get(c, 1) for c in pairs.connections), np.int64, len(pairs.connections))
            self.own = self.lead = own[pairs.connection]
            self.first = pairs.turn % self.own
        self.slot = pairs.connection * instances + pairs.instance
        self.sides = (ends[:, 0] * instances + pairs.instance, ends[:, 1] * instances + pairs.instance)
        self.keys = int(ends.max(initial=0) + 1) * instances
        self.writes, self.reads, self.groups = _facing_groups(pairs)
        self.rounds = _by_turn(pairs.pair)

    def unfilled(self) -> tuple[np.ndarray, np.ndarray]:
        """Fills where no side of a channel fills: per (side key, channel) the flow after all."""
        import numpy as np

        return np.full(self.keys * self.most, self.n), np.full(self.keys * self.most, self.n)

    def fills(self, opened: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (sender's or receiver's key, channel) the flow that opens its ``MAX_PEERS_PER_CHANNEL``-th
        connection there (``opened``: per slot and channel the flow that opened it, ``n``: none)."""
        import numpy as np

        at = np.flatnonzero(opened < self.n)
        by_slot = np.zeros(int(self.slot.max(initial=0)) + 1, np.int64)
        by_slot[self.slot] = np.arange(self.n)  # a flow of each slot, for its sides' keys
        out = []
        for side in self.sides:
            key = side[by_slot[at // self.most]] * self.most + at % self.most
            order = np.lexsort((opened[at], key))
            key, when = key[order], opened[at][order]
            starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
            full = starts[np.diff(np.append(starts, len(key))) >= MAX_PEERS_PER_CHANNEL]
            fill = np.full(self.keys * self.most, self.n)
            fill[key[full]] = when[full + MAX_PEERS_PER_CHANNEL - 1]
            out.append(fill)
        return out[0], out[1]

    def channel(self, j: np.ndarray, t: int) -> np.ndarray:
        """The channel flows ``j`` try ``t``-th: their own from the first, round robin, then the others."""
        import numpy as np

        own = self.own[j]
        return np.where(t < own, (self.first[j] + t) % own, t)

    def placed(self, fills: tuple[np.ndarray, np.ndarray], timed: bool) -> tuple | None:
        """The placement, round by round, given when each side of a channel fills: per flow its
        channel, whether a flow passed a busy channel over, per slot and channel the flow that
        opened it; None where a flow finds no channel."""
        board = _Board(self, fills)
        for flows in self.rounds:
            if not board.place(flows, timed):
                return None
        return board.chosen, board.passed, board.opened


class _Board:
    """What the flows placed so far hold, per slot (connection and instance) and channel: the
    receive position of its latest transfer (-1: none; a send comes after all there, so it fits
    where its receive does too), the flow that opened it, its holds' latest end; per facing group
    and channel whether a transfer is there and whether one drains."""

    def __init__(self, rounds: _Rounds, fills: tuple[np.ndarray, np.ndarray]) -> None:
        import numpy as np

        slots = (int(rounds.slot.max(initial=0)) + 1) * rounds.most
        self.rounds, self.fills = rounds, fills
        self.last = np.full(slots, -1, np.int64)
        self.opened = np.full(slots, rounds.n, np.int64)
        self.end = np.full(slots, -np.inf)
        self.there = np.zeros(rounds.groups * rounds.most + 1, bool)  # the last: no group
        self.drains = np.zeros(rounds.groups * rounds.most + 1, bool)
        self.chosen = np.full(rounds.n, -1, np.int64)
        self.passed = False

    def fits(self, j: np.ndarray, ch: np.ndarray) -> np.ndarray:
        """``assign_channels._lone_fits`` for flows ``j`` on channels ``ch``."""
        import numpy as np

        r, most = self.rounds, self.rounds.most
        last = self.last[r.slot[j] * most + ch]
        send, recv = (side[j] * most + ch for side in r.sides)
        unfilled = (self.fills[0][send] >= j) & (self.fills[1][recv] >= j)
        ok = np.where(last >= 0, last < r.pairs.received[j], unfilled)
        facing = np.where(r.reads[j] >= 0, r.reads[j] * most + ch, r.groups * most)
        return ok & ~(self.there[facing] & (self.drains[facing] | r.pairs.drained[j]))

    def place(self, flows: np.ndarray, timed: bool) -> bool:
        """Place one round's flows (one per pair): their own channels, those busy while they run
        last in a timed program, then the others; whether every flow found one."""
        r = self.rounds
        left, busy, t = flows, [], 0
        while len(left) and t < r.most:  # the lead tries
            j = left[t < r.lead[left]]
            if not len(j):
                break
            ch = r.channel(j, t)
            if timed:
                held = self.end[r.slot[j] * r.most + ch] > r.pairs.start[j]
                if held.any():
                    self.passed = True
                    busy.append((t, j[held]))
                    j, ch = j[~held], ch[~held]
            self._take(j, ch)
            left, t = left[self.chosen[left] < 0], t + 1
        for t, j in busy:
            j = j[self.chosen[j] < 0]
            self._take(j, r.channel(j, t))
        left = flows[self.chosen[flows] < 0]
        for t in range(int(r.lead[left].min(initial=r.most)), r.most):  # the rest, in order
            j = left[t >= r.lead[left]]
            self._take(j, r.channel(j, t))
            left = left[self.chosen[left] < 0]
        if len(left):
            return False
        self._commit(flows, timed)
        return True

    def _take(self, j: np.ndarray, ch: np.ndarray) -> None:
        ok = self.fits(j, ch)
        self.chosen[j[ok]] = ch[ok]

    def _commit(self, j: np.ndarray, timed: bool) -> None:
        """Record a round's flows where they went (no two of a round share a slot or a group)."""
        import numpy as np

        r, ch = self.rounds, self.chosen[j]
        at = r.slot[j] * r.most + ch
        new = self.last[at] < 0
        self.opened[at[new]] = j[new]
        self.last[at] = r.pairs.received[j]
        if timed:
            self.end[at] = np.maximum(self.end[at], r.pairs.end[j])
        facing = r.writes[j] >= 0
        group = r.writes[j][facing] * r.most + ch[facing]
        self.there[group] = True
        self.drains[group] |= r.pairs.drained[j][facing]


def _facing_groups(pairs: Pairs) -> tuple[np.ndarray, np.ndarray, int]:
    """Per flow the group (its sender, receiver, instance, depth) it records a transfer in where
    a transfer the other way is of its depth, and the group of those (it reads), -1 elsewhere;
    how many groups."""
    import numpy as np

    ends = np.asarray(pairs.connections, dtype=np.int64).reshape(-1, 2)[pairs.connection]
    facing = np.flatnonzero(pairs.facing)
    ranks = int(ends.max(initial=0)) + 1
    depths, instances = int(pairs.depth.max(initial=0)) + 1, int(pairs.instance.max(initial=0)) + 1

    def code(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return ((x * ranks + y) * instances + pairs.instance[facing]) * depths + pairs.depth[facing]

    from topologies.numeric import distinct

    a, b = ends[facing, 0], ends[facing, 1]
    found = distinct(np.concatenate((code(a, b), code(b, a))))
    writes, reads = np.full(len(pairs.flow), -1), np.full(len(pairs.flow), -1)
    writes[facing], reads[facing] = np.searchsorted(found, code(a, b)), np.searchsorted(found, code(b, a))
    return writes, reads, len(found)


def _by_turn(group: np.ndarray) -> list[np.ndarray]:
    """The entries of each round: the ``r``-th of every group, in the order."""
    import numpy as np

    turn = _running_count(group)
    order = np.argsort(turn, kind="stable")
    bounds = np.searchsorted(turn[order], np.arange(int(turn.max(initial=-1)) + 2)).tolist()
    return [order[x:y] for x, y in itertools.pairwise(bounds)]

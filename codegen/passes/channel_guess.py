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
where either drains the FIFO (``assign_channels._serializes``). Only the other pairs are placed
one flow at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from codegen.instr_dag import InstrDAG
from codegen.rules import MAX_PEERS_PER_CHANNEL

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Pairs", "first_channels", "rank_pairs"]


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


def rank_pairs(dag: InstrDAG, flows: list[list[int]], lone: list[tuple | None], pinned: bool) -> Pairs | None:
    """The lone flows as :class:`Pairs`, or None where the rank pairs may meet: a flow that
    communicates and is not lone, a hint or a pinned threadblock (``pinned``), a rank with more
    send or receive peers than a channel holds, a hold that does not end after it starts (the
    busy check then scans), or sends out of the global order."""
    import numpy as np  # not loaded by building the CLI's parser

    if pinned or not any(one is not None for one in lone):
        return None
    instrs = dag.instrs
    if any(
        one is None and any(instrs[i].send_match is not None for i in flow)
        for flow, one in zip(flows, lone, strict=True)
    ):
        return None
    kept = [k for k, one in enumerate(lone) if one is not None]
    ranks = dag.info.num_ranks
    a, b, inst = (np.fromiter((lone[k][f] for k in kept), np.int64, len(kept)) for f in (1, 2, 9))
    if _crowded(a, b, inst, ranks):  # first: the rest is not read then (at 512 ranks of DGX H100)
        return None
    fields = list(zip(*(lone[k] for k in kept), strict=True))
    s, _, _, ps, pr, d, drained, start, end, _, facing = (np.asarray(f) for f in fields)
    if (start.size and not np.all(start < end)) or np.any(np.diff(ps) <= 0):
        return None
    codes, connection = np.unique(a * ranks + b, return_inverse=True)
    turn = _running_count(connection)
    _, pair = np.unique(np.minimum(a, b) * ranks + np.maximum(a, b), return_inverse=True)
    return Pairs(
        flow=np.asarray(kept),
        send=s,
        recv=np.fromiter((flows[k][1] for k in kept), np.int64, len(kept)),
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
    )


def _crowded(a: np.ndarray, b: np.ndarray, inst: np.ndarray, ranks: int) -> bool:
    """Whether a rank sends to, or receives from, more peers in one instance than a channel holds
    (then a flow may be refused a channel for what another pair placed: at 512 ranks of DGX H100
    trees a rank's flows spread over three channels so)."""
    import numpy as np

    from common.arrays import distinct

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
    while one of them drains the FIFO (``assign_channels._serializes``)."""
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

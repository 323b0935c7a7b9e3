"""Put every instruction in a threadblock (channel DAG -> scheduled DAG).

A threadblock has at most one send peer and one receive peer on one channel, and each (channel,
peer) has at most one threadblock per direction on a rank: that threadblock owns the connection.
Threadblocks the user named, and fused ops (which need both peers), come first. Then, in the global
order, a send or receive goes to the threadblock owning its connection, else joins a compatible
threadblock that became free earliest (as the reference compiler balances load), else opens one.
A local ``cpy``/``re`` joins the threadblock of its latest predecessor on the rank (it waits for
it anyway). In a program lowered from a timed schedule (``InstrDAG.times``) a send and a receive
share a threadblock only when one op needs both (fused, or the user's): such a threadblock runs
its steps in the schedule's order, and a receive whose data comes later than the schedule said
would hold back every send behind it (on NDv2 x2 that cost the MILP allgather 8% at 1 GiB);
unless that layout exceeds the runtime's threadblocks: the compact layout 2
(``CompileOptions.compact``) pairs, per rank and channel, the busiest send peer with the idlest
receive peer, and so on (:func:`_pair`).
Ids are numbered by (channel, send peer, receive peer), or in a timed program by when each
threadblock first runs in the schedule: where sends of several threadblocks wait for one port (a
GPU's link to its switch), the timing simulator (``runtime.sim``), like the list schedule of the
Algorithm model, starts the lowest id first, so ids by peer starved the high peers (on DGX-2 x2 the
MILP allgather's sends to rank 15 ran 9 ms late, 1.48x the model at 1 GiB; by time 1.26x, and
DGX-A100 x2 1.13x -> 1.00x). A rank with no work gets one empty threadblock, since the runtime
launches one CUDA block per threadblock.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from codegen.columns import instr_columns
from codegen.instr_dag import Instr, InstrDAG
from codegen.passes.channel_flows import steps_of
from codegen.placed_ir import step_bounds, waiting_edges
from codegen.schedule import ChannelDAG, ScheduledDAG, TbPlan
from common.memo import SameObjects

if TYPE_CHECKING:
    import numpy as np

__all__ = ["assign_threadblocks", "step_bounds", "unpaired_bounds"]


@dataclass
class _Tb:
    channel: int
    send: int | None = None
    recv: int | None = None
    key: tuple | None = None  # user threadblock (rank, hint, instance), or None
    instrs: list[int] = field(default_factory=list)
    order: int = 0  # creation order, for ties
    born: int = -1  # placed in bulk: the position of the op that made it
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Placed in bulk: its groups, as slices of :attr:`_Groups.positions`; and its local ops' positions."""
    local_at: list[int] = field(default_factory=list)


class _Rank:
    def __init__(self) -> None:
        self.tbs: list[_Tb] = []
        self.owner: dict[tuple[int, str, int], _Tb] = {}  # (channel, "send"|"recv", peer) -> tb
        self.hinted: dict[tuple, _Tb] = {}
        self.open: dict[tuple[int, str], list[_Tb]] = {}
        """(channel, "send"|"recv"|"both") -> the user's-free threadblocks on it that had that side
        (both sides) free when last looked at: a side once taken stays so, so a connection looks
        at these, not at every threadblock of the rank (hundreds at 512 ranks)."""

    def new(self, channel: int, key: tuple | None = None) -> _Tb:
        tb = _Tb(channel, key=key, order=len(self.tbs))
        self.tbs.append(tb)
        if key is None:
            for side in ("send", "recv", "both"):
                self.open.setdefault((channel, side), []).append(tb)
        return tb

    def free(self, channel: int, side: str) -> list[_Tb]:
        """The threadblocks on ``channel`` with no user key and ``side`` ("both": either) free."""
        if side == "both":
            kept = [t for t in self.open.get((channel, side), ()) if t.send is None and t.recv is None]
        else:
            kept = [t for t in self.open.get((channel, side), ()) if (t.send if side == "send" else t.recv) is None]
        self.open[(channel, side)] = kept
        return kept

    def claim(self, tb: _Tb, send: int | None, recv: int | None) -> None:
        if send is not None:
            tb.send = send
            self.owner[(tb.channel, "send", send)] = tb
        if recv is not None:
            tb.recv = recv
            self.owner[(tb.channel, "recv", recv)] = tb


def assign_threadblocks(cdag: ChannelDAG, compact: int = 0) -> ScheduledDAG:
    """Threadblocks honouring hints and connection ownership; ids by (channel, send, recv).
    ``compact`` 2 and 3: a timed program's sends and receives share threadblocks too (about half
    as many, where the runtime's limit binds; :func:`_pair`)."""
    dag = cdag.dag
    pos, instrs, channels = dag.position, dag.instrs, cdag.channel
    ranks = [_Rank() for _ in range(dag.info.num_ranks)]
    pinned, _ = _SAME_DAG.get([dag], "kinds", lambda: _kinds(dag))
    for i in pinned:  # threadblocks whose peers are pinned: the user's, and fused ops'
        _pinned(ranks[instrs[i].rank], instrs[i], channels[i])
    if compact >= 2:
        _pair(cdag, ranks, balance=compact >= 3)
    if pinned:
        _place_each(cdag, ranks, timed=dag.times is not None and compact < 2)
    else:
        _place_in_bulk(cdag, ranks, timed=dag.times is not None and compact < 2)
    timed = dag.times is not None
    plans = []
    for state in ranks:
        if not state.tbs:
            state.new(0)
        if timed:
            tbs = sorted(state.tbs, key=lambda t: (pos[t.instrs[0]] if t.instrs else -1, t.order))
        else:
            tbs = sorted(
                state.tbs,
                key=lambda t: (
                    t.channel,
                    -1 if t.send is None else t.send,
                    -1 if t.recv is None else t.recv,
                    t.order,
                ),
            )
        plans.append(tuple(TbPlan(t.send, t.recv, t.channel, tuple(t.instrs)) for t in tbs))
    return ScheduledDAG(dag, tuple(plans))


def _place_each(cdag: ChannelDAG, ranks: list[_Rank], timed: bool) -> None:
    """Each instruction, in the global order, into its connection's threadblock, else where
    :func:`_place` puts it (``timed``: sends and receives kept apart)."""
    dag = cdag.dag
    pos, instrs, channels = dag.position, dag.instrs, cdag.channel
    _, plain = _SAME_DAG.get([dag], "kinds", lambda: _kinds(dag))
    where: list[_Tb | None] = [None] * len(instrs)  # a list, not a dict: one entry per instruction
    owners = [state.owner for state in ranks]
    rank_of = _SAME_DAG.get([dag], "ranks", lambda: [ins.rank for ins in instrs])
    for i in dag.order:
        channel, connection = channels[i], plain[i]
        # most sends and receives: their connection's threadblock (what _place would give them)
        tb = None if connection is None or channel is None else owners[rank_of[i]].get((channel, *connection))
        if tb is None:
            ins = instrs[i]
            preds = (  # a local op's threadblocks before it on its rank (only a local op follows them)
                [where[e.pred] for e in dag.preds[i] if where[e.pred] is not None and rank_of[e.pred] == ins.rank]
                if channel is None
                else []
            )
            tb = _place(ranks[ins.rank], ins, channel, preds, pos, timed)
        tb.instrs.append(i)
        where[i] = tb


def _place_in_bulk(cdag: ChannelDAG, ranks: list[_Rank], timed: bool) -> None:
    """:func:`_place_each` where no instruction's peers are pinned: a send or receive joins the
    threadblock of the first one of its group (rank, channel, side, peer), so only those and the
    local ops are placed one by one, in the order, and the rest are gathered into threadblocks in
    NumPy (one at a time, 0.3-0.5 s per placement at 128 ranks)."""
    import numpy as np  # not loaded by building the CLI's parser

    dag = cdag.dag
    groups = _Groups(cdag)
    if groups.loose_channels:
        _place_each(cdag, ranks, timed)
        return
    pos, instrs, plist = dag.position, dag.instrs, groups.positions
    tb_of = groups.owned(ranks)  # per group (a compact layout's pairs own most)
    for g, tb in enumerate(tb_of):
        if tb is not None:
            tb.spans.append(groups.slice(g))
    loose: dict[int, _Tb] = {}  # per local op
    opened = _opened(groups, ranks) if timed and all(tb is None for tb in tb_of) else None
    tb_of = tb_of if opened is None else opened
    for i in groups.events(tb_of) if opened is None else groups.loose_in_order():
        g = groups.group[i]
        state, p = ranks[instrs[i].rank], pos[i]
        if g < 0:
            tb = loose[i] = _local(state, dag, i, (groups, tb_of, loose))
            tb.local_at.append(p)
            continue
        ins = instrs[i]
        side, peer = ("send", ins.send_to) if ins.send_to is not None else ("recv", ins.recv_from)
        channel = cdag.channel[i]
        tb = state.owner.get((channel, side, peer))
        if tb is None:
            free = state.free(channel, "both" if timed else side)
            tb = min(free, key=lambda t: (*_so_far(t, p, plist)[::-1], t.order), default=None)
            if tb is None:
                tb = state.new(channel)
            state.claim(tb, ins.send_to, ins.recv_from)
        tb_of[g] = tb
        tb.spans.append(groups.slice(g))
    every = [tb for state in ranks for tb in state.tbs]
    index = {id(tb): k for k, tb in enumerate(every)}
    of_group = np.fromiter((index[id(tb)] for tb in tb_of), np.int64, len(tb_of))
    owner = np.full(len(instrs), -1, np.int64)
    owner[groups.members] = of_group[groups.group_of_members]
    for i, tb in loose.items():
        owner[i] = index[id(tb)]
    by_tb = np.lexsort((np.asarray(pos, dtype=np.int64), owner))
    counts = np.bincount(owner, minlength=len(every)).tolist()
    flat, start = by_tb.tolist(), 0
    for tb, k in zip(every, counts, strict=True):
        tb.instrs, start = flat[start : start + k], start + k


def _opened(groups: _Groups, ranks: list[_Rank]) -> list[_Tb] | None:
    """Per group, its threadblock as :func:`_place_in_bulk`'s loop gives it where sends and
    receives keep apart (``timed``) and no threadblock is owned before: the first of each group
    opens one (it would join one with both sides free, and only a rank's first op, if local,
    opens such a one), so each rank's threadblocks are made at once, in the order of their first
    ops (``_Tb.born``: where; a local op joins one made before it). None where a rank's first op is
    local (the loop places those)."""
    import numpy as np

    first, of_rank = groups.pos[groups.first], groups.first_rank
    start = np.full(len(ranks), len(groups.pos), np.int64)
    np.minimum.at(start, of_rank, first)
    if (groups.pos[groups.loose] < start[groups.loose_rank]).any():
        return None
    out: list[_Tb | None] = [None] * len(first)
    channels, codes, peers = groups.first_channel.tolist(), groups.codes.tolist(), groups.peers
    order = np.lexsort((first, of_rank))
    for g, r, b in zip(order.tolist(), of_rank[order].tolist(), first[order].tolist(), strict=True):
        state = ranks[r]
        side, peer = divmod(codes[g] % (2 * peers), peers)
        tb = out[g] = _Tb(channels[g], order=len(state.tbs), born=b, spans=[groups.slice(g)])
        state.tbs.append(tb)
        state.claim(tb, peer if side == 0 else None, peer if side == 1 else None)
    return out


class _Groups:
    """A placement's sends and receives by group (rank, channel, side, peer), each group's members
    in the order; the instructions :func:`_place_in_bulk` places one by one (the first of each
    group and the local ops), in the order."""

    def __init__(self, cdag: ChannelDAG) -> None:
        import numpy as np

        dag = cdag.dag
        rank, side, peer, _ = _SAME_DAG.get([dag], "plain", lambda: _plain(dag))
        pos = _SAME_DAG.get([dag], "positions", lambda: np.asarray(dag.position, dtype=np.int64))
        channel = np.array(cdag.channel, dtype=np.float64)  # None: NaN
        has = ~np.isnan(channel)
        grouped = has & (side >= 0)
        members = np.flatnonzero(grouped)
        ch = channel[members].astype(np.int64)
        wide, peers = int(ch.max(initial=0)) + 1, int(peer.max(initial=0)) + 1
        code = ((rank[members] * wide + ch) * 2 + side[members]) * peers + peer[members]
        by = np.lexsort((pos[members], code))
        self.members, code = members[by], code[by]
        opens = np.concatenate(([True], code[1:] != code[:-1]))[: len(code)]  # a group's first member
        starts = np.flatnonzero(opens)
        self.starts, self.ends = starts.tolist(), [*starts[1:].tolist(), len(code)]
        self.group_of_members = np.cumsum(opens) - 1
        group = np.full(len(dag.instrs), -1, np.int64)
        group[self.members] = self.group_of_members
        self.group = group.tolist()
        self.first = self.members[starts]
        self.positions = pos[self.members].tolist()
        self.loose = np.flatnonzero(~grouped)
        self.loose_channels = bool(has[self.loose].any())
        self.codes, self.wide, self.peers, self.pos = code[starts], wide, peers, pos
        self.first_rank, self.first_channel = rank[self.first], ch[by][starts]
        self.loose_rank = rank[self.loose]

    def slice(self, g: int) -> tuple[int, int]:
        """Where group ``g``'s members' positions are in :attr:`positions`."""
        return self.starts[g], self.ends[g]

    def owned(self, ranks: list[_Rank]) -> list[_Tb | None]:
        """Per group, the threadblock that owns its connection before any instruction is placed
        (``_pair``'s), else None."""
        import numpy as np

        keys, tbs = [], []
        for r, state in enumerate(ranks):
            for (channel, side, peer), tb in state.owner.items():
                if channel is not None and channel < self.wide and peer < self.peers:
                    keys.append(((r * self.wide + channel) * 2 + _SIDES.index(side)) * self.peers + peer)
                    tbs.append(tb)
        out: list[_Tb | None] = [None] * len(self.codes)
        at = np.searchsorted(self.codes, np.asarray(keys, dtype=np.int64))
        for k, g in enumerate(at.tolist()):
            if g < len(self.codes) and self.codes[g] == keys[k]:
                out[g] = tbs[k]
        return out

    def loose_in_order(self) -> list[int]:
        """The local ops, in the order."""
        import numpy as np

        return self.loose[np.argsort(self.pos[self.loose], kind="stable")].tolist()

    def events(self, owned: list[_Tb | None]) -> list[int]:
        """The instructions placed one by one, in the order: the local ops, and the first of each
        group no threadblock owns yet."""
        import numpy as np

        free = np.fromiter((tb is None for tb in owned), bool, len(owned))
        events = np.concatenate((self.first[free], self.loose))
        return events[np.argsort(self.pos[events], kind="stable")].tolist()


def _so_far(tb: _Tb, p: int, positions: list[int]) -> tuple[int, int]:
    """How many instructions ``tb`` holds before position ``p``, and where the last is (-1: none)."""
    count, last = len(tb.local_at), tb.local_at[-1] if tb.local_at else -1
    for a, b in tb.spans:
        k = bisect.bisect_left(positions, p, a, b)
        if k > a:
            count, last = count + k - a, max(last, positions[k - 1])
    return count, last


def _local(state: _Rank, dag: InstrDAG, i: int, placed: tuple) -> _Tb:
    """:func:`_place` for local op ``i`` placed in bulk: the threadblock of its latest predecessor
    on the rank, else the one with the fewest instructions so far, else a new one (``placed``: the
    groups, the threadblock of each, and of each local op placed)."""
    groups, tb_of, loose = placed
    rank, p, plist = dag.instrs[i].rank, dag.position[i], groups.positions
    preds = []
    for e in dag.preds[i]:
        g = groups.group[e.pred]
        tb = tb_of[g] if g >= 0 else loose.get(e.pred)
        if tb is not None and dag.instrs[e.pred].rank == rank:
            preds.append(tb)
    if preds:
        return max(preds, key=lambda t: _so_far(t, p, plist)[1])
    free = [t for t in state.tbs if t.key is None and t.born < p]
    return min(free, key=lambda t: (_so_far(t, p, plist)[0], t.order)) if free else state.new(0)


def _pair(cdag: ChannelDAG, ranks: list[_Rank], balance: bool) -> None:
    """Threadblocks for the connections no fused op pinned: on each rank and channel the busiest
    send peer with the busiest receive peer, and so on, ties by peer (so a peer exchanged with
    both ways, as alike as the ranks' loads, shares one threadblock: where the busiest send shared
    with an idle receive, a 64 KiB trees allgather on DGX H100 x4 took 1.52x its Algorithm, 1.08x
    so); with ``balance`` the busiest with the idlest (a
    threadblock's steps are both sides', and the runtimes cap them; ``steps_of`` counts the nops
    an op's waits may take). The peers of the side with more left over run alone (the busiest
    sends; the busiest receives with ``balance``, else the idlest): as few threadblocks as that
    side has peers."""
    load = _loads(cdag, ranks)
    for rank, ch in sorted({(rank, ch) for rank, ch, _ in load}):
        sends = sorted(load.get((rank, ch, "send"), {}).items(), key=lambda kv: (-kv[1], kv[0]))
        idlest = 1 if balance else -1  # the receives by load, first the idlest with ``balance``
        recvs = sorted(load.get((rank, ch, "recv"), {}).items(), key=lambda kv: (idlest * kv[1], kv[0]))
        extra = len(sends) - len(recvs)  # the busiest of the side with more peers run alone
        alone = [(p, None) for p, _ in sends[: max(extra, 0)]]
        alone += [(None, p) for p, _ in recvs[len(recvs) + min(extra, 0) :]]
        sends, recvs = sends[max(extra, 0) :], recvs[: len(recvs) + min(extra, 0)]
        state = ranks[rank]
        for send, recv in [*alone, *((s, r) for (s, _), (r, _) in zip(sends, recvs, strict=True))]:
            state.claim(state.new(ch), send, recv)


def _loads(cdag: ChannelDAG, ranks: list[_Rank]) -> dict[tuple[int, int, str], dict[int, int]]:
    """Per (rank, channel, side) the steps of each peer's plain sends or receives on it, where no
    fused op owns the connection already (the user's threadblocks are their own); summed in NumPy
    (a dict entry per instruction took 1.8 s of a 512-rank compile under the profiler)."""
    import numpy as np  # not loaded by building the CLI's parser

    dag = cdag.dag
    rank, side, peer, steps = _SAME_DAG.get([dag], "plain", lambda: _plain(dag))
    channel = np.array(cdag.channel, dtype=np.float64)  # None: NaN
    kept = ~np.isnan(channel) & (side >= 0)
    ch = channel[kept].astype(np.int64)
    wide, peers = int(ch.max(initial=0)) + 1, int(peer.max(initial=0)) + 1
    keys = ((rank[kept] * wide + ch) * 2 + side[kept]) * peers + peer[kept]
    found, where = np.unique(keys, return_inverse=True)
    sums = np.bincount(where.ravel(), weights=steps[kept], minlength=len(found))
    load: dict[tuple[int, int, str], dict[int, int]] = {}
    for key, n in zip(found.tolist(), sums.tolist(), strict=True):
        rest, p = divmod(key, peers)
        rest, s = divmod(rest, 2)
        r, c = divmod(rest, wide)
        if (c, _SIDES[s], p) not in ranks[r].owner:
            load.setdefault((r, c, _SIDES[s]), {})[p] = int(n)
    return load


_SIDES = ("send", "recv")


def _plain(dag: InstrDAG):
    """Per instruction as NumPy arrays: its rank, a plain send's or receive's side (0 send, 1
    receive, -1 neither: see :func:`_kinds`) and peer, and its steps (``steps_of``)."""
    import numpy as np

    rank, side, peer, _ = _SAME_DAG.get([dag], "sides", lambda: _sides(dag))
    return rank, side, peer, np.asarray(steps_of(dag), dtype=np.int64)


def _pinned(state: _Rank, ins: Instr, channel: int | None) -> _Tb:
    if ins.tb_hint is not None:
        key = (ins.tb_hint, ins.instance)
        tb = state.hinted.get(key)
        if tb is None:
            tb = state.hinted[key] = state.new(0 if channel is None else channel, key)
    else:
        tb = state.owner.get((channel, "send", ins.send_to)) or state.owner.get(
            (channel, "recv", ins.recv_from)
        )
        if tb is None:
            tb = state.new(channel)
    state.claim(tb, ins.send_to, ins.recv_from)
    return tb


_SAME_DAG = SameObjects()
"""Per DAG what every channel assignment and layout tried reads: :func:`_kinds`."""


def _kinds(dag: InstrDAG) -> tuple[list[int], list[tuple[str, int] | None]]:
    """The instructions whose threadblock's peers are pinned (the user's, fused ops), in order;
    per instruction, a plain send's or receive's side and peer (its connection's threadblock owns
    it once there is one), else None: one tuple per side and peer, read from :func:`_sides`."""
    import numpy as np

    from topologies.numeric import distinct

    _, side, peer, pins = _SAME_DAG.get([dag], "sides", lambda: _sides(dag))
    order = np.asarray(dag.order, dtype=np.int64)
    wide = int(peer.max(initial=0)) + 1
    code = np.where(side >= 0, side * wide + peer, -1)
    made = {c: (_SIDES[c // wide], c % wide) for c in distinct(code[code >= 0]).tolist()}
    return order[pins[order]].tolist(), [made.get(c) for c in code.tolist()]


def _sides(dag: InstrDAG):
    """Per instruction as NumPy arrays: its rank, a plain send's or receive's side (0 send, 1
    receive, -1 neither: a local op, a fused op, or one in a user's threadblock) and peer, and
    whether its threadblock's peers are pinned (the user's, fused ops); in NumPy (a loop over the
    instructions took 0.4 s a compile at 512 ranks)."""
    import numpy as np

    c = instr_columns(dag)
    rank, send, recv, hinted = c.rank, c.send_to, c.recv_from, c.tb_hint[0]
    pins = hinted | ((send >= 0) & (recv >= 0))
    side = np.where(pins | ((send < 0) & (recv < 0)), -1, np.where(send >= 0, 0, 1))
    return rank, side, np.where(side == 0, send, np.where(side == 1, recv, -1)), pins


def pinned(dag: InstrDAG) -> list[int]:
    """The instructions whose threadblock's peers are pinned (the user's, fused ops), by index."""
    import numpy as np

    return np.flatnonzero(_SAME_DAG.get([dag], "sides", lambda: _sides(dag))[3]).tolist()


def _place(state: _Rank, ins: Instr, channel: int | None, preds: list[_Tb], pos, timed: bool) -> _Tb:
    if ins.tb_hint is not None or (ins.send_to is not None and ins.recv_from is not None):
        return _pinned(state, ins, channel)
    if channel is None:  # a local op: follow its latest predecessor on this rank
        if preds:
            return max(preds, key=lambda t: pos[t.instrs[-1]])
        free = [t for t in state.tbs if t.key is None]
        return min(free, key=lambda t: (len(t.instrs), t.order)) if free else state.new(0)
    side, peer = ("send", ins.send_to) if ins.send_to is not None else ("recv", ins.recv_from)
    tb = state.owner.get((channel, side, peer))
    if tb is None:
        free = state.free(channel, "both" if timed else side)
        tb = min(
            free, key=lambda t: (pos[t.instrs[-1]] if t.instrs else -1, len(t.instrs), t.order), default=None
        )
        if tb is None:
            tb = state.new(channel)
        state.claim(tb, ins.send_to, ins.recv_from)
    return tb


def unpaired_bounds(dag: InstrDAG) -> tuple[tuple[int, int] | None, ...]:
    """Per rank of a timed program (``dag.times``), for every channel assignment the layouts that
    keep sends and receives apart (``compact`` 0 and 1) may make: (threadblocks at least, the
    largest id of a threadblock others wait on at least, -1: none proven); None where a rank holds
    a user's threadblock, a fused op or an unmatched transfer, and every rank of an untimed
    program (no bound: its sends and receives share threadblocks). Known from the ordered
    DAG alone, so the compiler rules such a layout out before assigning its channels.

    Why it holds. There :func:`assign_threadblocks` gives each (channel, side, peer) of a rank a
    threadblock of its own: a send or receive joins its connection's owner or a threadblock with
    both sides free, then claims a side. So the rank's (side, peer) groups of plain sends and
    receives (each on one channel or more) have at least one threadblock each, none shared: as
    many threadblocks at least. Ids follow each threadblock's first instruction in the order, and
    a group's first instruction (at position ``f(G)``) opens a threadblock there. A group ``G`` is
    waited on where one of its instructions precedes (not as a match) a plain instruction of
    another group, which is in another threadblock; the one holding it starts at ``f(G)`` or later,
    so at least the groups that start before ``f(G)`` come before it: its id is at least their
    number. Local ops join a threadblock that has started, except a rank's first op, which opens
    one with both sides free that one group may then take and start early: where a rank begins
    with a local op the second largest such number is the bound."""
    if dag.times is None:
        return (None,) * dag.info.num_ranks
    return _SAME_DAG.get([dag], "unpaired", lambda: _unpaired(dag))


def _unpaired(dag: InstrDAG) -> tuple[tuple[int, int] | None, ...]:
    """:func:`unpaired_bounds`, computed in NumPy from :func:`_sides` (a loop over the
    instructions took 0.4 s a compile at 512 ranks): a plain op's group is its peer * 2 (+1 a
    receive), where it is matched."""
    import numpy as np

    rank, side, peer, pins = _SAME_DAG.get([dag], "sides", lambda: _sides(dag))
    n, ranks = len(dag.instrs), dag.info.num_ranks
    match = instr_columns(dag).send_match
    received = np.zeros(n, bool)
    received[match[match >= 0]] = True
    group = np.where((side == 0) & (match >= 0), peer * 2, np.where((side == 1) & received, peer * 2 + 1, -1))
    unknown = np.zeros(ranks, bool)  # a user's threadblock, a fused op, or an unmatched transfer
    unknown[rank[pins | ((side >= 0) & (group < 0))]] = True
    pos = np.asarray(dag.position, dtype=np.int64)
    order = np.asarray(dag.order, dtype=np.int64)
    leads, at = np.unique(rank[order], return_index=True)  # each rank's first op
    local = np.zeros(ranks, bool)
    local[leads] = ~pins[order[at]] & (side[order[at]] < 0)  # neither sends nor receives
    width = int(group.max(initial=0)) + 1
    grouped = np.flatnonzero(group >= 0)
    codes, where = np.unique(rank[grouped] * width + group[grouped], return_inverse=True)
    first = np.full(len(codes), n, np.int64)
    np.minimum.at(first, where.ravel(), pos[grouped])  # f(G): where each group starts
    waited = _waited(dag, group, ranks)
    bounds = np.searchsorted(codes, np.arange(ranks + 1) * width)
    out: list[tuple[int, int] | None] = []
    for r in range(ranks):
        if unknown[r]:
            out.append(None)
            continue
        span = slice(bounds[r], bounds[r + 1])
        starts = dict(zip((codes[span] % width).tolist(), first[span].tolist(), strict=True))  # group -> f(G)
        ordered = sorted(starts.values())
        ids = sorted((bisect.bisect_left(ordered, starts[g]) for g in waited[r]), reverse=True)
        k = 1 if local[r] else 0
        out.append((len(starts), ids[k] if k < len(ids) else -1))
    return tuple(out)


def _waited(dag: InstrDAG, of: np.ndarray, ranks: int) -> list[set[int]]:
    """Per rank the groups of :func:`_unpaired` (``of``: each instruction's, -1 none) that a plain
    op of another group on the rank waits on (an edge but a match); read from the edges in NumPy
    (a loop over a million edges at 512 ranks)."""
    from topologies.numeric import distinct

    pred, succ = waiting_edges(dag)
    rank = _SAME_DAG.get([dag], "sides", lambda: _sides(dag))[0]
    g, h = of[pred], of[succ]
    kept = (g >= 0) & (h >= 0) & (g != h) & (rank[pred] == rank[succ])
    width = int(of.max(initial=0)) + 1
    waited: list[set[int]] = [set() for _ in range(ranks)]
    for key in distinct(rank[pred[kept]] * width + g[kept]).tolist():
        waited[key // width].add(key % width)
    return waited

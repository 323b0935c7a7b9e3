"""Give every send and receive a channel (instruction DAG -> channel DAG).

Instructions that must share a channel form a *flow*: a send and its receive (one connection),
the two transfers of a fused op (one threadblock), and everything the user put in one threadblock.
Flows take the user's channel if given, else channels ``0 .. channels-1`` round robin. A flow
moves to the next channel when the one it would take cannot hold it: on some connection its
transfers would be received in another order than sent (the global order decides both), a
threadblock would need two send peers or two receive peers, or a rank would talk to more than
``MAX_PEERS_PER_CHANNEL`` peers in one direction on the channel (the runtimes' threadblocks per
channel, :mod:`codegen.rules`). Unless the
user chose the channel, a flow also moves on rather than share a channel with a transfer the other
way between the same ranks at the same depth when either has more calls than the FIFO holds
(``codegen.protocols``) and is ordered together with its receive: an exchange on one channel would
run one direction after the other. In a program timed by the Algorithm model
(``ProgramInfo.model_timed``) a flow prefers, in that order, a channel
on whose connections nothing else runs while it does (``InstrDAG.overlap``): transfers the schedule
runs side by side between two ranks (a connection of several links) then get a threadblock each
instead of queueing on one. In a compact layout (``CompileOptions.compact``, where the default one
exceeds the runtime's threadblocks) each connection keeps to its share of the channels
(``channel_flows.channel_shares``), round robin per connection, and a busy channel of its own comes
before any other.
Instance ``i`` of a replicated program uses channels
``i * K .. i * K + K - 1`` where ``K`` is the channels one instance needs.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterator

from codegen.errors import CodegenError, DslError
from codegen.instr_dag import InstrDAG
from codegen.passes.channel_flows import channel_shares, lone_arrays, steps_of, unset_as_none
from codegen.passes.channel_flows import flows_of as _flows
from codegen.passes.channel_flows import lone_flows as _lone
from codegen.passes.channel_guess import Pairs, first_channels, placed_in_rounds, rank_pairs
from codegen.passes.channel_taken import Conn, Moves, Taken, commit, connection_busy, fits, hold, serializes
from codegen.rules import MAX_CHANNELS, MAX_PEERS_PER_CHANNEL
from codegen.schedule import ChannelDAG
from common.memo import SameObjects

__all__ = ["assign_channels", "steps_of"]


def _groups(dag: InstrDAG) -> dict[int, tuple]:
    """Instructions that pin a threadblock's peers: ``i -> (rank, key, send peer, recv peer)``; among
    those ``assign_threadblocks`` reads in bulk once per DAG (not a loop over a million at 512 ranks)."""
    from codegen.passes.assign_threadblocks import pinned

    out = {}
    for i in pinned(dag):
        ins = dag.instrs[i]
        if ins.tb_hint is not None:
            out[i] = (ins.rank, ("tb", ins.tb_hint, ins.instance), ins.send_to, ins.recv_from)
        elif ins.send_to is not None and ins.recv_from is not None:
            out[i] = (
                ins.rank,
                ("pair", ins.send_to, ins.recv_from, ins.instance),
                ins.send_to,
                ins.recv_from,
            )
    return out


_SAME_DAG = SameObjects()
"""What the last DAG gives every run of this pass (the compiler reruns it on one DAG for each
channel count and layout it tries): its flows, pinned groups, steps, loads, and the channels
assigned per (count, compact or not)."""


def assign_channels(
    dag: InstrDAG, channels: int = 1, max_channels: int = MAX_CHANNELS, compact: int = 0
) -> ChannelDAG:
    """Channels for flows: the user's, else round robin over ``channels``, moving on conflicts
    (``compact`` 1 or more: each connection over its share of them, ``channel_flows.channel_shares``).

    A compact layout at one channel takes the default layout's channels where no flow of that one
    passed a busy channel over (the 512-rank alltoall's layout 1 assigned them again, 3-4 s): both
    try a flow's hint, or channels 0, 1, 2, ... in order (each share is one, each round robin starts
    at 0), the default one in a timed program first those not busy while the flow runs; where none
    was, each compact flow, given the same channels taken before it, takes the same (by induction)."""
    if channels < 1:
        raise CodegenError(f"{dag.info.name}: channels: expected at least 1, got {channels}")
    groups = _SAME_DAG.get([dag], "groups", lambda: _groups(dag))
    _check_hinted_threadblocks(dag, groups)
    # the compact layouts differ only after this pass: the compiler's layouts 1 and 2 at one width
    # would assign the same channels twice; and at one channel they often take the default one's
    one = _SAME_DAG.get([dag], ("at one channel", max_channels), dict)  # "plain": (its, passed busy)
    if compact and channels == 1 and one.get("plain", (None, True))[1] is False:
        return ChannelDAG(dag, one["plain"][0])
    key = ("assigned", channels, max_channels, compact > 0)
    made = _SAME_DAG.get([dag], key, lambda: _assign(dag, groups, channels, max_channels, compact > 0))
    if not compact and channels == 1:
        one["plain"] = made
    return ChannelDAG(dag, made[0])  # made here: the memo holds no reference to its key, the DAG


def _assign(dag: InstrDAG, groups: dict, channels: int, max_channels: int, compact: bool) -> tuple[tuple, bool]:
    """The channels :func:`assign_channels` gives, its hints checked; whether a flow passed a busy one."""
    taken = Taken()
    local: list[int | None] = [None] * len(dag.instrs)  # each instruction's channel in its instance
    shares = channel_shares(dag, channels, max_channels) if compact else None
    auto: dict[tuple, int] = defaultdict(int)
    hinted = _SAME_DAG.get([dag], "hinted", lambda: any(ins.channel_hint is not None for ins in dag.instrs))
    flows = _SAME_DAG.get([dag], "flows", lambda: _flows(dag))
    timed = dag.info.model_timed and dag.times is not None
    pinned = bool(groups) or hinted
    pairs = _SAME_DAG.get([dag], "pairs", lambda: rank_pairs(dag, flows, lone_arrays(dag, flows, groups, hinted), pinned))

    def lone_of() -> list[tuple | None]:  # built only for flows placed one at a time
        return _SAME_DAG.get([dag], "lone", lambda: _lone(dag, flows, groups, hinted))

    if pairs is not None:
        made = _assign_pairs(dag, pairs, lone_of, (channels, max_channels, shares), timed)
        if made is not None:
            return made
    lone = lone_of()
    tries = _Tries(max_channels)
    plain = [tries.get(channels, k, True) for k in range(channels)] if shares is None else []  # by turn
    for flow, one in zip(flows, lone, strict=True):
        if one is not None:  # one transfer, nothing pinned, no hint: the common case, inlined
            key = (one[1], one[2]) if shares is not None else None
            k = auto[key]
            auto[key] = k + 1
            if key is None:
                lead, rest = plain[k % channels]
            else:
                own = shares.get(key, 1)
                lead, rest = tries.get(own, k % own, False)
            local[flow[0]] = local[flow[1]] = _place_lone(dag, one, lead, rest, timed, taken, max_channels)
            continue
        hint = _hint(dag, flow) if hinted else None
        transfers = [(i, dag.instrs[i].send_match) for i in flow if dag.instrs[i].send_match is not None]
        pinned = [groups[i] for i in flow if i in groups]
        if not transfers and not pinned:
            continue
        lead = max_channels  # the candidates a timed flow sorts by whether busy
        if hint is not None:
            candidates = [hint]
        else:
            key = _connection(dag, flow[0]) if shares is not None else None
            own = channels if key is None else shares.get(key, 1)
            head, tail = tries.get(own, auto[key] % own, True)
            candidates = [*head, *tail]
            auto[key] += 1
            lead = max_channels if shares is None else own
        ch = _place(dag, flow, transfers, pinned, (candidates, lead), hint is not None, taken, max_channels)
        for i in flow:
            local[i] = ch
    top = max((c for c in local if c is not None), default=0)
    return _global_channels(dag, local, top, max_channels), taken.passed_busy


def _assign_pairs(
    dag: InstrDAG, pairs: Pairs, lone_of: Callable[[], list[tuple | None]], width: tuple, timed: bool
) -> tuple[tuple, bool] | None:
    """:func:`_assign` where the rank pairs cannot meet (:mod:`codegen.passes.channel_guess`): the
    pairs whose flows all take the channel they try first, at once; the others' flows one at a
    time as :func:`_assign` places them, in the order (``width``: the channels, the most, and
    each connection's share in a compact layout). Where they meet only by a channel's peers (at
    512 ranks of DGX H100 a rank has 70), all flows round by round (``channel_guess.placed_in_rounds``:
    0.3-0.7 s a run where one at a time took 1.2-2.5 s), or None where that cannot tell."""
    import numpy as np  # not loaded by building the CLI's parser

    channels, max_channels, shares = width
    local = np.full(len(dag.instrs), -1, np.int64)
    if pairs.crowded:
        placed = placed_in_rounds(pairs, width, timed)
        if placed is None:
            return None
        local[pairs.send] = local[pairs.recv] = placed[0]
        return _global_channels(dag, *unset_as_none(local), max_channels), placed[1]
    first, fine, busy = first_channels(pairs, channels, shares, timed)
    local[pairs.send[fine]] = local[pairs.recv[fine]] = first[fine]
    taken, tries = Taken(), _Tries(max_channels)
    plain = [tries.get(channels, k, True) for k in range(channels)] if shares is None else []  # by turn
    flow, recv, turn = pairs.flow.tolist(), pairs.recv.tolist(), pairs.turn.tolist()
    lone = lone_of() if not fine.all() else []
    for j in np.flatnonzero(~fine).tolist():
        one = lone[flow[j]]
        if shares is None:  # the j-th flow of all takes turn j, that of its connection in a compact layout
            lead, rest = plain[j % channels]
        else:
            own = shares.get((one[1], one[2]), 1)
            lead, rest = tries.get(own, turn[j] % own, False)
        local[one[0]] = local[recv[j]] = _place_lone(dag, one, lead, rest, timed, taken, max_channels)
    return _global_channels(dag, *unset_as_none(local), max_channels), busy or taken.passed_busy


class _Tries:
    """The order a flow tries channels in, per (its channels, where its round robin is): its own
    ``start .. own-1, 0 .. start-1``, then ``own .. max_channels-1``; split into the lead (sorted
    by whether busy in a timed program) and the rest. Built once per pair, not a list per flow."""

    def __init__(self, max_channels: int) -> None:
        self.max_channels = max_channels
        self.made: dict[tuple, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def get(self, own: int, start: int, all_lead: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(lead, rest): with ``all_lead`` every candidate leads, else only the flow's own."""
        key = (own, start, all_lead)
        if key not in self.made:
            candidates = (*range(start, own), *range(start), *range(own, self.max_channels))
            cut = len(candidates) if all_lead else own
            self.made[key] = (candidates[:cut], candidates[cut:])
        return self.made[key]


def _place_lone(
    dag: InstrDAG, one: tuple, lead: tuple[int, ...], rest: tuple[int, ...], timed: bool, taken: Taken,
    max_channels: int,
) -> int:
    """:func:`_place` for a flow of one transfer, nothing pinned, no hint: the same tries, without
    building :class:`Moves` or a list of candidates per flow (487,424 flows per run at 512 ranks);
    :func:`channel_taken.busy_while` inlined for the common case of a hold that ends after it starts; one
    lookup of the connection per channel tried (the send goes to its receiver's rank)."""
    s, a, b, _, _, _, _, start, end, inst, _ = one
    conns = taken.conns
    busy: list[int] = []
    for ch in lead:
        key = (a, b, inst, ch)
        there = conns.get(key)
        if timed and there is not None and (
            bisect.bisect_left(there.starts, end) - bisect.bisect_right(there.ends, start) > 0
            if start < end and not there.inverted
            else any(dag.overlap(s, other) for other in there.held)
        ):
            busy.append(ch)
            taken.passed_busy = True
            continue
        if _lone_fits(one, ch, there, taken):
            return _commit_lone(one, key, there, taken, timed)
    for ch in (*busy, *rest):
        key = (a, b, inst, ch)
        there = conns.get(key)
        if _lone_fits(one, ch, there, taken):
            return _commit_lone(one, key, there, taken, timed)
    raise CodegenError(
        f"{dag.info.name}: rank {a}: no channel below {max_channels} can carry the flow of "
        f"instruction {dag.instrs[s]} in order"
    )


def _lone_fits(one: tuple, ch: int, there: Conn | None, taken: Taken) -> bool:
    """:func:`fits` and not :func:`serializes`, for one transfer and nothing pinned, on channel
    ``ch`` of its connection (``there``: what that holds). A connection that holds a transfer has
    its peers on the channel already (neither side ever passes ``MAX_PEERS_PER_CHANNEL``)."""
    _, a, b, ps, pr, d, drained, _, _, inst, facing = one
    if there is None or not there.fifo:
        peers, full = taken.peers, MAX_PEERS_PER_CHANNEL  # a peer more than that many is refused
        have = peers.get((a, inst, ch, "send"))
        if have is not None and len(have) >= full and (b not in have or len(have) > full):
            return False
        have = peers.get((b, inst, ch, "recv"))
        if have is not None and len(have) >= full and (a not in have or len(have) > full):
            return False
    else:
        placed = there.fifo
        if placed[-1][0] < ps:  # after every transfer there: the last is its only neighbour
            if placed[-1][1] > pr:
                return False
        else:
            k = bisect.bisect(placed, (ps, pr))
            if (k > 0 and placed[k - 1][1] > pr) or (k < len(placed) and pr > placed[k][1]):
                return False
    if facing:
        found = taken.by_depth.get((b, a, inst, ch, d))
        if found is not None and (found or drained):
            return False
    return True


def _commit_lone(one: tuple, key: tuple, there: Conn | None, taken: Taken, timed: bool) -> int:
    """:func:`commit` (and :func:`hold`) for one transfer, nothing pinned, on the connection
    ``key`` (``there``: what it holds); its channel."""
    s, a, b, ps, pr, d, drained, start, end, inst, facing = one
    ch = key[3]
    if there is None:
        there = taken.conns[key] = Conn()
        taken.peers[(a, inst, ch, "send")].add(b)
        taken.peers[(b, inst, ch, "recv")].add(a)
    fifo = there.fifo  # Conn.add and Conn.hold inlined: once per flow
    if not fifo or fifo[-1][0] < ps:
        fifo.append((ps, pr))
    else:
        bisect.insort(fifo, (ps, pr))
    if facing:
        slot = (a, b, inst, ch, d)
        taken.by_depth[slot] = taken.by_depth.get(slot, False) or drained
    if timed:
        there.held.append(s)
        bisect.insort(there.starts, start)
        bisect.insort(there.ends, end)
        if end < start:
            there.inverted = True
    return ch


def _connection(dag: InstrDAG, i: int) -> tuple[int, int] | None:
    """The connection (sender, receiver) an instruction's flow is counted on, if it communicates."""
    ins = dag.instrs[i]
    if ins.send_to is not None:
        return (ins.rank, ins.send_to)
    return None if ins.recv_from is None else (ins.recv_from, ins.rank)


def _hint(dag: InstrDAG, flow: list[int]) -> int | None:
    """The channel the user gave the flow's ops, if any (they must agree)."""
    hints = {h for i in flow if (h := dag.instrs[i].channel_hint) is not None}
    if len(hints) > 1:
        raise DslError(
            f"{dag.info.name}: rank {dag.instrs[flow[0]].rank}: ops that must share a channel (one connection "
            f"or one threadblock) were given channels {sorted(hints)}"
        )
    return hints.pop() if hints else None


def _place(
    dag: InstrDAG,
    flow: list[int],
    transfers: list[tuple[int, int]],
    pinned: list[tuple],
    choice: tuple[list[int], int],
    hinted: bool,
    taken: Taken,
    max_channels: int,
) -> int:
    """The first candidate channel that can carry the flow (unless the user chose it, one where it
    does not serialize an exchange, and in a timed program one not busy while it runs), taken.
    ``choice``: the candidates, and how many lead (in a compact layout the flow's own: only those
    are sorted by whether busy, the others stay a last resort)."""
    candidates, own = choice
    first = dag.instrs[flow[0]]
    inst = first.instance
    timed = dag.info.model_timed and dag.times is not None
    if timed and not hinted:  # a connection busy while the flow's transfers run is the last resort
        candidates = _idle_first(dag, transfers, inst, (candidates, own), taken)
    moves = Moves(dag, transfers)
    for ch in candidates:
        if fits(moves, pinned, inst, ch, taken) and (
            hinted or not serializes(dag, moves, inst, ch, taken.by_depth)
        ):
            commit(moves, pinned, inst, ch, taken)
            if timed:
                for s, _ in transfers:
                    hold(dag, s, (dag.instrs[s].rank, dag.instrs[s].send_to, inst, ch), taken)
            return ch
    raise CodegenError(
        f"{dag.info.name}: rank {first.rank}: no channel below {max_channels} can carry the flow of "
        f"instruction {first} in order"
    )


def _idle_first(
    dag: InstrDAG, transfers: list[tuple[int, int]], inst: int, choice: tuple[list[int], int], taken: Taken
) -> Iterator[int]:
    """The candidates in the order a timed flow tries them: its lead ones on which no connection is
    busy while it runs, then the busy ones, each in order, then the rest. Whether a channel is busy
    is found only when it comes to be tried: most flows take the first (a sort by it looked at all
    32 channels for each of a trees allgather's 280,160 flows at 64 ranks)."""
    candidates, own = choice
    lead = candidates if own >= len(candidates) else candidates[:own]
    busy = []
    for ch in lead:
        if any(connection_busy(dag, s, inst, ch, taken) for s, _ in transfers):
            busy.append(ch)
            taken.passed_busy = True
        else:
            yield ch
    yield from busy
    yield from candidates[len(lead) :]


def _global_channels(dag: InstrDAG, local: list, top: int, max_channels: int) -> tuple[int | None, ...]:
    """Instance ``i`` takes channels ``i * K .. i * K + K - 1`` (``K``: the channels one uses, ``top``
    the highest of ``local``, 0 where none is set)."""
    per_instance = 1 + top
    if _SAME_DAG.get([dag], "one instance", lambda: all(ins.instance == 0 for ins in dag.instrs)):
        channel = tuple(local)  # every instruction in instance 0: its channel is its local one
        widest = top
    else:
        channel = tuple(
            None if c is None else ins.instance * per_instance + c for c, ins in zip(local, dag.instrs, strict=True)
        )
        widest = max((c for c in channel if c is not None), default=0)
    if widest >= max_channels:
        raise CodegenError(
            f"{dag.info.name}: {dag.info.instances} instance(s) x {per_instance} channel(s) exceed the "
            f"{max_channels} channels of the runtime"
        )
    return channel


def _check_hinted_threadblocks(dag: InstrDAG, groups: dict[int, tuple]) -> None:
    peers: dict[tuple, tuple[set, set]] = defaultdict(lambda: (set(), set()))
    for rank, key, send, recv in groups.values():
        if key[0] == "tb":
            sends, recvs = peers[(rank, key)]
            if send is not None:
                sends.add(send)
            if recv is not None:
                recvs.add(recv)
    for (rank, key), (sends, recvs) in sorted(peers.items(), key=lambda kv: (kv[0][0], kv[0][1][1:])):
        if len(sends) > 1 or len(recvs) > 1:
            raise DslError(
                f"{dag.info.name}: rank {rank} threadblock {key[1]}: a threadblock has one send peer and one "
                f"receive peer, the ops given to it send to {sorted(sends)} and receive from {sorted(recvs)}"
            )

"""What the channel assignment works on: the flows, instructions that must share a channel (a send
and its receive, the transfers of a fused op, one hinted threadblock), and each connection's load,
the steps it takes, which sets its share of the channels in a compact layout
(``CompileOptions.compact``). Computed once per DAG: the compiler assigns channels to one DAG for
each width and layout it tries. Most flows are one send and its receive with nothing pinned: what
placing one reads is gathered once (:func:`lone_flows`)."""

from __future__ import annotations

from collections import defaultdict
from operator import attrgetter
from typing import TYPE_CHECKING

from codegen.chunk_dag import DepKind
from codegen.columns import instr_columns
from codegen.instr_dag import InstrDAG
from codegen.protocols import fifo_calls
from common.memo import SameObjects

if TYPE_CHECKING:
    import numpy as np

__all__ = ["channel_shares", "flows_of", "lone_arrays", "lone_flows", "steps_of", "unset_as_none"]

_SAME_DAG = SameObjects()
"""What the last DAG gives every run of the channel assignment: its steps, loads and lone flows."""


class _Flows:
    """Union-find over instruction indices."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def flows_of(dag: InstrDAG) -> list[list[int]]:
    """The instructions that must share a channel (a send and its receive, one hinted
    threadblock), each flow in the global order, flows by their first instruction."""
    instrs, pos = dag.instrs, dag.position
    chained = _chains(dag)
    if chained is not None:
        return chained
    flows = _Flows(len(instrs))
    by_hint: dict[tuple, int] = {}
    for i, ins in enumerate(instrs):
        if ins.send_match is not None:
            flows.union(i, ins.send_match)
        if ins.tb_hint is not None:
            key = (ins.rank, ins.tb_hint, ins.instance)
            flows.union(i, by_hint.setdefault(key, i))
    members: dict[int, list[int]] = defaultdict(list)
    for i in sorted(range(len(instrs)), key=lambda i: pos[i]):
        members[flows.find(i)].append(i)
    return sorted(members.values(), key=lambda m: pos[m[0]])


def _chains(dag: InstrDAG) -> list[list[int]] | None:
    """:func:`flows_of` where no instruction has a threadblock hint and none is the match of two
    sends: each flow is then a chain of matches, found in NumPy by pointer jumping to its head
    (where the union-find took 1.9 s of a 512-rank compile under the profiler); None otherwise."""
    import numpy as np  # not loaded by building the CLI's parser

    n, c = len(dag.instrs), instr_columns(dag)
    if c.tb_hint[0].any():
        return None
    match = c.send_match
    sends = np.flatnonzero(match >= 0)
    if np.bincount(match[sends], minlength=n).max(initial=0) > 1:
        return None
    head = np.arange(n, dtype=np.int64)
    head[match[sends]] = sends  # each matched instruction points at its send
    for _ in range(n.bit_length() + 1):  # halves what is left of every chain
        jumped = head[head]
        if np.array_equal(jumped, head):
            break
        head = jumped
    else:
        return None  # a cycle of matches: the union-find's answer
    order = np.asarray(dag.order, dtype=np.int64)  # the instructions by position
    by_flow = order[np.argsort(head[order], kind="stable")]  # flows together, each in the order
    heads = head[by_flow]
    starts = np.flatnonzero(np.concatenate(([True], heads[1:] != heads[:-1])))
    ends = np.append(starts[1:], n)
    first = np.asarray(dag.position, dtype=np.int64)[by_flow[starts]]
    ranked = np.argsort(first, kind="stable")
    flat = by_flow.tolist()
    return [flat[a:b] for a, b in zip(starts[ranked].tolist(), ends[ranked].tolist(), strict=True)]


def channel_shares(dag: InstrDAG, channels: int, max_channels: int) -> dict[tuple[int, int], int]:
    """The channels each connection spreads over in a compact layout: ``channels`` for the busiest,
    proportionally fewer, at least one, for the others, none more than ``max_channels`` (the
    compiler widens ``channels`` past it while the lighter ones still take too many steps). A
    connection's load is the steps its busier side takes: one per transfer, and a ``nop`` per
    dependency beyond the first (an upper bound: ``fold_deps_into_nops``). Spreading every
    connection over every channel gives a rank a threadblock per peer and channel: at 128 ranks of
    DGX H100 trees 262, where a rank's 22 peers need 72 (the runtimes let 128 be waited on)."""
    by_load = _SAME_DAG.get([dag], "by load", lambda: _by_load(dag))
    busiest = max(by_load, default=1)
    shares: dict[tuple[int, int], int] = {}
    for n, connections in by_load.items():  # one share per distinct load (a handful), not per connection
        shares.update(dict.fromkeys(connections, min(max(1, -(-channels * n // busiest)), max_channels)))
    return shares


def _by_load(dag: InstrDAG) -> dict[int, list[tuple[int, int]]]:
    """The connections by their load: the steps their busier side takes, the sending side a step
    per send and a nop per dependency past one (``steps_of``), the receiving side those of the
    receives; summed in NumPy (a dict entry per instruction took 0.5-1.6 s of a 512-rank compile)."""
    import numpy as np  # not loaded by building the CLI's parser

    steps = np.asarray(steps_of(dag), dtype=np.int64)
    match, rank, _, _ = _fields(dag)
    sends = np.flatnonzero(match >= 0)
    peer = instr_columns(dag).send_to[sends]  # a matched send has a peer
    ranks = int(max(rank.max(initial=0), peer.max(initial=0))) + 1
    codes, where = np.unique(rank[sends] * ranks + peer, return_inverse=True)
    sent = np.bincount(where.ravel(), weights=steps[sends], minlength=len(codes))
    received = np.bincount(where.ravel(), weights=steps[match[sends]], minlength=len(codes))
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for code, n in zip(codes.tolist(), np.maximum(sent, received).astype(np.int64).tolist(), strict=True):
        out[n].append(divmod(code, ranks))
    return dict(out)


def steps_of(dag: InstrDAG) -> tuple[int, ...]:
    """Per instruction the steps it may take: itself and a nop per same-rank dependency past one;
    computed once per DAG (read by every channel count and layout tried, here and in
    ``assign_threadblocks``)."""

    def count() -> tuple[int, ...]:
        import numpy as np  # not loaded by building the CLI's parser

        pred, succ = dag.ends
        rank = instr_columns(dag).rank
        kinds = map(attrgetter("kind"), dag.edges)
        waits = np.fromiter(map(DepKind.MATCH.__ne__, kinds), bool, len(dag.edges))
        waits &= rank[pred] == rank[succ]  # a counted edge: not a match, within one rank
        return tuple(np.maximum(np.bincount(succ[waits], minlength=len(dag.instrs)), 1).tolist())

    return _SAME_DAG.get([dag], "steps", count)


def lone_flows(dag: InstrDAG, flows: list[list[int]], groups: dict[int, tuple], hinted: bool) -> list[tuple | None]:
    """Per flow, where it is one transfer and nothing pinned in a program without channel hints:
    ``(send, sender, receiver, send position, receive position, depth, drained)`` (see
    ``channel_taken.Moves``), the send's hold in a timed program (``InstrDAG.holds``, else 0, 0), its
    instance, and whether a transfer the other way is of its depth (``channel_taken.Taken.by_depth``); else
    None. Built from :func:`lone_arrays` (a tuple built per flow in Python took 1.5 s of a 512-rank
    compile under the profiler: only the flows placed one at a time read these)."""
    out: list[tuple | None] = [None] * len(flows)
    found = lone_arrays(dag, flows, groups, hinted)
    if found is None:
        return out
    lone, fields = found
    for k, one in zip(lone.tolist(), zip(*(f.tolist() for f in fields[:-1]), strict=True), strict=True):
        out[k] = one
    return out


def lone_arrays(
    dag: InstrDAG, flows: list[list[int]], groups: dict[int, tuple], hinted: bool
) -> tuple[np.ndarray, tuple[np.ndarray, ...]] | None:
    """The flows :func:`lone_flows` gives a tuple, as arrays: their indices among the flows, and
    per field of those tuples an array, then one of the receives; None in a program with channel
    hints or without flows. Each field is read for all flows at once in NumPy, once per DAG
    (``flows`` and ``groups``: the DAG's, ``flows_of`` and the assignment's pinned groups)."""
    if hinted or not flows:
        return None
    return _SAME_DAG.get([dag], "lone", lambda: _lone_arrays(dag, flows, groups))


def _lone_arrays(dag: InstrDAG, flows: list[list[int]], groups: dict[int, tuple]) -> tuple:
    """:func:`lone_arrays` of a program without channel hints, with flows."""
    import numpy as np  # not loaded by building the CLI's parser

    n = len(dag.instrs)
    match, rank, inst, depth = _fields(dag)
    s = np.fromiter((flow[0] for flow in flows), np.int64, len(flows))
    r = np.fromiter((flow[-1] for flow in flows), np.int64, len(flows))
    free = np.ones(n, bool)
    free[np.fromiter(groups, np.int64, len(groups))] = False
    two = np.fromiter(map(len, flows), np.int64, len(flows)) == 2
    lone = np.flatnonzero(two & free[s] & free[r] & (match[s] == r) & (match[r] < 0))
    s, r = s[lone], r[lone]
    pos = np.asarray(dag.position, dtype=np.int64)
    count = instr_columns(dag).count
    drained = (count[s] > fifo_calls(dag.info.protocol)) & (pos[r] == pos[s] + 1)
    if dag.times is not None:  # InstrDAG.holds: from the send's start to halfway to its arrival
        times = np.asarray(dag.times, dtype=np.float64)
        start, end = times[s], (times[s] + times[r]) / 2
    else:
        start = end = np.zeros(len(s))
    facing = _facing(match, rank, inst, depth)
    return lone, (s, rank[s], rank[r], pos[s], pos[r], depth[s], drained, start, end, inst[s], facing[s], r)


def _fields(dag: InstrDAG):
    """Per instruction as NumPy arrays: its send's match (-1: none), rank, instance and depth;
    once per DAG (read by the lone flows and the loads)."""

    def read():
        import numpy as np

        c = instr_columns(dag)
        return c.send_match, c.rank, c.instance, np.asarray(dag.depth, dtype=np.int64)

    return _SAME_DAG.get([dag], "fields", read)


def _facing(match, rank, inst, depth):
    """Per send, whether a transfer the other way between its ranks in its instance is of its
    depth (then ``channel_taken.Taken.by_depth`` is read and kept for it)."""
    import numpy as np

    sends = np.flatnonzero(match >= 0)
    a, b = rank[sends], rank[match[sends]]
    ranks, instances, depths = int(rank.max()) + 1, int(inst.max()) + 1, int(depth.max()) + 1

    def code(x, y):
        return ((x * ranks + y) * instances + inst[sends]) * depths + depth[sends]

    facing = np.zeros(len(match), bool)
    facing[sends] = np.isin(code(b, a), code(a, b))
    return facing


def unset_as_none(local: np.ndarray) -> tuple[list[int | None], int]:
    """``local`` (-1: no channel) as a list with None, and the highest channel in it (0: none): only
    the unset ones replaced one by one (a comprehension over a million took 0.1-0.2 s a run)."""
    import numpy as np

    out: list[int | None] = local.tolist()
    for i in np.flatnonzero(local < 0).tolist():
        out[i] = None
    return out, max(int(local.max(initial=0)), 0)

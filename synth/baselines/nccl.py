"""The ``nccl`` baseline: NCCL's algorithms on the channels NCCL's search finds on the topology.

NCCL moves data on *channels* (:mod:`synth.nccl.search` finds them the way NCCL does, the same
search NCCL's time model :mod:`synth.nccl.model` reads);
a buffer is split evenly over them. Here chunk ``i`` of a rank's buffer goes on channel
``i mod channels`` (with fewer chunks than channels, only the first channels carry data), and each
algorithm is NCCL's, store and forward, one hop per step:

- ``ring`` (every collective but alltoall): allgather passes each chunk around its channel's ring;
  reducescatter adds partial sums around it, ending at the rank that keeps them; allreduce is
  NCCL's ring allreduce (each channel's share cut in one piece per rank: a reducescatter then an
  allgather on the same ring, 2(n-1) steps); broadcast and reduce pipeline each channel's share
  along the ring from (to) the root, one piece per step.
- ``tree`` (allreduce): NCCL's double binary tree across machines (``ncclGetDtree``, half the
  channels on each tree) with a chain inside each machine along the ring, hung from the GPU the
  ring enters by; pieces are reduced up to the root and broadcast back down, pipelined.
- ``nvls`` (allgather, reducescatter, allreduce; one machine on an NVLink SHARP switch, switch
  kind ``nvls``): every rank's slice is reduced at its owner in one step and multicast back in the
  next. The timing engine has neither in-switch reduction nor multicast, so the modeled time of an
  NVLS algorithm is that of the same data flow over ordinary switch ports, not NVLS's.
- ``p2p`` (alltoall): NCCL's grouped point-to-point sends, one step to every peer (where two GPUs
  have no link, through one GPU both are linked to, as NCCL's ``PATH_NVB``), each pair's data in as
  many chunks as NCCL has p2p channels per peer.

``auto`` is what NCCL runs at bandwidth-bound sizes: ``nvls`` for an allreduce where it applies,
``p2p`` for alltoall, else ``ring`` (NCCL's tuning model prefers Ring to Tree for large allreduces
on the shipped machines, and Ring to NVLS for allgather and reducescatter; which it picks at each
size is NCCL's time model, not this module).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from synth.algorithm import Algorithm, Send
from synth.baselines.common import BaselineError, hamiltonian_cycle, make_algorithm, schedule_paths
from synth.collectives import Collective
from synth.nccl import p2p, search
from synth.nccl.search import RingGraph, nvls_graph
from topologies.model import Topology

__all__ = [
    "NCCL_ALGOS",
    "PIPELINE_PIECES",
    "nccl",
    "nccl_algos",
    "nccl_chunks",
    "resolve_algo",
    "tree_parents",
]

NCCL_ALGOS = ("auto", "ring", "tree", "nvls", "p2p")
"""The ``algo`` choices (``NCCL_ALGO``'s names; ``p2p`` for alltoall's point-to-point sends)."""
COLLECTIVES = frozenset({"allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall"})
PIPELINE_PIECES = 32
"""Pieces each channel's share is cut in for the pipelined algorithms (ring broadcast and reduce,
tree allreduce) unless a size says otherwise; the pipeline's fill then costs (depth - 1) / 32 of the
transfer (NCCL's 512 KiB slices make it negligible at large sizes)."""
SLICE_BYTES = 512 * 1024
"""NCCL's pipelining grain with the Simple protocol: a 4 MiB buffer in ``NCCL_STEPS`` = 8 slots."""
MAX_PIECES = 256
"""The most pieces per channel :func:`nccl_chunks` asks for from a size."""


def nccl_algos(topology: Topology, collective_name: str) -> tuple[str, ...]:
    """NCCL's algorithms for ``collective_name`` that apply on ``topology`` (without ``auto``)."""
    if collective_name == "alltoall":
        return ("p2p",)
    algos = ["ring"]
    if collective_name == "allreduce":
        algos.append("tree")
    if collective_name in ("allgather", "reducescatter", "allreduce") and nvls_graph(topology) is not None:
        algos.append("nvls")
    return tuple(algos)


def resolve_algo(topology: Topology, collective_name: str, algo: str = "auto") -> str:
    """The algorithm ``algo`` names for this collective here (``auto``: see module docstring)."""
    if collective_name not in COLLECTIVES:
        raise BaselineError(f"baseline nccl does not apply to {collective_name}")
    if algo not in NCCL_ALGOS:
        raise BaselineError(
            f"baseline nccl: unknown algorithm {algo!r}: expected one of {', '.join(NCCL_ALGOS)}"
        )
    algos = nccl_algos(topology, collective_name)
    if algo == "auto":
        return "nvls" if "nvls" in algos and collective_name == "allreduce" else algos[0]
    if algo not in algos:
        why = (
            f"{topology.name} has no switch of kind nvls that every rank of one machine hangs on"
            if algo == "nvls" and collective_name != "alltoall"
            else f"NCCL runs {collective_name} as {', '.join(algos)}"
        )
        raise BaselineError(f"baseline nccl: no {algo} {collective_name} on {topology.name}: {why}")
    return algo


def ring_graph(topology: Topology) -> RingGraph:
    """NCCL's rings on ``topology`` (default release); where its search finds none, NCCL's fallback
    ring, here a ring the topology has (:func:`~synth.baselines.common.hamiltonian_cycle`)."""
    try:
        graph = search.ring_graph(topology)
    except search.NcclSearchError as exc:
        raise BaselineError(f"baseline nccl: {exc}") from None
    if not graph.fallback:
        return graph
    ring = tuple(hamiltonian_cycle(topology, "nccl"))
    return replace(graph, rings=(ring,), chains=(ring[: len(graph.chains[0])],))


def p2p_channels_per_peer(topology: Topology) -> int:
    """NCCL's p2p channels per peer (:func:`synth.nccl.p2p.p2p_channels_per_peer`)."""
    try:
        return p2p.p2p_channels_per_peer(topology)
    except search.NcclSearchError as exc:
        raise BaselineError(f"baseline nccl: {exc}") from None


def _tree_channels(topology: Topology, graph: RingGraph) -> int:
    """Across machines twice the ring channels (NCCL's execution channels: half on each tree)."""
    return graph.channels * (2 if topology.num_machines > 1 else 1)


def nccl_chunks(
    topology: Topology, collective_name: str, algo: str = "auto", size_bytes: float | None = None
) -> int:
    """Chunks per rank that give every channel its share (module docstring): the channels, times
    the ranks for ring allreduce, times the pipeline's pieces for broadcast, reduce and tree
    allreduce (:data:`PIPELINE_PIECES`, or NCCL's 512 KiB slices of ``size_bytes``)."""
    algo = resolve_algo(topology, collective_name, algo)
    n = topology.num_ranks
    if algo == "p2p":
        return p2p_channels_per_peer(topology)
    if algo == "nvls":
        return n if collective_name == "allreduce" else 1
    graph = ring_graph(topology)
    channels = _tree_channels(topology, graph) if algo == "tree" else graph.channels
    if collective_name == "allreduce" and algo == "ring":
        return channels * n
    if collective_name in ("broadcast", "reduce") or algo == "tree":
        if size_bytes is None:
            return channels * PIPELINE_PIECES
        pieces = math.ceil(size_bytes / (channels * SLICE_BYTES))
        return channels * min(MAX_PIECES, max(1, pieces))
    return channels


def _positions(rings: Sequence[Sequence[int]]) -> list[dict[int, int]]:
    return [{r: p for p, r in enumerate(ring)} for ring in rings]


def _walk(ring: Sequence[int], start: int, hops: int) -> list[int]:
    n = len(ring)
    return [ring[(start + k) % n] for k in range(hops + 1)]


def _steps(routes: Iterable[tuple[int, Sequence[int], int]], op: str = "copy") -> list[list[Send]]:
    steps = schedule_paths(routes)
    if op == "copy":
        return steps
    return [[Send(s.chunk, s.src, s.dst, op) for s in step] for step in steps]


def _ring(graph: RingGraph, coll: Collective) -> list[list[Send]]:
    """NCCL's ring algorithms (module docstring); chunk ``i`` of a rank on ring ``i mod channels``."""
    n, c, rings = coll.num_ranks, coll.chunks_per_rank, graph.rings
    pos, nch = _positions(rings), len(rings)
    name = coll.name
    if name == "allgather":
        return _steps(
            (cid, _walk(rings[i % nch], pos[i % nch][r], n - 1), 0)
            for r in range(n)
            for i in range(c)
            for cid in [r * c + i]
        )
    if name == "reducescatter":
        routes = (
            (d * c + i, _walk(rings[i % nch], pos[i % nch][d] + 1, n - 1), 0)
            for d in range(n)
            for i in range(c)
        )
        return _steps(routes, "reduce")
    if name == "allreduce":
        if c % n:
            raise BaselineError(
                f"baseline nccl: ring allreduce needs chunks per rank divisible by {n} ranks, got {c}"
            )
        owners = [(a, rings[(a // n) % nch], a % n) for a in range(c)]
        scatter = _steps((a, _walk(ring, p + 1, n - 1), 0) for a, ring, p in owners)
        gather = _steps((a, _walk(ring, p, n - 1), 0) for a, ring, p in owners)
        return [[Send(s.chunk, s.src, s.dst, "reduce") for s in step] for step in scatter] + gather
    root = coll.root
    if name == "broadcast":
        return _steps((i, _walk(rings[i % nch], pos[i % nch][root], n - 1), i // nch) for i in range(c))
    if name == "reduce":
        return _steps(
            ((i, _walk(rings[i % nch], pos[i % nch][root] + 1, n - 1), i // nch) for i in range(c)), "reduce"
        )
    raise BaselineError(f"baseline nccl: no ring {name}")


def _btree_parent(m: int, k: int) -> int | None:
    """Machine ``m``'s parent in NCCL's binary tree of ``k`` machines rooted at 0 (``ncclGetBtree``:
    a machine's lowest set bit moves up one, or is cleared where that leaves the tree)."""
    if m == 0:
        return None
    bit = m & -m
    up = (m ^ bit) | (bit << 1)
    return up if up < k else m ^ bit


def tree_parents(k: int, which: int) -> list[int | None]:
    """Parents of ``k`` machines in tree 0 or 1 of NCCL's double binary tree (``ncclGetDtree``: the
    second tree mirrors the first for an even ``k``, shifts it by one for an odd one)."""
    first = [_btree_parent(m, k) for m in range(k)]
    if which == 0:
        return first
    if k % 2:
        return [None if (p := first[(m - 1) % k]) is None else (p + 1) % k for m in range(k)]
    return [None if (p := first[k - 1 - m]) is None else k - 1 - p for m in range(k)]


def _tree(graph: RingGraph, topology: Topology, t: int) -> dict[int, int | None]:
    """Tree channel ``t``: ring channel ``t mod channels``'s chain in each machine, its first rank
    (where the ring enters) hung from the first rank of the parent machine's chain."""
    g, k = len(graph.chains[0]), topology.num_machines
    ring = graph.rings[t % graph.channels]
    parents = tree_parents(k, t // graph.channels)
    out: dict[int, int | None] = {}
    for m in range(k):
        chain = ring[m * g : (m + 1) * g]
        pm = parents[m]
        out[chain[0]] = None if pm is None else ring[pm * g]
        out.update((chain[i], chain[i - 1]) for i in range(1, g))
    return out


def _depths(parent: dict[int, int | None]) -> dict[int, int]:
    depth: dict[int, int] = {}
    for r in parent:
        path = []
        while r is not None and r not in depth:
            path.append(r)
            r = parent[r]
        d = -1 if r is None else depth[r]
        for q in reversed(path):
            d += 1
            depth[q] = d
    return depth


def _tree_allreduce(graph: RingGraph, topology: Topology, coll: Collective) -> list[list[Send]]:
    """Piece ``j`` of tree channel ``t``: rank at depth d adds its partial sum into its parent's at
    step ``j + H - d``, then receives the total at step ``j + H + d - 1`` (H: the tree's height)."""
    trees = [_tree(graph, topology, t) for t in range(_tree_channels(topology, graph))]
    depths = [_depths(tree) for tree in trees]
    steps: list[list[Send]] = []

    def add(at: int, send: Send) -> None:
        steps.extend([] for _ in range(at + 1 - len(steps)))
        steps[at].append(send)

    for a in range(coll.chunks_per_rank):
        t, j = a % len(trees), a // len(trees)
        height = max(depths[t].values())
        for r, p in trees[t].items():
            if p is not None:
                add(j + height - depths[t][r], Send(a, r, p, "reduce"))
                add(j + height + depths[t][r] - 1, Send(a, p, r))
    return [sorted(step) for step in steps]


def _nvls(coll: Collective) -> list[list[Send]]:
    """Each slice reduced at its owner in one step, multicast to every rank in the next."""
    n, c = coll.num_ranks, coll.chunks_per_rank
    ranks = range(n)
    if coll.name == "allgather":
        return [[Send(r * c + i, r, d) for r in ranks for i in range(c) for d in ranks if d != r]]
    if coll.name == "reducescatter":
        return [[Send(d * c + i, r, d, "reduce") for d in ranks for i in range(c) for r in ranks if r != d]]
    scatter = [Send(a, r, a % n, "reduce") for a in range(c) for r in ranks if r != a % n]
    return [scatter, [Send(a, a % n, r) for a in range(c) for r in ranks if r != a % n]]


def _relay(topology: Topology, src: int, dst: int) -> int | None:
    """The rank of ``src``'s machine both are linked to with the fastest route (NCCL's ``PATH_NVB``:
    NVLink through one GPU), lowest first on a tie; None where there is none."""
    logical = topology.logical()
    links = logical.links
    best = None
    for m in logical.successors(src):
        if m != dst and topology.node_of[m] == topology.node_of[src] and (m, dst) in links:
            bw = min(links[(src, m)].bandwidth_GBps, links[(m, dst)].bandwidth_GBps)
            if best is None or bw > best[0]:
                best = (bw, m)
    return None if best is None else best[1]


def _p2p(topology: Topology, coll: Collective) -> list[list[Send]]:
    """Alltoall: every chunk straight to its destination (through one GPU where no link joins them)."""
    n, c = coll.num_ranks, coll.chunks_per_rank
    links = topology.logical().links
    routes = []
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            path = [src, dst]
            if (src, dst) not in links:
                via = _relay(topology, src, dst)
                if via is None:
                    raise BaselineError(
                        f"baseline nccl: {topology.name} has no link {src} -> {dst} nor a rank linked to both"
                    )
                path = [src, via, dst]
            routes.extend((src * n * c + dst * c + i, path, 0) for i in range(c))
    return _steps(routes)


def nccl(topology: Topology, collective: Collective, algo: str = "auto") -> Algorithm:
    """NCCL's ``algo`` for ``collective`` on ``topology`` (module docstring), not yet verified."""
    algo = resolve_algo(topology, collective.name, algo)
    params: dict = {"algo": algo}
    if algo == "p2p":
        steps = _p2p(topology, collective)
    elif algo == "nvls":
        graph = nvls_graph(topology)
        steps = _nvls(collective)
        params.update(channels=graph.channels, bw_GBps=graph.bw_intra_GBps)
    else:
        rings = ring_graph(topology)
        steps = _tree_allreduce(rings, topology, collective) if algo == "tree" else _ring(rings, collective)
        channels = _tree_channels(topology, rings) if algo == "tree" else rings.channels
        params.update(
            channels=channels,
            bw_GBps=rings.bw_GBps,
            rings=" / ".join(" ".join(map(str, r)) for r in rings.rings),
        )
    return make_algorithm("nccl", topology, collective, steps, **params)

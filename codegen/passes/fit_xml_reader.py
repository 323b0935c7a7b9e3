"""Merge a timed program's transfers over wider windows until every rank fits the XML reader
(instruction DAG -> itself).

The runtimes' XML reader holds fewer than :data:`codegen.rules.MAX_NODES` elements per load:
``<algo>``, one ``<gpu>`` per rank, and the loading rank's ``<tb>`` and ``<step>`` elements
(:func:`codegen.rules.xml_problems`). A rank's steps are its instructions here (fusion and the
later passes only merge them or add a ``nop`` per extra dependency), and it has a threadblock at
least per send peer or per receive peer. Where that alone reaches the limit
(:func:`least_elements`: the compile would be refused), this pass runs
:func:`~codegen.passes.aggregate_chunks.aggregate_chunks` again on the aggregated DAG with windows
:data:`GROWTH` times wider each, up to the whole span, and keeps the first whose busiest rank has
at most :func:`step_budget` instructions (else the widest: the fewest steps it can give). Each
window's counts are read off its merges, the DAG is built once, at the window kept
(:class:`~codegen.passes.aggregate_chunks.Aggregation`: the 128-rank DGX H100 ``synth trees``
allreduce built it at eight windows, 30 s of CPU in a compile of 67 s). A wider
window is a coarser pipeline: a merged op starts when its last piece is ready. The ``synth
trees`` allreduce on 8 DGX A100 (64 ranks, 1,472 chunks per rank) had 4,194 instructions on rank 0
at the default 2% window (4,430 elements); it now compiles to 1,903 elements, 1.06x its Algorithm
in both timing models (benchmarks/RESULTS.md, "The XML reader's 4,096 elements").

An untimed program's aggregation has no window (it merges equal critical-path heights only), so it
is left as it is; so is every program not certain to break the limit, and every compile for no
XML runtime (``max_nodes=None``): their output is unchanged. One with fewer instructions whose
threadblocks and the ``nop`` steps made later break the limit is refused by the checker; the
driver (:func:`codegen.compiler.run_compiler`) then compiles it once more with ``reader_refused``,
and this pass widens its window as above whatever the count says. So every compile that fits at
its own window is made as before, byte for byte.

Where even the whole span leaves the count at the limit, the transfers are not contiguous: the
lowering numbers a rank's scratch slots in order of arrival, so consecutive chunks one rank sends
another land far apart (the ``synth trees`` reducescatter on 16 DGX A100: 4,094 instructions on
rank 0 at the whole span, 4,317 XML elements; the count was 4,455 at the default window, so this
pass acted, and found no window). Then the scratch slots are renumbered
(:func:`renumber_scratch`) and the ladder runs again, stopping at the first window that leaves
:data:`ROOM`. A compile that fitted before is made as before. Where this pass acts, the window it
kept is recorded as ``ProgramInfo.merge_window``: what ``xccl compile`` reports, and how
the driver knows that a second compile would widen no further.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from codegen.columns import instr_columns
from codegen.instr_dag import InstrDAG
from codegen.ir import Buffer, Ref, evolve
from codegen.passes.aggregate_chunks import WINDOW, Aggregation
from codegen.rules import MAX_COUNT

if TYPE_CHECKING:
    import numpy as np

__all__ = ["GROWTH", "ROOM", "SLACK", "busiest_rank", "fit_xml_reader", "least_elements", "renumber_scratch", "step_budget"]

GROWTH = 1.25
"""How much wider each window tried is than the one before (from the compile's window, at least
half the default's): fine enough to stop near the narrowest window that fits."""

SLACK = 0.5
"""The share of a rank's elements not given to its instructions: room for its ``<tb>`` elements and
the ``nop`` steps that carry extra dependencies, which are made after this pass (the 64-rank
allreduce above: 114 and 57 on 4,194 instructions), and a wider window than the narrowest that
fits, which compiles far faster: that allreduce's compile at 2.5% (2,934 instructions on rank 0)
spent over 4 minutes ordering its steps within the runtime's FIFOs, at 5% (1,736) it took 42 s."""


ROOM = 0.05
"""Where only renumbered scratch slots fit (:func:`renumber_scratch`), the share of the reader's
elements left beyond the count (:func:`least_elements`) for the threadblocks past one per peer and
the ``nop`` steps: its ladder stops at the first window under the rest, not at
:func:`step_budget`, since each step of its ladder merges whole waves of the pipeline (the trees
reducescatter of 2 DGX A100, the reader lowered to 782: 1.00x its Algorithm at 2.5%, 1.46x at the
7.6% the budget would take; on 16 DGX A100 the count was 72 elements short of the compile's)."""


def step_budget(num_ranks: int, max_nodes: int) -> int:
    """The instructions a rank may have for its XML elements to stay below ``max_nodes``: what
    ``<algo>`` and the ``<gpu>`` elements leave, less :data:`SLACK` of it."""
    return int((max_nodes - 1 - num_ranks) * (1 - SLACK))


def busiest_rank(dag: InstrDAG) -> tuple[int, int]:
    """The rank with the most instructions, and how many it has (``(0, 0)`` for none; of ranks
    with as many, the first)."""
    import numpy as np  # here, not at the top: building the CLI's parser loads every pass
    steps = np.bincount(_ranks(dag))
    if not steps.any():
        return 0, 0
    rank = int(steps.argmax())
    return rank, int(steps[rank])


def least_elements(dag: InstrDAG) -> int:
    """The fewest XML elements the busiest rank's load can have once compiled: ``<algo>``, the
    ``<gpu>`` elements, its instructions as steps, and a threadblock per send peer or per receive
    peer, whichever it has more of (a threadblock has one of each). Counted on arrays of the
    instructions' ranks and peers (a million instructions at 512 ranks)."""
    import numpy as np

    rank = _ranks(dag)
    steps = np.bincount(rank)
    return _least(dag.info.num_ranks, steps, _peers(dag, rank, steps.size))


def _least(num_ranks: int, steps: np.ndarray, peers: np.ndarray) -> int:
    """:func:`least_elements` of ranks with ``steps`` instructions and ``peers`` threadblocks."""
    if not steps.any():
        return 1 + num_ranks
    return 1 + num_ranks + int((steps + peers)[steps > 0].max())


def _peers(dag: InstrDAG, rank: np.ndarray, size: int) -> np.ndarray:
    """Per rank (``size`` of them), its send peers or its receive peers, whichever are more.
    Merging keeps them: it joins instructions between the same two ranks only."""
    import numpy as np

    from topologies.numeric import distinct

    peers, c = np.zeros(size, np.int64), instr_columns(dag)
    for peer in (c.send_to, c.recv_from):
        has = peer >= 0
        if has.any():
            base = int(peer[has].max()) + 1
            pairs = distinct(rank[has] * base + peer[has])  # each (rank, peer) once
            peers = np.maximum(peers, np.bincount(pairs // base, minlength=size))
    return peers


def _ranks(dag: InstrDAG) -> np.ndarray:
    return instr_columns(dag).rank


def fit_xml_reader(
    dag: InstrDAG,
    max_count: int = MAX_COUNT,
    window: float = WINDOW,
    max_nodes: int | None = None,
    reader_refused: bool = False,
) -> InstrDAG:
    """Merge a timed program's transfers over wider windows until each rank fits the XML reader."""
    if max_nodes is None or dag.times is None or not (reader_refused or least_elements(dag) >= max_nodes):
        return dag
    budget = step_budget(dag.info.num_ranks, max_nodes)
    merges, width, counts = _widened(dag, max_count, window, lambda steps, _: steps.max(initial=0) <= budget)
    least = least_elements(dag) if counts is None else _least(dag.info.num_ranks, *counts)
    if least >= max_nodes:  # no window fits with the slots as they are
        renumbered = renumber_scratch(dag)
        if renumbered is not dag:
            room = max_nodes * (1 - ROOM)
            enough = lambda steps, peers: _least(dag.info.num_ranks, steps, peers) < room  # noqa: E731
            merges, width, counts = _widened(renumbered, max_count, window, enough)
    widest = merges.dag if counts is None else merges.merged(width)
    return replace(widest, info=replace(widest.info, merge_window=width))


def _widened(
    dag: InstrDAG, max_count: int, window: float, enough: Callable[[np.ndarray, np.ndarray], bool]
) -> tuple[Aggregation, float, tuple[np.ndarray, np.ndarray] | None]:
    """The first window in the ladder whose merges in ``dag`` leave each rank's instructions and
    peers ``enough`` (else the whole span), with ``dag``'s merges and those counts at it (None
    where the ladder has no window wider than ``window``: ``dag`` is kept as it is). Each window's
    counts come from its merges alone (:meth:`Aggregation.steps`; the peers stay): the caller
    builds the DAG once, at the window kept."""
    import numpy as np

    merges = Aggregation(dag, max_count)
    peers = _peers(dag, merges.rank, np.bincount(merges.rank).size)
    width, counts = max(window, WINDOW / 2), None
    while width < 1.0:
        width = min(1.0, width * GROWTH)
        counts = merges.steps(width), peers
        if enough(*counts):
            break
    return merges, width, counts


_ORIGIN = {Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}


def renumber_scratch(dag: InstrDAG) -> InstrDAG:
    """Each rank's scratch slots in the order of the chunk each first holds (the input or output
    slot its data came from, followed through relays), so that what one rank sends another in
    consecutive chunks lands in consecutive slots there too and ``aggregate_chunks`` can merge it.
    The slots are where the lowering put them, in order of arrival: on the 128-rank DGX A100
    ``synth trees`` reducescatter rank 0's sends of chunks 255, 256, ... to rank 7 landed in its
    slots 254, 239, 224, ... and no window merged them. A slot range an op covers stays whole.
    The dependencies are the same (a renaming of locations), so the program computes the same."""
    instrs = dag.instrs
    holds: dict[tuple[int, int], tuple[int, int]] = {}
    for i in dag.order:
        ins = instrs[i]
        if ins.dst is None or ins.dst.buffer is not Buffer.SCRATCH:
            continue
        source = instrs[ins.recv_match] if ins.recv_match is not None else ins
        if source.src is None:
            continue
        buffer, index = _holds(holds, source.rank, source.src)
        for k in range(ins.count):
            holds.setdefault((ins.rank, ins.dst.index + k), (buffer, index + k))
    slots = _renumbered(dag, holds)
    if all(all(new == old for old, new in enumerate(s)) for s in slots):
        return dag
    out = []
    for ins in instrs:
        src, dst = ins.src, ins.dst
        if src is not None and src.buffer is Buffer.SCRATCH:
            src = Ref(Buffer.SCRATCH, slots[ins.rank][src.index])
        if dst is not None and dst.buffer is Buffer.SCRATCH:
            dst = Ref(Buffer.SCRATCH, slots[ins.rank][dst.index])
        out.append(ins if src is ins.src and dst is ins.dst else evolve(ins, src=src, dst=dst))
    return InstrDAG(dag.info, tuple(out), dag.edges, dag.order)


def _holds(holds: dict[tuple[int, int], tuple[int, int]], rank: int, ref: Ref) -> tuple[int, int]:
    """What chunk ``rank``'s location ``ref`` holds: an input or output slot is itself, a scratch
    slot what was first written there (itself where nothing was)."""
    if ref.buffer is Buffer.SCRATCH:
        return holds.get((rank, ref.index), (_ORIGIN[Buffer.SCRATCH], ref.index))
    return _ORIGIN[ref.buffer], ref.index


def _renumbered(dag: InstrDAG, holds: dict[tuple[int, int], tuple[int, int]]) -> list[list[int]]:
    """Per rank, each scratch slot's new number: the rank's blocks (a slot alone, or the slots
    ranges that ops cover overlap in) sorted by what their first slot holds."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for ins in dag.instrs:
        if ins.count > 1:
            for ref in (ins.src, ins.dst):
                if ref is not None and ref.buffer is Buffer.SCRATCH:
                    ranges.setdefault(ins.rank, []).append((ref.index, ref.index + ins.count))
    out = []
    for rank, size in enumerate(dag.info.scratch_chunks):
        blocks: list[list[int]] = []
        end = 0  # the first slot in no block yet
        for lo, hi in sorted(ranges.get(rank, ())):
            if lo < end:  # overlaps the range before: one block
                blocks[-1].extend(range(end, hi))
            else:
                blocks.extend([k] for k in range(end, lo))
                blocks.append(list(range(lo, hi)))
            end = max(end, hi)
        blocks.extend([k] for k in range(end, size))
        blocks.sort(key=lambda b: (holds.get((rank, b[0]), (_ORIGIN[Buffer.SCRATCH], b[0])), b[0]))
        slot = [0] * size
        for new, old in enumerate(k for b in blocks for k in b):
            slot[old] = new
        out.append(slot)
    return out

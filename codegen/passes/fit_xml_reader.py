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
at most :func:`step_budget` instructions (else the widest: the fewest steps it can give). A wider
window is a coarser pipeline: a merged op starts when its last piece is ready. The ``synth
trees`` allreduce on 8 DGX A100 (64 ranks, 1,472 chunks per rank) had 4,194 instructions on rank 0
at the default 2% window (4,430 elements); it now compiles to 1,903 elements, 1.06x its Algorithm
in both timing models (benchmarks/RESULTS.md, "The XML reader's 4,096 elements").

An untimed program's aggregation has no window (it merges equal critical-path heights only), so it
is left as it is; so is every program not certain to break the limit, and every compile for no
XML runtime (``max_nodes=None``): their output is unchanged. One with fewer instructions whose
threadblocks and the ``nop`` steps made later break the limit (the ``synth trees`` reducescatter
on 16 DGX A100: 4,317 elements on rank 0, 94 ``<tb>`` and 4,094 ``<step>``) is refused by the
checker; the driver (:func:`codegen.compiler.run_compiler`) then compiles it once more with
``reader_refused``, and this pass widens its window as above whatever the count says. So every
compile that fits at its own window is made as before, byte for byte. Where this pass acts, the
window it kept is recorded as ``ProgramInfo.merge_window``: what ``xccl compile`` reports, and how
the driver knows that a second compile would widen no further.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from codegen.instr_dag import InstrDAG
from codegen.passes.aggregate_chunks import WINDOW, aggregate_chunks
from codegen.rules import MAX_COUNT

__all__ = ["GROWTH", "SLACK", "busiest_rank", "fit_xml_reader", "least_elements", "step_budget"]

GROWTH = 1.25
"""How much wider each window tried is than the one before (from the compile's window, at least
half the default's): fine enough to stop near the narrowest window that fits."""

SLACK = 0.5
"""The share of a rank's elements not given to its instructions: room for its ``<tb>`` elements and
the ``nop`` steps that carry extra dependencies, which are made after this pass (the 64-rank
allreduce above: 114 and 57 on 4,194 instructions), and a wider window than the narrowest that
fits, which compiles far faster: that allreduce's compile at 2.5% (2,934 instructions on rank 0)
spent over 4 minutes ordering its steps within the runtime's FIFOs, at 5% (1,736) it took 42 s."""


def step_budget(num_ranks: int, max_nodes: int) -> int:
    """The instructions a rank may have for its XML elements to stay below ``max_nodes``: what
    ``<algo>`` and the ``<gpu>`` elements leave, less :data:`SLACK` of it."""
    return int((max_nodes - 1 - num_ranks) * (1 - SLACK))


def busiest_rank(dag: InstrDAG) -> tuple[int, int]:
    """The rank with the most instructions, and how many it has (``(0, 0)`` for none)."""
    counts = Counter(ins.rank for ins in dag.instrs)
    return max(counts.items(), key=lambda kv: (kv[1], -kv[0]), default=(0, 0))


def least_elements(dag: InstrDAG) -> int:
    """The fewest XML elements the busiest rank's load can have once compiled: ``<algo>``, the
    ``<gpu>`` elements, its instructions as steps, and a threadblock per send peer or per receive
    peer, whichever it has more of (a threadblock has one of each)."""
    steps: Counter[int] = Counter()
    sends: dict[int, set[int]] = {}
    recvs: dict[int, set[int]] = {}
    for ins in dag.instrs:
        steps[ins.rank] += 1
        if ins.send_to is not None:
            sends.setdefault(ins.rank, set()).add(ins.send_to)
        if ins.recv_from is not None:
            recvs.setdefault(ins.rank, set()).add(ins.recv_from)
    peers = {r: max(len(sends.get(r, ())), len(recvs.get(r, ()))) for r in steps}
    return 1 + dag.info.num_ranks + max((steps[r] + peers[r] for r in steps), default=0)


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
    widest, width = dag, max(window, WINDOW / 2)
    while width < 1.0:
        width = min(1.0, width * GROWTH)
        widest = aggregate_chunks(dag, max_count, width)
        if busiest_rank(widest)[1] <= budget:
            break
    return replace(widest, info=replace(widest.info, merge_window=width))

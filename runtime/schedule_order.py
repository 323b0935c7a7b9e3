"""Which variant of a schedule the compiler's choice (:mod:`runtime.choice`) compiles first: how
the schedule's own order compiles. A timed schedule (a MILP's) is compiled in its starts' order;
an untimed one as it is, where that runs in the order its Algorithm is timed in
(:func:`in_step_order`), else re-timed first (:func:`retimed_first`); an allreduce of whole trees
between machines in its port order through the NICs alone (:func:`whole_trees`,
:func:`between_machines`).
"""

from __future__ import annotations

import copy
import math

from codegen.dsl import ChunkProgram
from synth.algorithm import Algorithm
from synth.cost import model_ordered, start_times
from synth.timing import DEFAULT
from topologies import Topology

__all__ = ["between_machines", "in_step_order", "is_timed", "retimed_first", "whole_trees"]


def is_timed(algo: Algorithm) -> bool:
    """Whether every send has its start (a MILP's schedule)."""
    return all(s.start_us is not None for step in algo.steps for s in step.sends)


def whole_trees(algo: Algorithm, topology: Topology) -> bool:
    """Whether untimed ``algo`` is an allreduce of trees that carry each chunk whole (``synth
    trees`` with one piece per chunk, as it picks at 512 ranks: a piece's per-send cost outweighs
    pipelining), between machines. Compiled as it is, a rank's sends through its NIC to other
    machines each take a threadblock of their own, all ready at once, and the runtime serves them
    in another order than the schedule's, while each forward to the GPUs of the rank's machine
    keeps the schedule's order: a forward that waits for the chunk now received last holds up
    every one behind it in its threadblock (the 512-rank allreduce's allgather half, 1.38x; DGX
    H100 x8 in one piece, 1.30x). The port order through the NICs alone keeps the schedule's order
    there (1.00x); pipelined trees interleave their pieces and compile as they are (DGX H100 x8 in
    14 pieces: 1.005x, 1.09x with the NICs chained). A whole-trees allgather or reducescatter
    compiles as it is (512 ranks: 1.005x and 1.000x, 1.06x with the NICs chained; DGX H100 x4:
    1.000x, 1.002x chained), so only the allreduce goes this way first."""
    if algo.collective.name != "allreduce" or not model_ordered(algo) or is_timed(algo):
        return False
    if len(set(topology.node_of)) < 2:
        return False
    return algo.provenance is not None and dict(algo.provenance.params).get("chunks") == 1


def between_machines(program: ChunkProgram, topology: Topology) -> ChunkProgram:
    """``program`` with only its ports to other machines (``ProgramInfo.ports``), so that the port
    order (``codegen.passes.order_ports``) chains a rank's sends through its NIC alone
    (:func:`whole_trees`); a shallow copy (the compiler reads the program, never changes it)."""
    node = topology.node_of
    out = copy.copy(program)
    out.ports = tuple(p for p in program.ports if node[p[0]] != node[p[1]])
    return out


def in_step_order(algo: Algorithm, topology: Topology, size: float) -> bool:
    """Whether untimed ``algo`` compiled as it is runs in the order its Algorithm is timed in, so
    that it is the variant to compile first: lowered in a model's list schedule
    (``synth.cost.model_ordered``: trees, SMT), or in dataflow order (a baseline's, ``synth
    hierarchical``'s) where the calibrated Algorithm model at ``size`` starts each rank's sends in
    step order too. Else the compile as it is runs another schedule than the one timed (the
    hierarchical alltoall's relays all received before any is sent on: 1.69x at 512 ranks, 1.09x
    at 128, where re-timed they are 1.00x), and the re-timed variant is compiled first."""
    if model_ordered(algo):
        return True
    starts = iter(start_times(algo, topology, size, DEFAULT))
    # per rank: its step, that step's and earlier steps' latest start
    latest: dict[int, tuple[int, float, float]] = {}
    for k, step in enumerate(algo.steps):
        for send in step.sends:
            start = next(starts)
            at, now, before = latest.get(send.src, (k, start, -math.inf))
            if at < k:
                at, now, before = k, start, max(now, before)
            if start < before:
                return False
            latest[send.src] = (at, max(now, start), before)
    return True


def retimed_first(algo: Algorithm, topology: Topology, size: float | None) -> bool:
    """Whether the first variant compiled is re-timed: ``algo`` is untimed, and compiled as it is it
    would not run in the order it is timed in (:func:`in_step_order`)."""
    return size is not None and not is_timed(algo) and not in_step_order(algo, topology, size)

"""What a runtime accepts of an IR, read from its entry in :data:`codegen.rules.DIALECTS`, and how
its parser reads a threadblock's steps.

:func:`dialect_problems` is what the runtime rejects, would corrupt or would never select (the
writer refuses an IR that breaks one, so our files always load). :func:`fold_steps` is how the
parser turns steps into what runs: a ``nop`` runs nothing and hands its dependency to the next
real step, and consecutive ``re`` steps chain into one transmission (same destination, same source
buffer, the later without a dependency of its own, at most ``reduce_fusion`` of them, ended by a
step with ``has_dep``); the runtime loader (:mod:`runtime.program`) executes exactly that.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import attrgetter

from codegen.ir import IR, Dep, Gpu, Op, OpType, Threadblock
from codegen.rules.dialects import Dialect
from codegen.rules.problem import Problem
from codegen.rules.structure import buffer_sizes, connections
from codegen.rules.xml_file import xml_problems
from synth.collectives import COMBINING

__all__ = [
    "Folded",
    "bound_problems",
    "dialect_problems",
    "empty_grid_problems",
    "fold_steps",
    "layout_problems",
    "machine_problems",
    "placed_problems",
    "reduction_problems",
    "runs_alone",
]


def dialect_problems(ir: IR, d: Dialect) -> list[Problem]:
    """What the runtime ``d`` rejects, would corrupt or would never select in ``ir``."""
    out = _algo_problems(ir, d)
    out.extend(empty_grid_problems(ir))
    marked = _marked_steps(ir, d)
    for gpu in ir.gpus:
        out.extend(_gpu_problems(ir, gpu, d))
        awaited = _awaited(gpu, d)
        for tb in gpu.threadblocks:
            out.extend(_threadblock_problems(gpu.rank, tb, d, awaited))
            if not marked.isdisjoint(map(id, tb.ops)):
                out.extend(_step_problems(gpu.rank, tb, d))
    if d.xml is not None:
        out.extend(xml_problems(ir))
    return out


def layout_problems(ir: IR, d: Dialect, steps: bool = True) -> list[Problem]:
    """The threadblock layout's share of :func:`dialect_problems`: threadblocks per rank and per
    channel, ids of threadblocks others wait on, and (``steps``) steps per threadblock: what the
    compiler's compact layouts may cure (more channels cure steps, not the others)."""
    out = []
    for gpu in ir.gpus:
        out.extend(_layout_problems(gpu, d))
        awaited = _awaited(gpu, d)
        for tb in gpu.threadblocks:
            found = (_steps_problem(gpu.rank, tb, d) if steps else None, _awaited_id_problem(gpu.rank, tb, d, awaited))
            out.extend(p for p in found if p)
    return out


def reduction_problems(ir: IR, d: Dialect, reduction: str) -> list[Problem]:
    """A combining collective to be called with a reduction the runtime ``d`` does not perform (the
    MSCCL++ executor only sums, whatever a plan says)."""
    if ir.collective not in COMBINING or d.performs(reduction):
        return []
    does = ", ".join(sorted(d.reductions or ()))
    return [Problem(f"{ir.collective} with {reduction}: the {d.name} runtime only reduces with {does}")]


def machine_problems(ir: IR, d: Dialect, node_of: Sequence[int]) -> list[Problem]:
    """Data moving between machines (``node_of[rank]``) where the runtime ``d`` joins ranks of one
    machine only (an MSCCL++ plan's memory channels)."""
    if d.plan is None or not d.plan.one_machine:
        return []
    crossing = sorted(
        (src, dst)
        for src, dst, _ in connections(ir)
        if src < len(node_of) and dst < len(node_of) and node_of[src] != node_of[dst]
    )
    if not crossing:
        return []
    src, dst = crossing[0]
    return [
        Problem(
            f"ranks {src} and {dst} exchange data across machines ({node_of[src]} and {node_of[dst]}): xccl "
            f"writes {d.name} plans with memory channels only, which join the GPUs of one machine (port "
            "channels across machines are not written)"
        )
    ]


def empty_grid_problems(ir: IR) -> list[Problem]:
    """A rank without threadblocks: the runtime would launch an empty grid (the loader refuses it too)."""
    return [
        Problem("no threadblock: the runtime would launch an empty grid (expected at least one threadblock)", g.rank)
        for g in ir.gpus
        if not g.threadblocks
    ]


def _algo_problems(ir: IR, d: Dialect) -> list[Problem]:
    out = []
    if d.xml_collective(ir.collective) is None:
        known = ", ".join(ours for ours, _ in d.collectives)
        out.append(Problem(f"the {d.name} runtime does not run {ir.collective} (it runs {known})"))
    if ir.protocol not in d.protocols:
        out.append(Problem(f"protocol {ir.protocol}: {d.runtime} is given {', '.join(d.protocols)} schedules only"))
    if ir.nchannels > d.max_channels:
        out.append(Problem(f"{ir.nchannels} channels: the {d.name} runtime allows at most {d.max_channels}"))
    unlimited = d.xml.unlimited_max_bytes if d.xml is not None else (d.plan.unlimited_max_bytes if d.plan else 0)
    high = ir.max_bytes or unlimited  # what the file will say
    if high and ir.min_bytes > high:
        written = "" if ir.max_bytes else f" (the {d.name} dialect's maxBytes for no limit)"
        out.append(Problem(f"minBytes {ir.min_bytes} > maxBytes {high}{written}"))
    return out


def _gpu_problems(ir: IR, gpu: Gpu, d: Dialect) -> list[Problem]:
    return [*_layout_problems(gpu, d), *_buffer_problems(ir, gpu, d)]


def placed_problems(plans: Sequence[Sequence], awaited: Sequence[Collection[int]], d: Dialect) -> list[Problem]:
    """The layout's problems known once ``assign_threadblocks`` places the threadblocks (``plans``
    per rank, each with ``send``, ``recv`` and ``channel``; ``awaited``: per rank the ids others
    wait on), those of the first rank that has any: threadblocks per rank and per channel, ids
    waited on. The compiler judges a layout by them before building the rest of its IR."""
    for rank, tbs in enumerate(plans):
        problems = _count_problems(rank, tbs, d, awaited[rank])
        if problems:
            return problems
    return []


def bound_problems(bounds: Sequence[tuple[int, int] | None], d: Dialect) -> list[Problem]:
    """What every layout with these lower bounds breaks (per rank: threadblocks at least, the
    largest id of a threadblock others wait on at least; None: no bound), those of the first rank
    that has any: the compiler rules a layout out by them before placing its threadblocks."""
    for rank, bound in enumerate(bounds):
        if bound is None:
            continue
        tbs, waited = bound
        out = []
        if waited > d.max_dep_threadblock:
            out.append(Problem(f"a threadblock others wait for has id {waited} or more, past {d.max_dep_threadblock}", rank))
        if tbs > d.max_threadblocks:
            out.append(Problem(f"at least {tbs} threadblocks: the {d.name} runtime allows {d.max_threadblocks}", rank))
        if out:
            return out
    return []


def _layout_problems(gpu: Gpu, d: Dialect) -> list[Problem]:
    return _count_problems(gpu.rank, gpu.threadblocks, d)


def _count_problems(r: int, threadblocks: Sequence, d: Dialect, awaited: Collection[int] = ()) -> list[Problem]:
    """Threadblocks per rank, sending or receiving threadblocks per channel, and ids in ``awaited``
    past what the runtime can name (``layout_problems`` finds those from the IR's waits)."""
    out = [_awaited_id(r, t, d) for t in sorted(awaited) if t > d.max_dep_threadblock]
    if len(threadblocks) > d.max_threadblocks:
        out.append(Problem(f"{len(threadblocks)} threadblocks: the {d.name} runtime allows {d.max_threadblocks}", r))
    sends: dict[int, int] = defaultdict(int)
    recvs: dict[int, int] = defaultdict(int)
    for tb in threadblocks:
        sends[tb.channel] += tb.send is not None
        recvs[tb.channel] += tb.recv is not None
    for ch in sorted(sends):
        if max(sends[ch], recvs[ch]) > d.max_tbs_per_channel:
            out.append(
                Problem(
                    f"channel {ch}: more than {d.max_tbs_per_channel} sending or receiving threadblocks", r
                )
            )
    return out


def _buffer_problems(ir: IR, gpu: Gpu, d: Dialect) -> list[Problem]:
    """Buffers the runtime can address, and (where it checks) input and output that are 0 or whole."""
    out = []
    declared = (("i_chunks", gpu.input_chunks), ("o_chunks", gpu.output_chunks), ("s_chunks", gpu.scratch_chunks))
    for what, n in declared:
        if n > d.max_buffer_chunks:
            out.append(
                Problem(
                    f"{what}={n}: the runtimes store chunk offsets in 16 bits (at most {d.max_buffer_chunks})",
                    gpu.rank,
                )
            )
    if d.checks_buffer_sizes:
        whole = buffer_sizes(ir.collective, ir.num_ranks, ir.nchunksperloop) or (ir.nchunksperloop,) * 2
        for (what, n), size in zip(declared[:2], whole, strict=True):
            if n and n != size:
                out.append(Problem(f"{what}={n} is neither 0 nor the whole buffer ({size})", gpu.rank))
    return out


def _threadblock_problems(r: int, tb: Threadblock, d: Dialect, awaited: set) -> list[Problem]:
    out = [p] if (p := _steps_problem(r, tb, d)) else []
    if tb.channel >= d.max_channels:
        out.append(
            Problem(
                f"channel {tb.channel}: the {d.name} runtime allows channels below {d.max_channels}", r, tb.id
            )
        )
    if problem := _awaited_id_problem(r, tb, d, awaited):
        out.append(problem)
    return out


def _steps_problem(r: int, tb: Threadblock, d: Dialect) -> Problem | None:
    if d.max_steps is not None and len(tb.ops) > d.max_steps:
        return Problem(f"{len(tb.ops)} steps: the {d.name} runtime allows {d.max_steps} per threadblock", r, tb.id)
    return None


def _awaited(gpu: Gpu, d: Dialect) -> set[tuple[int, int]]:
    """The (threadblock, step) others wait on in ``gpu``, as far as :func:`_awaited_id_problem`
    asks: none where every id is one the runtime can name (half a million steps at 512 ranks)."""
    if all(tb.id <= d.max_dep_threadblock for tb in gpu.threadblocks):
        return set()
    return {(dep.tb, dep.op) for tb in gpu.threadblocks for op in tb.ops for dep in op.deps}


def _awaited_id_problem(r: int, tb: Threadblock, d: Dialect, awaited: set) -> Problem | None:
    if tb.id > d.max_dep_threadblock and any((tb.id, k) in awaited for k in range(len(tb.ops))):
        return _awaited_id(r, tb.id, d)
    return None


def _awaited_id(r: int, t: int, d: Dialect) -> Problem:
    """A threadblock others wait on whose id the runtime cannot name (``depid`` is an int8)."""
    return Problem(f"other threadblocks wait for it, but its id exceeds {d.max_dep_threadblock}", r, t)


def _marked_steps(ir: IR, d: Dialect) -> set[int]:
    """The ids of the ``Op`` objects in ``ir`` that :func:`_step_problems` may find fault with
    (steps it rejects, and the nops it follows): a threadblock without one has none. Judged once
    per object: the IR shares one among the steps written alike (some 30,000 for half a million
    steps at 512 ranks)."""
    ops = list(chain.from_iterable(tb.ops for gpu in ir.gpus for tb in gpu.threadblocks))
    folds = d.deps_per_step is not None
    return {
        key
        for key, op in dict(zip(map(id, ops), ops, strict=True)).items()
        if op.type not in d.op_types
        or (folds and (op.type is OpType.NOP or len(op.deps) > d.deps_per_step))
        or (op.type is not OpType.NOP and op.count > d.max_count)
    }


def _step_problems(r: int, tb: Threadblock, d: Dialect) -> list[Problem]:
    """Each step's count and dependencies, and the nops: where a step carries one dependency, the
    parser hands a nop's to the next real step, which must carry one of its own."""
    out = []
    pending = False
    for k, op in enumerate(tb.ops):
        at = (r, tb.id, k)
        if op.type not in d.op_types:
            out.append(Problem(f"{op.type.value}: the {d.name} runtime has no such step", *at))
        if d.deps_per_step is not None and len(op.deps) > d.deps_per_step:
            out.append(
                Problem(
                    f"{len(op.deps)} dependencies: the runtime reads {d.deps_per_step} per step (fold them into nops)",
                    *at,
                )
            )
        if op.type is not OpType.NOP and op.count > d.max_count:
            out.append(Problem(f"count {op.count}: the runtime allows at most {d.max_count}", *at))
        if d.deps_per_step is None:
            continue
        if op.type is OpType.NOP:
            pending = pending or bool(op.deps)
            continue
        if pending and not op.deps:
            out.append(Problem("follows nops with dependencies but has none itself: the runtime rejects it", *at))
        pending = False
    if pending:
        out.append(Problem("ends with a nop whose dependency no step takes", r, tb.id, len(tb.ops) - 1))
    return out


@dataclass(frozen=True)
class Folded:
    """Steps the runtime runs as one: a real op (or a chain of ``re`` ops), ``ops`` their indices,
    ``deps`` what it waits for (the dependencies of the nops before it, then its own)."""

    ops: tuple[int, ...]
    deps: tuple[Dep, ...]


def fold_steps(ops: Sequence[Op], d: Dialect) -> tuple[Folded, ...]:
    """How ``d``'s parser reads one threadblock's steps (see the module docstring)."""
    if runs_alone(ops):
        return tuple(Folded((i,), op.deps) if op.deps else _alone(i) for i, op in enumerate(ops))
    out: list[Folded] = []
    pending: list[Dep] = []
    chain: tuple | None = None  # the (destination, source buffer) the last transmission may extend
    for i, op in enumerate(ops):
        if op.type is OpType.NOP:
            pending.extend(op.deps)
            continue
        key = (op.dst, op.src.buffer) if op.type is OpType.REDUCE and op.src is not None else None
        if key is not None and key == chain and not op.deps:
            out[-1] = Folded((*out[-1].ops, i), out[-1].deps)
        else:
            out.append(Folded((i,), (*pending, *op.deps)))
            pending = []
        chained = key is not None and not op.has_dep and len(out[-1].ops) < d.reduce_fusion
        chain = key if chained else None
    return tuple(out)


def runs_alone(ops: Sequence[Op]) -> bool:
    """Whether :func:`fold_steps` runs each of one threadblock's steps alone: it has no nop and
    no ``re`` (most threadblocks)."""
    return _FOLDING.isdisjoint(map(_TYPE, ops))


_FOLDING = frozenset((OpType.NOP, OpType.REDUCE))
"""The steps :func:`fold_steps` may fold into others."""
_TYPE = attrgetter("type")


@lru_cache(maxsize=1 << 12)
def _alone(i: int) -> Folded:
    """Step ``i`` run alone, without dependencies: one (frozen) object for every threadblock, where
    half a million steps at 512 ranks made one each."""
    return Folded((i,), ())

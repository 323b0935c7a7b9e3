"""Compile DSL programs and synthesized algorithms into the IR.

``compile_program(program)`` checks the program symbolically, traces it into the chunk DAG, runs
the pass pipeline (:data:`codegen.passes.DEFAULT_PIPELINE`) and statically checks the IR for the
target dialect. ``compile_algorithm(algo)`` lowers an :class:`~synth.algorithm.Algorithm` into a
program first, so both go through the same passes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import repeat

from codegen.check import check_ir, check_ir_beside, find_deadlock
from codegen.chunk_dag import ChunkDAG
from codegen.dsl import PROTOCOLS, ChunkProgram
from codegen.errors import CodegenError, DslError, NoLayoutError
from codegen.instr_dag import InstrDAG
from codegen.ir import IR
from codegen.lower import lower_algorithm
from codegen.passes import DEFAULT_PIPELINE, PASSES
from codegen.passes.aggregate_chunks import WINDOW
from codegen.passes.assign_threadblocks import unpaired_bounds
from codegen.passes.insert_dependencies import awaited
from codegen.pipeline import CompileOptions, PassRecord, PipelineResult, run_pipeline
from codegen.placed_ir import placed_deadlock_free, step_bounds
from codegen.rules import (
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_NODES,
    Dialect,
    Problem,
    bound_problems,
    get_dialect,
    layout_problems,
    placed_problems,
)
from codegen.rules.xml_file import load_elements
from codegen.schedule import ChannelDAG, ScheduledDAG
from common.fields import is_integer
from common.gc_pause import gc_paused
from synth.algorithm import Algorithm
from topologies import Topology

__all__ = ["compile_algorithm", "compile_program", "run_compiler"]

_VARIED = frozenset({"bounded_fifos", "drain_fifos", "channels", "compact"})
"""The options ``run_compiler`` changes between attempts."""
_LAYOUT = frozenset({"channels", "compact"})
"""Those of them a layout or width tried changes (the FIFO bound changes the order before)."""
_HELD = 4
"""Results kept per FIFO bound for a later layout that assigns the same channels: the default
layout's widths (up to three at 128 ranks), which layout 1 often repeats at its first width."""
_BUILDING = ("insert_dependencies", "fold_deps_into_nops", "mark_has_dep", "size_buffers")
"""The default passes after the placement: the IR's steps per threadblock are those
``assign_threadblocks.step_bounds`` bounds."""


@gc_paused()
def run_compiler(
    program: ChunkProgram,
    *,
    channels: int | None = None,
    instances: int | None = None,
    protocol: str | None = None,
    dialect: str | Dialect | None = "azure",
    pipeline: tuple[str, ...] = DEFAULT_PIPELINE,
    verify_each: bool = False,
    print_after: tuple[str, ...] = (),
    port_order: bool = False,
    window: float = WINDOW,
    port_overlap: bool = False,
    reader_refused: bool = False,
    check_beside: bool = False,
) -> PipelineResult:
    """Compile with the pipeline's records (timings, dumps). ``instances``/``protocol`` override the
    program's. The passes keep within ``dialect``'s limits (channels, counts, steps per threadblock;
    ``None``: the limits every runtime shares) and the result is statically checked for it
    (``None``: universal rules only).

    ``channels=None`` (auto) starts with one channel per instance and spreads flows over more while a
    threadblock has more steps than the dialect allows; an integer fixes the count. The plain
    critical-path order is kept when it is deadlock-free with the runtime's bounded FIFOs, else
    the order within the bound is used (``order_by_critical_path``); where the default threadblock
    layout does not fit the runtime, the compact ones are tried (:class:`_Layouts`). ``port_order``:
    a timed program's sends take each port in the schedule's order (``order_ports``;
    ``port_overlap``: but not the sends the schedule overlaps there). ``window``: how close in time
    (a fraction of a timed program's span) the pieces merged into one op start
    (``aggregate_chunks``). Where the result holds more elements on a rank than the XML reader
    does, it is compiled once more with ``reader_refused`` (``fit_xml_reader`` widens the window).
    ``check_beside``: the static check runs in a child while the caller goes on, and the caller
    takes its verdict (:func:`codegen.check.settle`), as ``runtime.choice`` does once it has timed
    the IR.
    """
    program.verify()
    dag = _in_protocol(program.chunk_dag(), protocol)
    instances = program.instances if instances is None else instances
    d = None if dialect is None else get_dialect(dialect)
    max_channels = MAX_CHANNELS if d is None else d.max_channels
    _check_width(program.name, instances, channels, max_channels)
    fixed = {
        "max_channels": max_channels,
        "max_count": MAX_COUNT if d is None else d.max_count,
        "port_order": port_order,
        "port_overlap": port_overlap,
        "window": window,
        "max_nodes": MAX_NODES if d is not None and d.xml is not None else None,
        "reader_refused": reader_refused,
    }
    job = _Job(dag, pipeline, d, channels, instances, fixed, verify_each, print_after, check_beside)
    result = _compiled(job)
    ir = result.result
    refused = reader_refused or result.window is not None  # (fit_xml_reader widened it already)
    if isinstance(ir, IR) and not refused and _over_reader(ir, fixed["max_nodes"]):
        # the threadblocks and nops made after fit_xml_reader took a rank over the XML reader, as its
        # count could not tell: compiled again with its wider windows (this IR let go first)
        records, ir, result = result.records, None, None
        again = _compiled(replace(job, fixed={**fixed, "reader_refused": True}))
        result = replace(again, records=records + again.records)
    if isinstance(result.result, IR):
        (check_ir_beside if check_beside else check_ir)(result.result, d)
    return result


def _in_protocol(dag: ChunkDAG, protocol: str | None) -> ChunkDAG:
    """``dag`` in ``protocol`` (None: its own)."""
    if protocol is None:
        return dag
    if protocol not in PROTOCOLS:
        raise DslError(f"protocol: expected one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return replace(dag, info=replace(dag.info, protocol=protocol))


@dataclass(frozen=True)
class _Job:
    """What one compile of a program's chunk DAG is given: ``run_compiler``'s options, checked
    (``fixed``: those no layout, width or order tried changes). A compile again for the XML reader
    differs in ``fixed["reader_refused"]`` alone."""

    dag: ChunkDAG
    pipeline: tuple[str, ...]
    d: Dialect | None
    channels: int | None
    instances: int
    fixed: dict
    verify_each: bool
    print_after: tuple[str, ...]
    beside: bool = False
    """The static check runs beside the caller (``check_beside``): whether the IR kept deadlocks
    is then asked of its placement (:meth:`_Tails.deadlock_free`), the check asks it of the IR."""


def _compiled(job: _Job) -> PipelineResult:
    """One compile of ``job``, ``window`` set where ``fit_xml_reader`` widened it. The passes before
    the first that takes the FIFO bound or the channel count run once; only the rest is rerun for
    another order, width or layout (passes return new stages, never change their input)."""
    prefix, rest = _split(job.pipeline)
    options = CompileOptions(instances=job.instances, **job.fixed)
    head = run_pipeline(job.dag, prefix, options, job.verify_each, job.print_after)
    result = _Layouts(job, _Tails(head, rest, job.instances, job.fixed)).search()
    return replace(result, window=getattr(getattr(head.result, "info", None), "merge_window", None))


class _Layouts:
    """The threadblock layouts a compile tries: the default one; where it exceeds the runtime's
    threadblocks (or finds no channel for a flow) the compact ones: each connection kept to its
    share of the channels, then also a timed program's sends and receives sharing threadblocks,
    busiest with busiest, then busiest with idlest (``assign_channels``, ``assign_threadblocks``).

    A layout but the last is judged by its threadblocks (per rank, per channel, ids waited on) as
    soon as ``assign_threadblocks`` places them: where they pass the runtime's, the next layout is
    tried without building the IR, widening or asking whether the order deadlocks (the other order
    is not tried for that layout). Layouts 0 and 1 of a timed program are judged before their
    channels are assigned, by bounds every assignment's threadblocks meet
    (``assign_threadblocks.unpaired_bounds``). A width whose steps per threadblock the placement
    tells (``assign_threadblocks.step_bounds``) is widened from without building its IR: only the
    width a layout stops at is built."""

    def __init__(self, job: _Job, tails: _Tails) -> None:
        self.job, self.tails = job, tails
        self.last = 3 if job.d is not None else 0  # the last layout tried
        self.limit = None if job.d is None else job.d.max_steps

    def search(self) -> PipelineResult:
        """The first layout whose IR fits the runtime; the last one's where none does, unless its
        problems are the layout's (:class:`NoLayoutError`)."""
        d = self.job.d
        for compact in range(self.last + 1):
            try:
                result = self.layout(compact)
            except CodegenError:  # and _RuledOut: the layout's threadblocks pass the runtime's
                if compact == self.last:
                    raise
                continue
            if not isinstance(result.result, IR) or d is None:
                break
            problems = layout_problems(result.result, d)
            if not problems:
                break
            if compact == self.last:
                binding = bool(layout_problems(result.result, d, steps=False))
                raise NoLayoutError(_no_layout(result.result, d, problems), threadblocks=binding)
        return result

    def layout(self, compact: int) -> PipelineResult:
        """The reference compiler's order, if it is deadlock-free with the runtime's FIFOs too (it
        uses fewer channels); else the order within the FIFO bound (``order_by_critical_path``).
        Its threadblocks are judged first (:class:`_RuledOut`): at 512 ranks the trees allgather's
        default layout (140 threadblocks per rank, past azure's limits) was built whole and checked
        for nothing. One that stops widening past the runtime's steps per threadblock, as its
        placement tells (:class:`_Overlong`), is not built either: whether its order deadlocks is
        asked of the placement (the hierarchical alltoall's default layout at 512 ranks, 65 steps)."""
        job = self.job
        try:
            result = self.attempt(False, False, (), compact)
        except _Overlong as over:  # fails in this order: the other is tried where this one deadlocks
            if placed_deadlock_free(over.placed.entry.placed.result):
                raise _RuledOut(over.problem) from None
            return self.attempt(True, job.verify_each, job.print_after, compact)
        if isinstance(result.result, IR) and self.tails.deadlock_free(result.result, job.beside):
            if job.verify_each or job.print_after:
                result = self.attempt(False, job.verify_each, job.print_after, compact)
        else:
            result = self.attempt(True, job.verify_each, job.print_after, compact)
        return result

    def attempt(self, bounded: bool, verify: bool, dumps: tuple[str, ...], compact: int) -> PipelineResult:
        """One layout in one order, widened while its threadblocks take more steps than the runtime
        allows. A compact layout caps each connection's share at the runtime's channels, so its
        width may pass them: the lighter connections keep spreading while steps fall. The default
        layout stops where steps grow or stay level twice (its round robin over all flows may leave
        them level for a width, then fall: a ring alltoall's 65, 65, 41; but the hierarchical
        alltoall at 512 ranks went 65, 65, 65 for 1, 2, 4 channels)."""
        job, d, tails, limit = self.job, self.job.d, self.tails, self.limit
        max_channels = job.fixed["max_channels"]
        width, widest, before = job.channels or 1, max_channels * (max_channels if compact else 1), None
        level = False
        while True:
            # a layout but the last is judged by its threadblocks as soon as they are placed
            # (_RuledOut): more channels only add threadblocks, and so does the other order
            judge = None if d is None or compact == self.last else d
            placed = tails.placed(bounded, verify, dumps, width, compact, judge)
            widens = job.channels is None and limit is not None and width * job.instances < widest
            # known without the IR, where the placement tells them (a placement of the default
            # layout was judged too: what layout_problems below finds without steps, it found)
            steps = tails.steps(placed, limit) if widens else None
            known = steps is not None  # without the IR, which is not built yet
            if steps is None:
                result = tails.built(placed)
                ir = result.result
                if not isinstance(ir, IR):
                    return result
                if not compact and d is not None and layout_problems(ir, d, steps=False):
                    return result  # more channels only add threadblocks: the compact layouts are next
                steps = _most_steps(ir)
            if not widens or steps <= limit or (before is not None and _stops(compact, steps, before, level)):
                if known and steps > limit and judge is not None and not (job.verify_each or job.print_after):
                    # fails layout_problems once built: known without building it (_Overlong)
                    allows = f"the {d.name} runtime allows {limit} per threadblock"
                    raise _Overlong(placed, Problem(f"{steps} steps: {allows}"))
                return tails.built(placed)
            level, before = steps == before, steps
            width = min(widest // job.instances, max(width + 1, width * -(-steps // limit)))


class _Tails:
    """The passes after the prefix, run for each FIFO bound, width and layout the compiler tries,
    doing no work twice: the ordering passes (before the first that takes the channels or the
    layout) once per FIFO bound (and, bounded, whether a compact layout drains the FIFOs), and
    the passes after the channel assignment once per distinct assignment (at 512 ranks each run is
    tens of seconds: the default layout and layout 1 often assign the same channels, then only
    their check of the result tells them apart)."""

    def __init__(self, head: PipelineResult, rest: tuple[str, ...], instances: int, fixed: dict) -> None:
        self.head, self.instances, self.fixed = head, instances, fixed
        self.ordering, rest = _split(rest, _LAYOUT)
        k = next((k for k, name in enumerate(rest) if "channels" in _options(name)), len(rest) - 1)
        self.assign, after = rest[: k + 1], rest[k + 1 :]
        self.read = tuple(o for name in after for o in _options(name) if o != "compact")
        # the threadblocks are placed (and judged) after the passes up to the one giving the plans
        p = next((p for p, name in enumerate(after) if PASSES[name].gives is ScheduledDAG), -1)
        self.placing, self.building = after[: p + 1], after[p + 1 :]
        # the bounds of unpaired_bounds hold for these passes' layouts 0 and 1, judged where built
        unpaired = self.assign + self.placing == ("assign_channels", "assign_threadblocks")
        self.unpaired = bool(self.building) and unpaired
        # and those of step_bounds for these passes after the placement
        self.counted = self.placing == ("assign_threadblocks",) and self.building == _BUILDING
        self.ordered: dict[tuple, PipelineResult] = {}
        self.last: dict[tuple, dict[tuple, _Placement]] = {}  # after assignment
        self.checked: tuple[IR, bool] | None = None

    def placed(
        self, bounded: bool, verify: bool, dumps: tuple[str, ...], width: int, compact: int, judge: Dialect | None
    ) -> _Try:
        """The threadblocks placed for one attempt (those of an assignment placed before).
        Raises :class:`_RuledOut`, without building the IR, where ``judge``'s threadblocks per rank
        or per channel are passed once the threadblocks are placed."""
        # a compact layout pairs a connection's sends and receives in one threadblock: its bounded
        # order drains a full connection before a receive overtakes it (order_by_critical_path)
        drain = bounded and compact >= 1
        options = CompileOptions(
            instances=self.instances,
            channels=width,
            bounded_fifos=bounded,
            drain_fifos=drain,
            compact=compact,
            **self.fixed,
        )
        run = (bounded, drain, verify, dumps)
        if run not in self.ordered:
            self.ordered[run] = run_pipeline(self.head.result, self.ordering, options, verify, dumps)
        start = self.ordered[run]
        if judge is not None and self.unpaired and compact < 2 and isinstance(start.result, InstrDAG):
            # sends and receives kept apart: ruled out by bounds on any channel assignment's threadblocks
            problems = bound_problems(unpaired_bounds(start.result), judge)
            if problems:
                raise _RuledOut(problems[0])
        assigned = run_pipeline(start.result, self.assign, options, verify, dumps)
        stage = assigned.result
        # assign_threadblocks reads the layout only as whether (2) and how (3) to pair
        key = None
        if isinstance(stage, ChannelDAG):
            key = (id(stage.dag), stage.channel, compact >= 2, compact >= 3, *(getattr(options, o) for o in self.read))
        held = self.last.setdefault(run, {})
        entry = held.get(key) if key is not None else None
        if entry is None:
            entry = _Placement(run_pipeline(stage, self.placing, options, verify, dumps))
            if key is not None:
                held[key] = entry
                if len(held) > _HELD:  # the oldest goes: each may be a whole IR
                    del held[next(iter(held))]
        plans = entry.placed.result
        if judge is not None and self.building and isinstance(plans, ScheduledDAG):
            if entry.problems is None:  # layout 1 at its first width often places the default layout's
                entry.problems = placed_problems(plans.threadblocks, awaited(plans), judge)
            if entry.problems:
                raise _RuledOut(entry.problems[0])
        return _Try(entry, options, verify, dumps, self.head.records + start.records + assigned.records)

    def steps(self, attempt: _Try, limit: int) -> int | None:
        """The most steps a threadblock of the attempt's IR takes, where its placement tells it
        (``step_bounds`` agree) and they are more than ``limit``, and the IR is neither built yet nor
        to be checked after each pass; else None (an IR that may fit is built anyway)."""
        entry, plans = attempt.entry, attempt.entry.placed.result
        known = self.counted and isinstance(plans, ScheduledDAG) and entry.built is None
        if not known or attempt.verify:
            return None
        if max((len(plan.instrs) for tbs in plans.threadblocks for plan in tbs), default=0) <= limit:
            return None  # a step per instruction at least: where that fits, so may the IR
        if entry.steps is None:
            bounds = step_bounds(entry.placed.result)
            entry.steps = (max((b[0] for b in bounds), default=0), max((b[1] for b in bounds), default=0))
        least, most = entry.steps
        return least if least == most else None

    def built(self, attempt: _Try) -> PipelineResult:
        """The IR of the attempt's placement, built once, with the records of every pass that made
        it (once each)."""
        entry = attempt.entry
        if entry.built is None:
            options, verify, dumps = attempt.options, attempt.verify, attempt.dumps
            entry.built = run_pipeline(entry.placed.result, self.building, options, verify, dumps)
        records = (*attempt.records, *entry.placed.records, *entry.built.records)
        return PipelineResult(entry.built.result, records)

    def deadlock_free(self, ir: IR, placed: bool = False) -> bool:
        """``find_deadlock`` of ``ir`` finds none (once per IR: a repeated tail gives the same one).
        ``placed``: asked of the placement the default passes built ``ir`` from, where they did
        (:func:`~codegen.placed_ir.placed_deadlock_free`, the same answer: 0.25 s where the IR's
        took 0.77 at 512 ranks), for a compile whose check of the IR runs beside it."""
        if self.checked is None or self.checked[0] is not ir:
            placement = self._placement_of(ir) if placed and self.counted else None
            free = placed_deadlock_free(placement) if placement is not None else find_deadlock(ir) is None
            self.checked = (ir, free)
        return self.checked[1]

    def _placement_of(self, ir: IR) -> ScheduledDAG | None:
        """The placement whose IR ``ir`` is, among those held."""
        for held in self.last.values():
            for entry in held.values():
                if entry.built is not None and entry.built.result is ir:
                    return entry.placed.result
        return None


@dataclass
class _Placement:
    """The threadblocks placed for one channel assignment (``placed``), and what was found of them
    as later attempts needed it: the IR built from them, their problems for the runtime, the bounds
    on their steps per threadblock (least, most)."""

    placed: PipelineResult
    built: PipelineResult | None = None
    problems: list[Problem] | None = None
    steps: tuple[int, int] | None = None


@dataclass(frozen=True)
class _Try:
    """One attempt's placement, and what building its IR takes: the attempt's options, checks and
    dumps, and the records of the passes before the placement."""

    entry: _Placement
    options: CompileOptions
    verify: bool
    dumps: tuple[str, ...]
    records: tuple[PassRecord, ...]


class _RuledOut(CodegenError):
    """A layout whose placed threadblocks pass the runtime's per rank or per channel: ruled out in
    either order and at any wider width, so the driver tries the next layout without building
    this one's IR or asking whether its order deadlocks."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))


class _Overlong(CodegenError):
    """A layout, not the last, whose placement (``placed``, its IR not built) stops widening with more
    steps per threadblock than the runtime's (``problem``): in this order it fails, and only whether
    the order deadlocks (:func:`~codegen.placed_ir.placed_deadlock_free`) decides whether the
    other order is tried for it."""

    def __init__(self, placed: _Try, problem: Problem) -> None:
        super().__init__(str(problem))
        self.placed, self.problem = placed, problem


def _over_reader(ir: IR, max_nodes: int | None) -> bool:
    """Whether a rank of ``ir`` loads ``max_nodes`` XML elements or more (None: no XML reader)."""
    return max_nodes is not None and max(map(load_elements, ir.gpus, repeat(ir.num_ranks)), default=0) >= max_nodes


def _most_steps(ir: IR) -> int:
    """The most steps one threadblock of ``ir`` takes."""
    return max((len(tb.ops) for g in ir.gpus for tb in g.threadblocks), default=0)


def _stops(compact: int, steps: int, before: int, level: bool) -> bool:
    """Whether a layout stops widening: a compact one where its steps no longer fall, the default
    where they grow, or stay level a second time (``level``: they did at the width before)."""
    return steps >= before if compact else steps > before or (level and steps == before)


def _options(name: str) -> tuple[str, ...]:
    """The options a pass takes (none for an unknown name: ``run_pipeline`` refuses it)."""
    return PASSES[name].options if name in PASSES else ()


def _no_layout(ir: IR, d: Dialect, problems: list) -> str:
    """Why no layout fits ``d``: the first problem, what the last layout tried needs, the limits."""
    tbs = max(len(g.threadblocks) for g in ir.gpus)
    awaited = max(len({dep.tb for tb in g.threadblocks for op in tb.ops for dep in op.deps}) for g in ir.gpus)
    steps = max(len(tb.ops) for g in ir.gpus for tb in g.threadblocks)
    return (
        f"{ir.name}: no threadblock layout fits the {d.name} runtime: {problems[0]} (and "
        f"{len(problems) - 1} more problem(s)); the last layout tried (sends and receives paired) takes up "
        f"to {tbs} threadblocks per rank ({awaited} waited on) and {steps} steps per threadblock, the "
        f"runtime allows {d.max_threadblocks} threadblocks, ids up to {d.max_dep_threadblock} waited on and "
        f"{d.max_steps or 'any number of'} steps: a schedule with fewer peers or fewer sends per rank "
        "(fewer chunks) fits"
    )


def _split(pipeline: tuple[str, ...], varied: frozenset[str] = _VARIED) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The leading passes whose output does not depend on the ``varied`` options (by default the
    order and width being tried), the rest (with an unknown name all is rest, so ``run_pipeline``
    refuses it before any work)."""
    if any(name not in PASSES for name in pipeline):
        return (), pipeline
    k = 0
    while k < len(pipeline) and not varied & set(PASSES[pipeline[k]].options):
        k += 1
    return pipeline[:k], pipeline[k:]


def _check_width(name: str, instances: int, channels: int | None, max_channels: int) -> None:
    """Refuse, before the pipeline replicates anything, more channels than the runtime has."""
    for value, what in ((instances, "instances"), (channels, "channels")):
        if value is not None and (not is_integer(value) or value < 1):
            raise CodegenError(f"{name}: {what}: expected an integer >= 1, got {value!r}")
    if instances * (channels or 1) > max_channels:
        raise CodegenError(
            f"{name}: {instances} instance(s) x {channels or 1} channel(s) exceed the {max_channels} "
            "channels of the runtime"
        )


def compile_program(program: ChunkProgram, **options) -> IR:
    """The checked IR of a DSL program (options as :func:`run_compiler`)."""
    result = run_compiler(program, **options).result
    if not isinstance(result, IR):
        raise DslError(f"{program.name}: the pipeline stops before the IR (at {type(result).__name__})")
    return result


def compile_algorithm(
    algo: Algorithm,
    topology: Topology | str | None = None,
    *,
    inplace: bool = False,
    instances: int = 1,
    protocol: str = "Simple",
    channels: int | None = None,
    dialect: str | Dialect | None = "azure",
    port_order: bool = False,
    window: float = WINDOW,
    port_overlap: bool = False,
) -> IR:
    """The checked IR of a synthesized algorithm: lowered into DSL operations, then compiled
    (``port_order``, ``port_overlap``, ``window``: see :func:`run_compiler`; ``runtime.choice``
    decides them by the IR simulator).

    >>> from synth.baselines import make_baseline
    >>> from synth.collectives import make_collective
    >>> from topologies import load
    >>> topo = load("ring:4")
    >>> ir = compile_algorithm(make_baseline("ring", topo, make_collective("allgather", 4)), topo)
    >>> [len(g.threadblocks) for g in ir.gpus]
    [1, 1, 1, 1]
    """
    prog = lower_algorithm(algo, topology, inplace=inplace, instances=instances, protocol=protocol)
    return compile_program(
        prog, channels=channels, dialect=dialect, port_order=port_order, port_overlap=port_overlap, window=window
    )

"""The compiler's choice by the IR simulator: compile a timed schedule with and without its port
order (``codegen.passes.order_ports``) and keep the IR that is faster at the size it was
synthesized for, timed by the same engine as its Algorithm (the calibrated default model).

Every variant is compiled in the NCCL protocol the Algorithm model runs the schedule fastest in at
that size, where that is more than :data:`PROTOCOL_GAIN` faster than Simple (as NCCL's tuner picks
a protocol per size from its model; a protocol the user gives is kept): NDv2 x2's fully connected
MILPs at 64 KiB run 28x faster in LL, and their XMLs, within 10% in Simple, take 15.1 us in LL
where they take 22.4 us in Simple (allgather; 39.0 us before the IR simulator's connections were
per channel). Where no variant in it is within SPEED, those in
the caller's protocol are tried too (the stage below that tries the faster protocol otherwise).

Issue 17 item 4 asks that a compiled schedule stay within :data:`SPEED` of its Algorithm there, in
the calibrated model and in the ideal one (line rate, no per-call cost: the MILP's and SCCL's).
Where neither port order does, the compiler also tries :data:`WIDER`: only the pieces the
schedule starts at once merged (DGX-A100 x4's reducescatter 1.10x -> 1.03x), then pieces it starts
close together merged into fewer calls, over every channel (on NDv2 x2 at 64 KiB a connection's
two calls in flight bind: the fully connected sketch's allgather 2.37x -> 1.05x), then those in
the protocol the Algorithm model runs fastest where that is not Simple (:func:`faster_protocol`:
LL at small sizes, 8 calls in flight per connection and no per-call cost; its reducescatter 1.16x
-> 1.05x), and where none of those is either, :data:`OVERLAPPED`, for the per-call costs the
timing model overlaps:

- the port order that chains only the sends the schedule does not overlap through a port, with
  pieces merged within 1% of the span: a full chain serializes the per-call costs the calibrated
  model overlaps on a port (DGX-A100 x2 allreduce, 1.51x ideal -> 1.03x, 1.10x calibrated);
- the schedule re-timed as the calibrated Algorithm model runs it (``codegen.lower.retimed``),
  compiled so, only pieces starting together merged: a MILP's own order through a port is its
  model's, and the ideal one's cannot be kept without serializing those costs (DGX-A100 x2
  reducescatter 1.27x -> 1.07x calibrated; DGX H100 x2 allreduce made calibrated 1.12x -> 1.00x).

An untimed schedule (``synth trees``, ``synth hierarchical``) is compiled as it is first, unless
compiled so it would not run in the order it is timed in (:func:`in_step_order`: a baseline's
dataflow order where the calibrated Algorithm model starts a rank's sends out of step order); then
the re-timed variant with only pieces starting together merged goes first (the 512-rank
hierarchical alltoall: as it is 1.69x, in port order 2.06x, then that one 1.00x; three whole
compiles of 487,424 sends before); an allreduce of trees that carry each chunk whole
between machines (:func:`whole_trees`) is compiled first in its port order through the NICs alone
(the 512-rank allreduce: as it is 1.38x, so five whole compiles and more; now one, 1.06x). The search stops
at a candidate within :data:`EVEN` of its Algorithm in both models: each further variant is a
whole compile, for less than the models differ by; and it ends at a first variant that no
threadblock layout fits for its threadblocks
(``codegen.errors.NoLayoutError``): the variants left keep its connections and add channels or
waits. A candidate within SPEED in both
models beats one that is not; among those the faster in the
calibrated model is kept, and where none is within, the one closest to its Algorithm in its worse
model. :class:`Choice` says what was kept and how close it is, so the command line can tell the
user.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import Generic, TypeVar

from codegen.check import settle
from codegen.compiler import compile_algorithm, run_compiler
from codegen.dsl import ChunkProgram
from codegen.errors import CodegenError, DslError, IRCheckError, NoLayoutError
from codegen.ir import IR
from codegen.lower import SCHEDULE_SIZE, lower_algorithm, retimed
from codegen.passes.aggregate_chunks import WINDOW
from codegen.pipeline import PipelineResult
from codegen.rules import MAX_CHANNELS
from common.errors import XcclError
from common.forked import Results, together
from common.gc_pause import gc_paused
from common.units import format_size
from runtime.schedule_order import between_machines, in_step_order, is_timed, retimed_first, whole_trees
from runtime.sim import prepare as prepare_ir
from runtime.sim import simulate as simulate_ir
from synth.algorithm import Algorithm
from synth.cost import link_bound_us, model_ordered, simulate
from synth.timing import DEFAULT, IDEAL, Params, model_params
from synth.timing.calibration import PROTOCOLS
from topologies import Topology, TopologyError, load

__all__ = [
    "EVEN",
    "OVERLAPPED",
    "PORT_ORDERS",
    "PROTOCOL_GAIN",
    "SPEED",
    "WIDER",
    "Choice",
    "Variant",
    "between_machines",
    "choose_port_order",
    "compile_choosing",
    "compile_fastest",
    "faster_protocol",
    "in_step_order",
    "schedule_of",
    "synthesized_size",
    "whole_trees",
]

T = TypeVar("T")

PROTOCOL_GAIN = 0.10
"""How much faster the Algorithm model must run a schedule in another NCCL protocol for the choice
to compile it in that one first (no protocol given): less is within what a compile may lose (SPEED)."""

SPEED = 0.10
"""How much slower than its Algorithm a compiled schedule may be at its size (issue 17 item 4)."""

EVEN = 0.01
"""A candidate within this of its Algorithm in every model timed ends the search: what is left to
gain is less than the models' own differences, and each further variant is a whole compile (the
512-rank hierarchical alltoall's re-timed variant is at 1.00x, and the two after it in its stage
took 236 s of CPU, to fit no layout)."""

PORT_ORDERS = ("auto", "on", "off")
"""How a compile takes the port order: chosen by the IR simulator (``auto``), or forced on or off."""


@dataclass(frozen=True)
class Variant:
    """One way to compile a timed schedule: its port order, the merge window of
    ``aggregate_chunks`` (a fraction of the span), the channel count (None: the caller's), and
    whether the port order leaves the sends the schedule overlaps unchained (``port_overlap``),
    whether the schedule is first re-timed by the Algorithm model in the calibrated default
    (``retimed``: :func:`schedule_of`), and the NCCL protocol (None: the caller's)."""

    port_order: bool = False
    window: float = WINDOW
    channels: int | None = None
    port_overlap: bool = False
    retimed: bool = False
    protocol: str | None = None
    machine_ports: bool = False
    """The port order through the ports that leave a machine only (the NICs): :func:`whole_trees`."""

    def options(self) -> dict[str, object]:
        """The channel count and protocol the variant sets, as compile options."""
        return {k: v for k, v in (("channels", self.channels), ("protocol", self.protocol)) if v is not None}

    def describe(self) -> str:
        how = ["in the schedule's port order" if self.port_order else "without port order"]
        if self.port_order and self.machine_ports:
            how[0] += " between machines"
        if self.port_order and self.port_overlap:
            how[0] += " where it does not overlap sends"
        if self.retimed:
            how.insert(0, "as the Algorithm model runs it")
        if self.window == 0:
            how.append("only pieces starting together merged")
        elif self.window != WINDOW:
            how.append(f"pieces starting within {100 * self.window:.3g}% of the span merged")
        if self.channels is not None:
            how.append(f"{self.channels} channels")
        if self.protocol is not None:
            how.append(f"the {self.protocol} protocol")
        return ", ".join(how)


WIDER = (
    Variant(window=0.0),
    Variant(window=0.05, channels=MAX_CHANNELS),
    Variant(window=0.1, channels=MAX_CHANNELS),
)
"""Tried (with the better port order) only where neither port order is within SPEED. First the calls
the Algorithm model counts: only pieces the schedule starts at once merged (a merged call lands
whole, so each hop after it waits for its last piece: DGX-A100 x4's MILP reducescatter 1.10x ->
1.03x). Then fewer, larger calls over the most channels, where a connection's calls in flight bind
(small sizes)."""

OVERLAPPED = (
    Variant(port_order=True, window=0.01, port_overlap=True),
    Variant(port_order=True, window=0.0, port_overlap=True, retimed=True),
    Variant(port_order=True, window=0.0, channels=MAX_CHANNELS),
)
"""Tried only where neither port order nor :data:`WIDER` is within SPEED: the port order where the
schedule does not overlap sends, with fewer pieces merged (a schedule made in the calibrated model
overlaps per-call costs on a port), the schedule as the calibrated model runs it (where the
ideal MILP's order through a port would serialize them), and the port order whole over every
channel, only pieces starting together merged: a port's sends spread over more threadblocks, so
one waits for the send the schedule puts before it through the port, not behind a later one in its
threadblock (DGX-1's trees allgather, made for 1 GiB and re-timed: 1.16x -> 1.01x)."""


@dataclass(frozen=True)
class Choice:
    """What the compiler kept and why: modeled times at ``size_bytes`` in ``model`` (``ratios``:
    the kept IR over its Algorithm in that model and the ideal one; ``caller``: the caller's protocol
    and the Algorithm's time in it, where the kept IR is in another)."""

    variant: Variant
    size_bytes: float
    algorithm_us: float
    kept_us: float
    others_us: tuple[float, ...]
    model: str
    ratios: tuple[float, ...] = ()
    caller: tuple[str, float] | None = None

    @property
    def port_order(self) -> bool:
        return self.variant.port_order

    @property
    def ratio(self) -> float:
        """The kept IR's time over its Algorithm's."""
        return self.kept_us / self.algorithm_us if self.algorithm_us > 0 else 1.0

    @property
    def fits(self) -> bool:
        """Within SPEED of its Algorithm in every model timed."""
        return max((self.ratio, *self.ratios)) <= 1 + SPEED

    @property
    def even(self) -> bool:
        """Within EVEN of its Algorithm in every model timed: no variant need be tried after it."""
        return max((self.ratio, *self.ratios)) <= 1 + EVEN

    def as_written(self, window: float | None) -> Choice:
        """This choice saying the window the IR was merged over, where ``fit_xml_reader`` widened
        the variant's (``window``: the pipeline result's; None: the variant's own)."""
        return self if window is None else replace(self, variant=replace(self.variant, window=window))

    def describe(self) -> str:
        """One line for people: what was kept, how close it is, and whether that is within SPEED."""
        verdict = "within" if self.fits else "beyond"
        others = ", ".join(f"{us:.1f} us" for us in self.others_us) or "none compiled"
        ideal = f"; ideal model {max(self.ratios):.2f}x" if self.ratios else ""
        caller = "" if self.caller is None else f" in {self.variant.protocol}, {self.caller[1]:.1f} us in {self.caller[0]}"
        return (
            f"compiled {self.variant.describe()}: {self.kept_us:.1f} us in the IR simulator vs "
            f"{self.algorithm_us:.1f} us for the Algorithm{caller} at {format_size(self.size_bytes)} ({self.ratio:.2f}x, "
            f"{verdict} the {SPEED:.0%} aimed for{ideal}; the other candidates {others}; modeled, {self.model})"
        )


def synthesized_size(algo: Algorithm) -> float | None:
    """The size a schedule was made for, where it records one (a MILP's; ``synth trees`` records
    the size it chose its chunks for), else None."""
    size = dict(algo.provenance.params).get("size_bytes") if algo.provenance else None
    return float(size) if isinstance(size, int | float) and size > 0 else None


def schedule_of(algo: Algorithm, topology: Topology, variant: Variant) -> Algorithm:
    """The schedule ``variant`` compiles: ``algo``, or where ``variant.retimed`` its sends re-timed
    as the Algorithm model (the calibrated default) runs them at its synthesized size."""
    size = synthesized_size(algo)
    return retimed(algo, topology, size, DEFAULT) if variant.retimed and size is not None else algo


def choose_port_order(
    algo: Algorithm,
    topology: Topology,
    compiled: Callable[[Variant], T],
    ir_of: Callable[[T], IR] = lambda x: x,
    params: Params = DEFAULT,
    wider: Sequence[Variant] = WIDER,
    overlapped: Sequence[Variant] = OVERLAPPED,
    protocols: bool = True,
    algorithm_us: Callable[[Params], float] | None = None,
) -> tuple[T, Choice | None]:
    """``compiled(variant)`` with and without the port order, and where neither is within SPEED in
    both models each of ``wider`` too, then (``protocols``) those in :func:`faster_protocol`, and
    where none of those is, each of ``overlapped``; the best kept (see the module). Where
    (``protocols``) the Algorithm model runs ``algo`` more than PROTOCOL_GAIN faster in another
    protocol, every variant is in that one, and the third stage in ``params``' own. A variant in
    another protocol is timed, and its Algorithm with it, in that protocol's ``params``. A variant
    that does not compile is passed over (if none does, the first one's error is raised). An
    untimed ``algo`` with a recorded size (``synth trees``) is timed there too, each variant but
    the first re-timed (``retimed``); one with no size is compiled once, without (its Choice is
    None). A stage stops at a candidate within EVEN of its Algorithm in every model.
    ``algorithm_us``: the Algorithm's time in a model, where the caller has it (or has it made)."""
    size = synthesized_size(algo)
    if size is None:
        return _settled(compiled(Variant()), ir_of), None
    timer = _Timer(algo, topology, size, compiled, ir_of, params, algorithm_us)
    # in the protocol the Algorithm model runs it PROTOCOL_GAIN faster in, where there is one; an
    # untimed schedule: compiled as it is (and kept where that is within SPEED: one compile), else
    # each variant also as the Algorithm model runs it (``retimed``: its sends get starts)
    lead = faster_protocol(algo, topology, size, params, timer.algorithm, PROTOCOL_GAIN) if protocols else None
    retime = not is_timed(algo)

    def given(v: Variant) -> Variant:
        return replace(v, retimed=v.retimed or retime, protocol=lead)

    kept: _Kept[T] = _Kept(timer)
    _first_stage(kept, algo, topology, size, given, lead)
    if kept.best is None:
        raise timer.errors[0]
    order = min(kept.choices, key=lambda c: c.kept_us).port_order
    ordered = [given(Variant(port_order=order)), *(given(replace(v, port_order=order)) for v in wider)]

    def in_other_protocol() -> list[Variant]:  # back to the caller's, or the faster one (any gain)
        other = params.protocol if lead is not None else None
        if other is None and protocols:
            other = faster_protocol(algo, topology, size, params, timer.algorithm)
        return [] if other is None else [replace(v, protocol=other) for v in ordered]

    for stage in (lambda: ordered[1:], in_other_protocol, lambda: [given(v) for v in overlapped]):
        if kept.best[1].fits:
            break
        for v in stage():
            kept.add(v)
            if kept.even:
                break
    result, choice = kept.best
    others = tuple(c.kept_us for c in kept.choices if c is not choice)
    return result, replace(choice, others_us=others)


def _settled(result: T, ir_of: Callable[[T], IR]) -> T:
    """``result`` once the verdict of its IR's static check is in, where the check ran beside
    (``check_beside``: raised here where it failed); as it is where it holds no IR."""
    try:
        ir = ir_of(result)
    except XcclError:
        return result
    settle(ir)
    return result


def _first_stage(
    kept: _Kept[T],
    algo: Algorithm,
    topology: Topology,
    size: float,
    given: Callable[[Variant], Variant],
    lead: str | None,
) -> None:
    """The first candidates: an untimed schedule of whole trees (:func:`whole_trees`) in its port
    order between machines, kept where within SPEED; one compiled as it is out of its step order
    (:func:`in_step_order`) re-timed; then, unless one is within EVEN, as it is and, for a timed
    schedule or where none is within SPEED, in port order."""
    retime = not is_timed(algo)
    if retime and whole_trees(algo, topology):
        kept.add(Variant(port_order=True, machine_ports=True, protocol=lead))
        if kept.best is not None and kept.best[1].fits:
            return
    if retimed_first(algo, topology, size):
        kept.add(given(WIDER[0]))  # compiled as it is, it would run in another order than the one timed
    if not kept.even:
        kept.add(Variant(protocol=lead))
        if not retime or not (kept.best and kept.best[1].fits):
            kept.add(given(Variant(port_order=True)))


class _Timer(Generic[T]):
    """Compile a variant and time it at ``size`` in its protocol's model and the ideal one at once
    (the second in a child process: ``common.forked``), with its Algorithm (each model's Algorithm
    time once, or as ``algorithm_us`` gives it); a variant that does not compile is passed over
    (its error kept), except a first one that no layout fits for its threadblocks."""

    def __init__(
        self,
        algo: Algorithm,
        topology: Topology,
        size: float,
        compiled: Callable[[Variant], T],
        ir_of: Callable[[T], IR],
        params: Params,
        algorithm_us: Callable[[Params], float] | None = None,
    ) -> None:
        self.algo, self.topology, self.size, self.params = algo, topology, size, params
        self.compiled, self.ir_of = compiled, ir_of
        self.errors: list[XcclError] = []
        self.algorithm = algorithm_us or Results(lambda p: simulate(algo, topology, size, p).time_us)

    def __call__(self, variant: Variant, first: bool) -> tuple[T, Choice] | None:
        try:
            result = self.compiled(variant)
        except NoLayoutError as exc:
            if exc.threadblocks and first:
                raise  # the variants left keep the connections and add channels or waits: none cures it
            self.errors.append(exc)
            return None
        except XcclError as exc:
            self.errors.append(exc)
            return None
        ir, params = self.ir_of(result), self.params
        own = _in_protocol(params, variant.protocol)
        models = (own,) if own.model == IDEAL.model else (own, IDEAL)
        try:
            us = self._times(ir, models)
        except IRCheckError as exc:  # passed over, as a variant that does not compile
            self.errors.append(exc)
            return None
        algorithm = [self.algorithm(p) for p in models]
        ratios = tuple(t / a if a > 0 else 1.0 for t, a in zip(us[1:], algorithm[1:], strict=True))
        caller = (params.protocol, self.algorithm(params)) if own != params else None
        return result, Choice(variant, self.size, algorithm[0], us[0], (), own.label, ratios, caller)

    def _times(self, ir: IR, models: tuple[Params, ...]) -> list[float]:
        """``ir``'s times in ``models`` (the second in a child), once the verdict of its static
        check is in where that ran beside them (``check_beside``); where the simulator fails on
        ``ir``, the check's error comes first."""
        try:
            prepare_ir(ir, self.size)  # before the fork: the child shares it, not builds it again
            us = together(*(partial(_ir_us, ir, self.topology, self.size, p) for p in models))
        except Exception:
            settle(ir)
            raise
        settle(ir)
        return us


def _ir_us(ir: IR, topology: Topology, size: float, params: Params) -> float:
    return simulate_ir(ir, topology, size, params=params).time_us


class _Kept(Generic[T]):
    """Each variant compiled once by ``timed`` (None: it did not compile), the best candidate so
    far (:func:`_rank`; the earliest of equals) and every candidate's Choice. A result is dropped
    as soon as another ranks above it: at 512 ranks each is a whole IR (the hierarchical
    alltoall's compile, three variants: 7.4 GB peak holding all, 6.7 GB)."""

    def __init__(self, timed: Callable[[Variant, bool], tuple[T, Choice] | None]) -> None:
        self.timed = timed
        self.tried: set[Variant] = set()
        self.best: tuple[T, Choice] | None = None
        self.choices: list[Choice] = []

    @property
    def even(self) -> bool:
        """The best so far is within EVEN of its Algorithm in every model: no variant need follow."""
        return self.best is not None and self.best[1].even

    def add(self, variant: Variant) -> None:
        """Compile and time ``variant``, unless it was already (one tried first comes up again)."""
        if variant in self.tried:
            return
        self.tried.add(variant)
        candidate = self.timed(variant, not self.choices)
        if candidate is None:
            return
        self.choices.append(candidate[1])
        if self.best is None or _rank(candidate) < _rank(self.best):
            self.best = candidate


def faster_protocol(
    algo: Algorithm,
    topology: Topology,
    size: float,
    params: Params = DEFAULT,
    algorithm_us: Callable[[Params], float] | None = None,
    gain: float = 0.0,
) -> str | None:
    """The NCCL protocol in which the Algorithm model (``params``' named model) runs ``algo``
    fastest at ``size``, where that is more than ``gain`` (a fraction) faster than in ``params``'
    own (else None; None too for the ideal model, which has no protocol, and for ``params`` changed
    from its named model). At small sizes a connection holds 8 LL calls in flight where it holds 2
    Simple ones (:func:`codegen.protocols.fifo_calls`), and LL pays no per-call cost, as NCCL's
    tuner picks LL there too (NDv2 x2's fully connected reducescatter at 64 KiB: 14.3 us in LL, 410
    us in Simple). A protocol that ``algo``'s line-rate bound rules out
    (:func:`synth.cost.link_bound_us` over its rate) is not timed: at 1 GiB that spares every
    compile two Algorithm simulations (seconds at 512 ranks), and the bound is a count of the sends
    on each edge (the collective's min-cut bound, the same there, took 0.7 s at 128 ranks)."""
    if params.model == IDEAL.model or params != model_params(params.model, params.protocol):
        return None
    timed = algorithm_us or (lambda p: simulate(algo, topology, size, p).time_us)
    most = timed(params) / (1 + gain)  # what another protocol must take less than
    floor = link_bound_us(algo, topology, size)
    others = [model_params(params.model, p) for p in PROTOCOLS if p != params.protocol]
    times = {p.protocol: timed(p) for p in others if floor / p.rate_fraction < most}
    best = min(times, key=times.__getitem__, default=None)
    return best if best is not None and times[best] < most else None


def _in_protocol(params: Params, protocol: str | None) -> Params:
    """``params``' named model in ``protocol`` (None, or its own: ``params`` itself)."""
    return params if protocol in (None, params.protocol) else model_params(params.model, protocol)


def _rank(candidate: tuple[object, Choice]) -> tuple[bool, float]:
    """Within SPEED in every model first, then the faster; where none is within, the closest to
    its Algorithm in the model where it is furthest (``min`` keeps the earliest of equals)."""
    choice = candidate[1]
    return not choice.fits, choice.kept_us if choice.fits else max((choice.ratio, *choice.ratios))


def compile_fastest(
    algo: Algorithm, topology: Topology | None = None, port_order: str = "auto", **options: object
) -> tuple[IR, Choice | None]:
    """:func:`codegen.compiler.compile_algorithm` with the port order (and, where that is not
    enough, the merge window, channels and protocol) chosen by the IR simulator
    (``port_order="auto"``: :func:`compile_choosing`, as ``xccl compile`` does; ``"on"``/``"off"``
    force the order alone, with no Choice); a ``protocol`` given is kept, and the choice timed in
    it. ``topology=None``: the shipped one ``algo`` names, where there is one (else compiled once,
    without).

    >>> from synth.baselines import make_baseline
    >>> from synth.collectives import make_collective
    >>> from topologies import load
    >>> ring4 = load("ring:4")
    >>> ir, choice = compile_fastest(make_baseline("ring", ring4, make_collective("allgather", 4)), ring4)
    >>> ir.num_ranks, choice  # an untimed schedule: compiled once
    (4, None)
    """
    if port_order not in PORT_ORDERS:
        raise CodegenError(f"port_order: expected one of {', '.join(PORT_ORDERS)}, got {port_order!r}")
    if port_order != "auto":
        return compile_algorithm(algo, topology, port_order=port_order == "on", **_given(options)), None
    topo = topology if topology is not None else _shipped(algo)
    if topo is None:
        return compile_algorithm(algo, topology, **_given(options)), None
    inplace = bool(options.pop("inplace", False))
    protocol, channels = options.get("protocol"), options.get("channels")

    def run(program: ChunkProgram, v: Variant) -> PipelineResult:
        return run_compiler(
            program,
            port_order=v.port_order,
            window=v.window,
            port_overlap=v.port_overlap,
            check_beside=True,
            **{**options, **v.options()},
        )

    result, choice = compile_choosing(
        algo, topo, run, _ir_of, protocol=None if protocol is None else str(protocol), channels=channels, inplace=inplace
    )
    return result.result, None if choice is None else choice.as_written(result.window)


def _ir_of(result: PipelineResult) -> IR:
    """The IR a compile made (refused, as ``compile_program`` does, where the pipeline stops before)."""
    if not isinstance(result.result, IR):
        raise DslError(f"the pipeline stops before the IR (at {type(result.result).__name__})")
    return result.result


@gc_paused()  # lowering and compiling build millions of acyclic objects (common.gc_pause)
def compile_choosing(
    algo: Algorithm,
    topology: Topology,
    run: Callable[[ChunkProgram, Variant], T],
    ir_of: Callable[[T], IR] = lambda x: x,
    *,
    protocol: str | None = None,
    channels: object = None,
    inplace: bool = False,
) -> tuple[T, Choice | None]:
    """What ``xccl compile`` does with a verified Algorithm, and :func:`compile_fastest` (so
    ``xccl.compile`` and the scale benchmark): lowered once (again for a variant ``retimed``), each
    variant compiled by ``run(program, variant)``, one kept by :func:`choose_port_order`; a
    ``protocol`` the user gives is kept (no other tried) and ``channels`` given rule out ``WIDER``.
    The Algorithm's times the choice asks first are started in children before the lowering
    (:func:`_early`); where the first variant is re-timed (:func:`retimed_first`), the schedule
    as it is is lowered only if a later variant compiles it (the 512-rank hierarchical alltoall's
    first is within EVEN: 4 s of lowering spared)."""
    wider = WIDER if channels is None else ()
    params = DEFAULT if protocol is None else model_params(DEFAULT.model, protocol)
    size = synthesized_size(algo)
    algo.route(topology)  # before any child forks (the timings', xccl compile's verifier): they share the routes
    with Results(lambda p: simulate(algo, topology, size, p).time_us) as times:
        times.start(_early(algo, size, params))
        as_it_is = cache(lambda: lower_algorithm(algo, topology, inplace=inplace))
        lowered_first = not retimed_first(algo, topology, size)
        if lowered_first:
            as_it_is()  # beside the children's timings

        def compiled(v: Variant) -> T:
            program = retimed_program(v) if v.retimed else as_it_is()
            return run(between_machines(program, topology) if v.machine_ports else program, v)

        def retimed_program(v: Variant) -> ChunkProgram:  # lowered like the schedule as it is, where it was
            like = as_it_is() if lowered_first else None
            return lower_algorithm(schedule_of(algo, topology, v), topology, inplace=inplace, like=like)

        return choose_port_order(
            algo, topology, compiled, ir_of, params=params, wider=wider, protocols=protocol is None, algorithm_us=times
        )


def _early(algo: Algorithm, size: float | None, params: Params) -> tuple[Params, ...]:
    """The models the choice asks the Algorithm's time in (``params`` first, then the ideal one),
    less those whose list schedule the parent makes anyway (``synth.cost`` keeps it): the ideal one
    at SCHEDULE_SIZE the lowering orders an untimed schedule by, the calibrated one
    :func:`in_step_order` reads. Each is 3-9 s at 512 ranks, run beside the lowering."""
    if size is None:
        return ()
    untimed, ordered = not is_timed(algo), model_ordered(algo)
    skip = {IDEAL} if untimed and ordered and size == SCHEDULE_SIZE else {DEFAULT} if untimed and not ordered else set()
    return tuple(p for p in (params, IDEAL) if p not in skip)


def _given(options: dict[str, object]) -> dict[str, object]:
    """``compile_algorithm``'s options without a ``protocol`` left None (its default is Simple)."""
    return {k: v for k, v in options.items() if k != "protocol" or v is not None}


def _shipped(algo: Algorithm) -> Topology | None:
    """The topology ``algo`` names, where it is a shipped one or a family (as the lowering finds it)."""
    try:
        return load(algo.topology)
    except TopologyError:
        return None

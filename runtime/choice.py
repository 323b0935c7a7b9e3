"""The compiler's choice by the IR simulator: compile a timed schedule with and without its port
order (``codegen.passes.order_ports``) and keep the IR that is faster at the size it was
synthesized for, timed by the same engine as its Algorithm (the calibrated default model).

Issue 17 item 4 asks that a compiled schedule stay within :data:`SPEED` of its Algorithm there, in
the calibrated model and in the ideal one (line rate, no per-call cost: the MILP's and SCCL's).
Where neither port order does, the compiler also tries :data:`WIDER`: only the pieces the
schedule starts at once merged (DGX-A100 x4's reducescatter 1.10x -> 1.03x), then pieces it starts
close together merged into fewer calls, over every channel (on NDv2 x2 at 64 KiB a connection's
two calls in flight bind: the fully connected sketch's allgather 2.37x -> 1.05x). A candidate
within SPEED in both models beats one that is not; among equals the faster in the calibrated
model is kept. :class:`Choice` says what was kept and how close it is, so the command line can
tell the user.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from codegen.compiler import compile_algorithm
from codegen.errors import CodegenError
from codegen.ir import IR
from codegen.passes.aggregate_chunks import WINDOW
from codegen.rules import MAX_CHANNELS
from common.errors import XcclError
from common.units import format_size
from runtime.sim import simulate as simulate_ir
from synth.algorithm import Algorithm
from synth.cost import simulate
from synth.timing import DEFAULT, IDEAL, Params
from topologies import Topology, TopologyError, load

__all__ = [
    "PORT_ORDERS",
    "SPEED",
    "WIDER",
    "Choice",
    "Variant",
    "choose_port_order",
    "compile_fastest",
    "synthesized_size",
]

T = TypeVar("T")

SPEED = 0.10
"""How much slower than its Algorithm a compiled schedule may be at its size (issue 17 item 4)."""

PORT_ORDERS = ("auto", "on", "off")
"""How a compile takes the port order: chosen by the IR simulator (``auto``), or forced on or off."""


@dataclass(frozen=True)
class Variant:
    """One way to compile a timed schedule: its port order, the merge window of
    ``aggregate_chunks`` (a fraction of the span) and the channel count (None: the caller's)."""

    port_order: bool = False
    window: float = WINDOW
    channels: int | None = None

    def describe(self) -> str:
        how = ["in the schedule's port order" if self.port_order else "without port order"]
        if self.window == 0:
            how.append("only pieces starting together merged")
        elif self.window != WINDOW:
            how.append(f"pieces starting within {self.window:.0%} of the span merged")
        if self.channels is not None:
            how.append(f"{self.channels} channels")
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


@dataclass(frozen=True)
class Choice:
    """What the compiler kept and why: modeled times at ``size_bytes`` in ``model`` (``ratios``:
    the kept IR over its Algorithm in that model and the ideal one)."""

    variant: Variant
    size_bytes: float
    algorithm_us: float
    kept_us: float
    others_us: tuple[float, ...]
    model: str
    ratios: tuple[float, ...] = ()

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

    def describe(self) -> str:
        """One line for people: what was kept, how close it is, and whether that is within SPEED."""
        verdict = "within" if self.fits else "beyond"
        others = ", ".join(f"{us:.1f} us" for us in self.others_us) or "none compiled"
        ideal = f"; ideal model {max(self.ratios):.2f}x" if self.ratios else ""
        return (
            f"compiled {self.variant.describe()}: {self.kept_us:.1f} us in the IR simulator vs "
            f"{self.algorithm_us:.1f} us for the Algorithm at {format_size(self.size_bytes)} ({self.ratio:.2f}x, "
            f"{verdict} the {SPEED:.0%} aimed for{ideal}; the other candidates {others}; modeled, {self.model})"
        )


def synthesized_size(algo: Algorithm) -> float | None:
    """The size a timed schedule (every send has its start: a MILP's) was made for, else None."""
    size = dict(algo.provenance.params).get("size_bytes") if algo.provenance else None
    timed = all(s.start_us is not None for step in algo.steps for s in step.sends)
    return float(size) if timed and isinstance(size, int | float) and size > 0 else None


def choose_port_order(
    algo: Algorithm,
    topology: Topology,
    compiled: Callable[[Variant], T],
    ir_of: Callable[[T], IR] = lambda x: x,
    params: Params = DEFAULT,
    wider: Sequence[Variant] = WIDER,
) -> tuple[T, Choice | None]:
    """``compiled(variant)`` with and without the port order, and where neither is within SPEED in
    both models each of ``wider`` too; the best kept (see the module). A variant that does not
    compile is passed over (if none does, the first one's error is raised); an untimed ``algo``
    is compiled once, without (its Choice is None)."""
    size = synthesized_size(algo)
    if size is None:
        return compiled(Variant()), None
    models = (params,) if params == IDEAL else (params, IDEAL)
    algorithm_us = [simulate(algo, topology, size, p).time_us for p in models]

    errors: list[XcclError] = []

    def timed(variant: Variant) -> tuple[T, Choice] | None:
        try:
            result = compiled(variant)
        except XcclError as exc:
            errors.append(exc)
            return None
        ir = ir_of(result)
        us = [simulate_ir(ir, topology, size, params=p).time_us for p in models]
        ratios = tuple(t / a if a > 0 else 1.0 for t, a in zip(us[1:], algorithm_us[1:], strict=True))
        return result, Choice(variant, size, algorithm_us[0], us[0], (), params.label, ratios)

    tried = [x for x in (timed(Variant()), timed(Variant(port_order=True))) if x is not None]
    if not tried:
        raise errors[0]
    best = min(tried, key=_rank)
    if not best[1].fits:
        tried += [x for v in wider if (x := timed(replace(v, port_order=best[1].port_order))) is not None]
        best = min(tried, key=_rank)
    others = tuple(c.kept_us for r, c in tried if r is not best[0])
    return best[0], replace(best[1], others_us=others)


def _rank(candidate: tuple[object, Choice]) -> tuple[bool, float]:
    """Within SPEED in every model first, then the faster (``min`` keeps the earliest of equals)."""
    return not candidate[1].fits, candidate[1].kept_us


def compile_fastest(
    algo: Algorithm, topology: Topology | None = None, port_order: str = "auto", **options: object
) -> tuple[IR, Choice | None]:
    """:func:`codegen.compiler.compile_algorithm` with the port order (and, where that is not
    enough, the merge window and channels) chosen by the IR simulator (``port_order="auto"``;
    ``"on"``/``"off"`` force the order alone, with no Choice). ``topology=None``: the shipped one
    ``algo`` names, where there is one (else compiled once, without).

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
        return compile_algorithm(algo, topology, port_order=port_order == "on", **options), None
    topo = topology if topology is not None else _shipped(algo)
    if topo is None:
        return compile_algorithm(algo, topology, **options), None

    def compiled(v: Variant) -> IR:
        return compile_algorithm(
            algo, topo, port_order=v.port_order, window=v.window, **{**options, **_channels(v)}
        )

    wider = WIDER if options.get("channels") is None else ()
    return choose_port_order(algo, topo, compiled, wider=wider)


def _channels(variant: Variant) -> dict[str, int]:
    """The variant's channel count as a compile option, where it sets one."""
    return {} if variant.channels is None else {"channels": variant.channels}


def _shipped(algo: Algorithm) -> Topology | None:
    """The topology ``algo`` names, where it is a shipped one or a family (as the lowering finds it)."""
    try:
        return load(algo.topology)
    except TopologyError:
        return None

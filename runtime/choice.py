"""The compiler's choice by the IR simulator: compile a timed schedule with and without its port
order (``codegen.passes.order_ports``) and keep the IR that is faster at the size it was
synthesized for, timed by the same engine as its Algorithm (the calibrated default model).

Issue 17 item 4 asks that a compiled schedule stay within :data:`SPEED` of its Algorithm there;
:class:`Choice` says how close the one kept is, so the command line can tell the user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from codegen.compiler import compile_algorithm
from codegen.errors import CodegenError
from codegen.ir import IR
from common.units import format_size
from runtime.sim import simulate as simulate_ir
from synth.algorithm import Algorithm
from synth.cost import simulate
from synth.timing import DEFAULT, Params
from topologies import Topology, TopologyError, load

__all__ = ["PORT_ORDERS", "SPEED", "Choice", "choose_port_order", "compile_fastest", "synthesized_size"]

T = TypeVar("T")

SPEED = 0.10
"""How much slower than its Algorithm a compiled schedule may be at its size (issue 17 item 4)."""

PORT_ORDERS = ("auto", "on", "off")
"""How a compile takes the port order: chosen by the IR simulator (``auto``), or forced on or off."""


@dataclass(frozen=True)
class Choice:
    """What the compiler kept and why: modeled times at ``size_bytes`` in ``model``."""

    port_order: bool
    size_bytes: float
    algorithm_us: float
    kept_us: float
    other_us: float
    model: str

    @property
    def ratio(self) -> float:
        """The kept IR's time over its Algorithm's."""
        return self.kept_us / self.algorithm_us if self.algorithm_us > 0 else 1.0

    def describe(self) -> str:
        """One line for people: what was kept, how close it is, and whether that is within SPEED."""
        how = "in the schedule's port order" if self.port_order else "without port order"
        verdict = "within" if self.ratio <= 1 + SPEED else "beyond"
        return (
            f"compiled {how}: {self.kept_us:.1f} us in the IR simulator vs {self.algorithm_us:.1f} us for "
            f"the Algorithm at {format_size(self.size_bytes)} ({self.ratio:.2f}x, {verdict} the {SPEED:.0%} aimed for; "
            f"the other order {self.other_us:.1f} us; modeled, {self.model})"
        )


def synthesized_size(algo: Algorithm) -> float | None:
    """The size a timed schedule (every send has its start: a MILP's) was made for, else None."""
    size = dict(algo.provenance.params).get("size_bytes") if algo.provenance else None
    timed = all(s.start_us is not None for step in algo.steps for s in step.sends)
    return float(size) if timed and isinstance(size, int | float) and size > 0 else None


def choose_port_order(
    algo: Algorithm,
    topology: Topology,
    compiled: Callable[[bool], T],
    ir_of: Callable[[T], IR] = lambda x: x,
    params: Params = DEFAULT,
) -> tuple[T, Choice | None]:
    """``compiled(port_order)`` both ways, the faster kept (ties: without); an untimed ``algo`` is
    compiled once, without (its Choice is None)."""
    size = synthesized_size(algo)
    if size is None:
        return compiled(False), None
    model = simulate(algo, topology, size, params).time_us
    plain, ordered = compiled(False), compiled(True)
    plain_us, ordered_us = (
        simulate_ir(ir_of(x), topology, size, params=params).time_us for x in (plain, ordered)
    )
    keep = ordered_us < plain_us
    choice = Choice(keep, size, model, min(plain_us, ordered_us), max(plain_us, ordered_us), params.label)
    return (ordered if keep else plain), choice


def compile_fastest(
    algo: Algorithm, topology: Topology | None = None, port_order: str = "auto", **options: object
) -> tuple[IR, Choice | None]:
    """:func:`codegen.compiler.compile_algorithm` with the port order chosen by the IR simulator
    (``port_order="auto"``; ``"on"``/``"off"`` force it, with no Choice). ``topology=None``: the
    shipped one ``algo`` names, where there is one (else compiled once, without).

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
    return choose_port_order(algo, topo, lambda order: compile_algorithm(algo, topo, port_order=order, **options))


def _shipped(algo: Algorithm) -> Topology | None:
    """The topology ``algo`` names, where it is a shipped one or a family (as the lowering finds it)."""
    try:
        return load(algo.topology)
    except TopologyError:
        return None

"""``xccl tune``: per collective and size, the fastest verified schedule against NCCL (both
modeled), and a deployable bundle of only those that beat NCCL by a margin (docs/tune.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from synth.deadline import Deadline
from topologies.model import Topology
from xccl.tune.bundle import Bundle, TuneError, plan_bundle
from xccl.tune.sweep import CollectiveSweep, sweep_collective

__all__ = ["Bundle", "CollectiveSweep", "TuneError", "tune"]


def tune(
    topology: Topology,
    collectives: Sequence[str],
    sizes: Sequence[int],
    margin: float,
    time_limit_s: float,
    progress: Callable[[str], None] = lambda message: None,
) -> tuple[list[CollectiveSweep], Bundle]:
    """Sweep each collective over ``sizes`` within ``time_limit_s`` of wall time in all, and plan
    the bundle of the windows won by ``margin``. Ctrl-C ends the search: the sizes timed so far
    are kept and the remaining collectives are not started."""
    deadline = Deadline.after(time_limit_s)
    sweeps: list[CollectiveSweep] = []
    for name in collectives:
        sweep = sweep_collective(topology, name, sizes, deadline, progress)
        sweeps.append(sweep)
        if sweep.interrupted:
            break
    return sweeps, plan_bundle(sweeps, margin)

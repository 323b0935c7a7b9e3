"""NCCL as the peer of every comparison the tool prints: two estimates of what NCCL takes.

- *NCCL's layout in our engine*: the ``nccl`` baseline (NCCL's channels as an Algorithm,
  :mod:`synth.baselines.nccl`, the algorithm NCCL runs at large sizes) timed by the project's own
  engine with the same parameters as the algorithm compared, so both sides meet the same physics.
- *NCCL's own model*: :func:`synth.nccl.model.nccl_time` (its tuning model, with its own channel
  speeds and per-call latencies), what NCCL itself predicts and picks.

A gain over NCCL is NCCL's time over ours (above 1: ours is faster). Where NCCL has no such call
(gather, scatter, a custom collective; alltoall in its model) the estimate is None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from common.errors import XcclError

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from synth.collectives import Collective
    from synth.timing import Params
    from topologies.model import Topology

__all__ = ["NcclReference", "nccl_layout", "nccl_layout_refusal", "nccl_reference"]


@dataclass(frozen=True)
class NcclReference:
    """NCCL's two estimates at one size (us; None where NCCL has no such call)."""

    size_bytes: float
    layout_us: float | None
    """NCCL's layout timed by the project's engine (the same model as what it is compared with)."""
    model_us: float | None
    """NCCL's own tuning model."""
    model_pick: str = ""
    """The algorithm and protocol NCCL's model picks (``Ring/Simple``)."""

    def gains(self, time_us: float) -> tuple[float | None, float | None]:
        """NCCL's time over ``time_us`` for each estimate (layout, model)."""

        def ratio(nccl: float | None) -> float | None:
            return None if nccl is None or time_us <= 0 else nccl / time_us

        return ratio(self.layout_us), ratio(self.model_us)

    def fields(self, time_us: float) -> dict[str, float | str | None]:
        """Both estimates and the gain over each, as the ``--json`` outputs name them."""
        layout, model = self.gains(time_us)
        return {
            "nccl_layout_us": self.layout_us,
            "nccl_model_us": self.model_us,
            "nccl_model_pick": self.model_pick or None,
            "gain_vs_nccl_layout": layout,
            "gain_vs_nccl_model": model,
        }


@lru_cache(maxsize=32)
def _layout(topology: Topology, name: str, num_ranks: int, root: int | None) -> Algorithm | str | None:
    """The layout, or why it is not built (its error's message), or None where NCCL has no such call."""
    from synth.baselines import default_chunks, make_baseline
    from synth.baselines.nccl import COLLECTIVES
    from synth.collectives import make_collective

    if name not in COLLECTIVES or num_ranks != topology.num_ranks:
        return None
    chunks = default_chunks("nccl", name, num_ranks, topology)
    try:
        return make_baseline("nccl", topology, make_collective(name, num_ranks, chunks, root))
    except XcclError as exc:  # NCCL's rings need links this topology lacks, or a limit refuses it
        return str(exc)


def _layout_of(topology: Topology, collective: Collective) -> Algorithm | str | None:
    root = collective.root if collective.name in ("broadcast", "reduce") else None
    return _layout(topology, collective.name, collective.num_ranks, root)


def nccl_layout(topology: Topology, collective: Collective) -> Algorithm | None:
    """The ``nccl`` baseline (``auto``) for ``collective`` on ``topology``, built once per topology."""
    layout = _layout_of(topology, collective)
    return None if isinstance(layout, str) else layout


def nccl_layout_refusal(topology: Topology, collective: Collective) -> str | None:
    """Why :func:`nccl_layout` is None where NCCL has the call (its rings need links ``topology``
    lacks; a limit, such as its chunks at 512 ranks), so that a blank comparison says why."""
    layout = _layout_of(topology, collective)
    return layout if isinstance(layout, str) else None


def nccl_reference(
    topology: Topology,
    collective: Collective,
    size_bytes: float,
    params: Params | None = None,
    time_us: Callable[[Algorithm], float] | None = None,
) -> NcclReference:
    """NCCL's two estimates for ``collective`` at nccl-tests' ``size_bytes`` (module docstring).
    The layout is timed by ``time_us`` where given (e.g. the fastest protocol per size), else by the
    engine with ``params`` (default: the engine's default model), as what it is compared with."""
    from synth.cost import simulate
    from synth.nccl.model import COLLECTIVES, nccl_time
    from synth.timing import DEFAULT

    if time_us is None:
        chosen = params or DEFAULT

        def time_us(algo: Algorithm) -> float:
            return simulate(algo, topology, size_bytes, chosen).time_us

    layout = nccl_layout(topology, collective)
    layout_us = None if layout is None else time_us(layout)
    if collective.name not in COLLECTIVES or topology.num_ranks < 2:
        return NcclReference(size_bytes, layout_us, None)
    est = nccl_time(topology, collective.name, int(size_bytes))
    return NcclReference(size_bytes, layout_us, est.time_us, f"{est.algorithm}/{est.protocol}")

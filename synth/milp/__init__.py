"""TACCL-style MILP synthesis from communication sketches: routing, ordering and scheduling.

``synthesize(topology, collective, sketch, size_bytes)`` returns an :class:`synth.outcome.Outcome`
with a verified algorithm; the stages
are :mod:`synth.milp.routing` (MILP), :mod:`synth.milp.ordering` (list scheduling) and
:mod:`synth.milp.scheduling` (LP, or MILP when merging sends can pay). docs/milp.md explains why
they are fast. Names are imported on first use, so that listing solver back ends
(:mod:`synth.milp.solvers`) loads no solver.
"""

from __future__ import annotations

from common.lazy import lazy_exports

__all__ = [
    "BACKENDS",
    "SUPPORTED",
    "Options",
    "StageReport",
    "Status",
    "get_backend",
    "synthesize",
]

_HOME = {
    "BACKENDS": "synth.milp.solvers",
    "Status": "synth.milp.solvers",
    "get_backend": "synth.milp.solvers",
    "Options": "synth.milp.pipeline",
    "StageReport": "synth.milp.pipeline",
    "SUPPORTED": "synth.milp.synthesis",
    "synthesize": "synth.milp.synthesis",
}


__getattr__, __dir__ = lazy_exports(__name__, _HOME)

"""TACCL-style MILP synthesis from communication sketches: routing, ordering and scheduling.

``synthesize(topology, collective, sketch, size_bytes)`` returns a verified algorithm; the stages
are :mod:`synth.milp.routing` (MILP), :mod:`synth.milp.ordering` (list scheduling) and
:mod:`synth.milp.scheduling` (LP, or MILP when merging sends can pay). docs/milp.md explains why
they are fast.
"""

from synth.milp.pipeline import Options, StageReport
from synth.milp.solvers import BACKENDS, Status, get_backend
from synth.milp.synthesize import SUPPORTED, MilpResult, synthesize

__all__ = ["BACKENDS", "SUPPORTED", "MilpResult", "Options", "StageReport", "Status", "get_backend", "synthesize"]

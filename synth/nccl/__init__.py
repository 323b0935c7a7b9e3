"""NCCL's own time model, as a second estimate beside the project's timing engine.

- :mod:`synth.nccl.versions`: the tuning constants of each NCCL release (v2.30.7, v2.12.12).
- :mod:`synth.nccl.system`: NCCL's view of a topology (GPU generation, the GB/s it believes).
- :mod:`synth.nccl.search`: its channel search (rings, NVLS) on that view.
- :mod:`synth.nccl.model`: its latency and bandwidth tables and the per-call choice
  (:func:`nccl_time`).

The NCCL-equivalent baselines (NCCL's channel layout as Algorithms, timed by the project's own
engine) are in :mod:`synth.baselines`.
"""

from synth.nccl.model import COLLECTIVES, NcclEstimate, NcclModel, NcclModelError, nccl_model, nccl_time
from synth.nccl.versions import DEFAULT_VERSION, VERSIONS

__all__ = [
    "COLLECTIVES",
    "DEFAULT_VERSION",
    "VERSIONS",
    "NcclEstimate",
    "NcclModel",
    "NcclModelError",
    "nccl_model",
    "nccl_time",
]

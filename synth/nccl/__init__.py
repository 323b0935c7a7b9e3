"""NCCL's own time model, as a second estimate beside the project's timing engine.

- :mod:`synth.nccl.versions`: the tuning constants of each NCCL release (v2.30.7, v2.12.12).
- :mod:`synth.nccl.system`: what NCCL believes of the hardware (GPU generation, GB/s per link).
- :mod:`synth.nccl.search`: its channel search: the rings and NVLS channels it builds on a
  topology, which both the model (channels, GB/s per channel) and the ``nccl`` baseline
  (:mod:`synth.baselines.nccl`, the rings as Algorithms) read: one search for both.
- :mod:`synth.nccl.p2p`: its point-to-point channels per peer (an alltoall's), from that search.
- :mod:`synth.nccl.model`: its latency and bandwidth tables and the per-call choice
  (:func:`nccl_time`).
- :mod:`synth.nccl.compare`: NCCL's two estimates (its layout in the project's engine, its own
  model) beside every modeled time the tool prints.
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

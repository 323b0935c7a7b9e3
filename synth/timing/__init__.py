"""The one timing engine: when transfers start and arrive on a topology.

Every modeled time of the project comes from here: the Algorithm model (:func:`synth.cost.simulate`),
the MILP's ordering stage (:func:`synth.milp.ordering.list_schedule`) and the IR simulator
(:func:`runtime.sim.simulate`). They differ only in what they feed the engine (which transfers, what
each waits for, their priority rule), never in how a transfer occupies links or when it arrives.

Units: time in microseconds, bandwidth in GB/s (1e9 bytes per second), sizes in bytes; 1 GB/s moves
1e3 bytes per microsecond (:data:`common.units.BYTES_PER_US_PER_GBPS`).

The model (:class:`Params` holds its parameters, :class:`Network` applies them to a topology):

- A transfer moves ``b`` bytes from rank ``s`` to rank ``d`` over the logical link ``s -> d``
  (``Topology.logical()``): the physical path between them, through switches, with the path's
  ``alpha_us`` and its bandwidth (the slowest edge's).
- Every physical edge on the path is a resource with ``count`` servers of ``bandwidth_GBps`` each
  (an NVLink, a switch port, a NIC). From its start, the transfer holds one server of every edge of
  its path, each for ``b / (edge bandwidth x rate_fraction)`` (the server that frees first); links
  through one switch port share that port.
- A send first pays ``send_us`` (a runtime's per-call work: flags, fences): it holds the
  *connection* and keeps the sender busy for ``send_us + b / (link bandwidth x rate_fraction)``.
  A connection is the runtime's where the feeder knows the send's channel (the IR simulator): one
  per ``(s, d, channel)``, one call at a time, as NCCL gives each channel its own connection to a
  peer and MSCCL one threadblock to each, so two channels to one peer pay their send costs at once
  and share only the physical edges. An Algorithm has no channels: its connection is ``s -> d``,
  with as many servers as the path's fewest parallel links (docs/nccl.md, "Calibration"). The data
  arrives ``send_us + alpha + b / (link bandwidth x rate_fraction)`` after the start. Alpha delays
  the arrival but occupies nothing.
- A collective call pays ``launch_us`` once, before anything moves (the feeders add it).
- Store and forward: a transfer that forwards data starts only once that data has arrived, so a
  chunk crosses a relay rank whole; pipelining comes from splitting data into smaller transfers
  (chunks, MILP pieces, the IR's tiles), each timed on its own.
- Non-delay list scheduling (:func:`synth.timing.engine.run_jobs`, imported from there: it loads
  NumPy and numba, which a command that only names the models need not): a transfer starts as soon
  as it is ready (what its feeder says it waits for has happened) and a server of every resource of
  its path is free.
  Transfers that could take the same server at the same instant go in the order of their feeder's
  *priority* (smaller first); at equal priority the one that has waited longest (the earliest ready
  time) goes first, then the smaller job id. Instants closer than ``Params.tolerance_us`` are one.

The parameters (:class:`Params`) come in named sets (:mod:`synth.timing.calibration`): ``calibrated``
(the default: 80% of line rate, the protocol's efficiency, a launch and a per-send cost, each with
its source) and ``ideal`` (line rate, no costs: SCCL's and TACCL's model, and the lower bounds').
"""

from synth.timing.calibration import (
    CALIBRATION,
    DEFAULT,
    DEFAULT_MODEL,
    DEFAULT_PROTOCOL,
    IDEAL,
    MODELS,
    PROTOCOLS,
    TimingModelError,
    model_params,
)
from synth.timing.model import CONNECTION, Network, Params, Transfer

__all__ = [
    "CALIBRATION",
    "CONNECTION",
    "DEFAULT",
    "DEFAULT_MODEL",
    "DEFAULT_PROTOCOL",
    "IDEAL",
    "MODELS",
    "PROTOCOLS",
    "Network",
    "Params",
    "TimingModelError",
    "Transfer",
    "model_params",
]

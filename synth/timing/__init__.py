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
  its path, each for ``b / edge bandwidth`` (the server that frees first); links through one switch
  port share that port.
- The sender is busy for ``b / link bandwidth``; the data arrives ``alpha + b / link bandwidth``
  after the start. Alpha delays the arrival but occupies nothing.
- Store and forward: a transfer that forwards data starts only once that data has arrived, so a
  chunk crosses a relay rank whole; pipelining comes from splitting data into smaller transfers
  (chunks, MILP pieces, the IR's tiles), each timed on its own.
- Non-delay list scheduling (:class:`Engine`): a transfer starts as soon as it is ready (what its
  feeder says it waits for has happened) and a server of every edge of its path is free. Transfers
  that could take the same server at the same instant go in the order of their feeder's
  *priority* (smaller first); at equal priority the one that has waited longest (the earliest ready
  time) goes first, then the smaller job id. Instants closer than ``Params.tolerance_us`` are one.

Nothing is calibrated yet: no per-call launch cost, no per-send cost occupying the connection, no
protocol efficiency, links at line rate. Such parameters belong in :class:`Params`.
"""

from synth.timing.engine import Engine
from synth.timing.model import DEFAULT, Network, Params, Transfer

__all__ = ["DEFAULT", "Engine", "Network", "Params", "Transfer"]

"""xccl-synth: topology-aware synthesis of collective-communication algorithms.

The public API (each a thin call into its package; see :mod:`xccl.api` for examples)::

    xccl.topology(name_or_path)                    # topologies.load
    xccl.synthesize(topology, collective, method)  # SMT, MILP or a baseline; verified
    xccl.pareto(topology, collective)              # the SMT latency/bandwidth front
    xccl.compile(algorithm_or_program)             # codegen: a checked IR
    xccl.export(ir, path, dialect)                 # MSCCL XML (azure, msccl) or JSON IR
    xccl.run(ir, size, backend="auto")             # execute once, checked against NumPy
    xccl.bench(ir, sizes, backend)                 # nccl-tests-style table
    xccl.simulate(algorithm, topology, size)       # modeled time (event simulator; calibrated or ideal)
    xccl.nccl_time(topology, collective, size)     # NCCL's own modeled time (its tuning model)
    xccl.lower_bound(topology, collective, size)   # the time no algorithm can beat

The names live in :mod:`xccl.api` and are imported on first use: ``import xccl`` (and the command
line, a subpackage) loads no solver, graph or array library until a function is called.
"""

from __future__ import annotations

from common.lazy import lazy_exports

__all__ = [
    "METHODS",
    "bench",
    "best_backend",
    "collective",
    "compile",
    "export",
    "lower_bound",
    "nccl_time",
    "pareto",
    "run",
    "simulate",
    "synthesize",
    "topology",
]


__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "xccl.api"))

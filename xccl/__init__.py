"""xccl-synth: topology-aware synthesis of collective-communication algorithms.

The public API (each a thin call into its package; see :mod:`xccl.api` for examples)::

    xccl.topology(name_or_path)                    # topologies.load
    xccl.synthesize(topology, collective, method)  # SMT, MILP or a baseline; verified
    xccl.pareto(topology, collective)              # the SMT latency/bandwidth front
    xccl.compile(algorithm_or_program)             # codegen: a checked IR
    xccl.export(ir, path, dialect)                 # MSCCL XML (azure, msccl) or JSON IR
    xccl.run(ir, size, backend="auto")             # execute once, checked against NumPy
    xccl.bench(ir, sizes, backend)                 # nccl-tests-style table
    xccl.simulate(algorithm, topology, size)       # modeled time (event simulator)
    xccl.lower_bound(topology, collective, size)   # the time no algorithm can beat

The names live in :mod:`xccl.api` and are imported on first use: ``import xccl`` (and the command
line, a subpackage) loads no solver, graph or array library until a function is called.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "METHODS",
    "bench",
    "best_backend",
    "collective",
    "compile",
    "export",
    "lower_bound",
    "pareto",
    "run",
    "simulate",
    "synthesize",
    "topology",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("xccl.api"), name)
    raise AttributeError(f"module 'xccl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

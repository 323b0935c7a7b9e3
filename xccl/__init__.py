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
"""

from xccl.api import (
    METHODS,
    bench,
    best_backend,
    collective,
    compile,
    export,
    lower_bound,
    pareto,
    run,
    simulate,
    synthesize,
    topology,
)

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

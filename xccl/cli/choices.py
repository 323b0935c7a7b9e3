"""Names the parser offers whose registries live in heavy modules, kept here so that building the
parser (``xccl --help``, every command's start) loads no solver, executor or array library.

Each is a copy of its registry's keys, in the registry's order; ``tests/test_cli_choices.py``
fails when one drifts, naming the registry to copy from.
"""

from __future__ import annotations

__all__ = [
    "ALLREDUCE_METHODS",
    "BASELINE_NAMES",
    "DEFAULT_MAX_CHUNKS",
    "MILP_COLLECTIVES",
    "MILP_SOLVERS",
    "MILP_STAGE_TIME_LIMIT_S",
    "MILP_TIME_LIMIT_S",
    "REDUCTIONS",
    "RUNTIME_BACKENDS",
    "SMT_INSTANCE_TIME_LIMIT_S",
    "SMT_TIME_LIMIT_S",
]

BASELINE_NAMES = ("ring", "bidir-ring", "direct", "recursive-doubling", "binomial-tree", "hierarchical")
"""``synth.baselines.BASELINES``."""

ALLREDUCE_METHODS = ("auto", "compose", "direct")
"""``synth.smt.synthesizer.ALLREDUCE_METHODS``."""

DEFAULT_MAX_CHUNKS = 8
"""``synth.smt.pareto.DEFAULT_MAX_CHUNKS``."""

SMT_TIME_LIMIT_S = 600.0
"""``synth.smt.synthesizer.DEFAULT_TIME_LIMIT_S``."""

SMT_INSTANCE_TIME_LIMIT_S = 60.0
"""``synth.smt.synthesizer.DEFAULT_INSTANCE_TIME_LIMIT_S``."""

MILP_TIME_LIMIT_S = 600.0
"""``synth.milp.pipeline.DEFAULT_TIME_LIMIT_S``."""

MILP_STAGE_TIME_LIMIT_S = 30.0
"""``synth.milp.pipeline.DEFAULT_STAGE_TIME_LIMIT_S``."""

MILP_COLLECTIVES = ("allgather", "alltoall", "broadcast", "reducescatter", "reduce", "allreduce")
"""``synth.milp.synthesis.SUPPORTED``."""

MILP_SOLVERS = ("highs", "cbc")
"""``synth.milp.solvers.BACKENDS``, in order of preference."""

REDUCTIONS = ("sum", "prod", "min", "max")
"""``runtime.reference.REDUCTIONS``."""

RUNTIME_BACKENDS = {
    "cupy": ("the CuPy GPU executor (peer-to-peer kernels), timed with CUDA events", True),
    "numpy": ("the NumPy reference executor on this CPU (every rank in one process)", True),
    "sim": ("the alpha-beta timing simulator (model time, no data)", False),
}
"""``runtime.bench.backends()``, sorted: name -> (description, whether it checks outputs)."""

"""The parser's copies of heavy registries (xccl/cli/choices.py) match their sources, and building
the parser loads none of the heavy libraries they were copied to avoid."""

from __future__ import annotations

import subprocess
import sys

from xccl.cli import choices


def test_baselines():
    from synth.baselines import BASELINES

    assert tuple(BASELINES) == choices.BASELINE_NAMES


def test_smt_names():
    from synth.smt.pareto import DEFAULT_MAX_CHUNKS
    from synth.smt.synthesizer import (
        ALLREDUCE_METHODS,
        DEFAULT_INSTANCE_TIME_LIMIT_S,
        DEFAULT_TIME_LIMIT_S,
    )

    assert tuple(ALLREDUCE_METHODS) == choices.ALLREDUCE_METHODS
    assert choices.DEFAULT_MAX_CHUNKS == DEFAULT_MAX_CHUNKS
    assert choices.SMT_TIME_LIMIT_S == DEFAULT_TIME_LIMIT_S
    assert choices.SMT_INSTANCE_TIME_LIMIT_S == DEFAULT_INSTANCE_TIME_LIMIT_S


def test_milp_names():
    from synth.milp.pipeline import DEFAULT_STAGE_TIME_LIMIT_S, DEFAULT_TIME_LIMIT_S
    from synth.milp.solvers import BACKENDS
    from synth.milp.synthesis import SUPPORTED

    assert tuple(SUPPORTED) == choices.MILP_COLLECTIVES
    assert tuple(BACKENDS) == choices.MILP_SOLVERS
    assert choices.MILP_TIME_LIMIT_S == DEFAULT_TIME_LIMIT_S
    assert choices.MILP_STAGE_TIME_LIMIT_S == DEFAULT_STAGE_TIME_LIMIT_S


def test_runtime_names():
    from runtime.bench import backends
    from runtime.reference import REDUCTIONS

    assert tuple(REDUCTIONS) == choices.REDUCTIONS
    table = {name: (cls.description, cls.checks) for name, cls in sorted(backends().items())}
    assert table == choices.RUNTIME_BACKENDS


HEAVY = ("z3", "networkx", "numpy", "highspy", "pulp", "matplotlib", "synth.smt", "runtime.bench")


def test_building_the_parser_loads_no_heavy_library():
    code = (
        "import sys; import xccl; from xccl.cli.main import build_parser; build_parser(); "
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.split() == []

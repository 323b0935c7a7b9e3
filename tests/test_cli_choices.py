"""The parser offers what the registries hold (read lazily from heavy modules, xccl/cli/choices.py,
or directly from light ones), its remaining copies of heavy modules' defaults match their sources,
and building the parser loads none of the heavy libraries."""

from __future__ import annotations

import argparse
import subprocess
import sys

from xccl.cli import choices
from xccl.cli.main import build_parser


def _action(*command: str, dest: str) -> argparse.Action:
    """The parser's action for ``dest`` in the (sub)command ``command``."""
    parser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return next(a for a in parser._actions if a.dest == dest)


def test_baselines():
    from synth.baselines import BASELINES

    assert tuple(choices.BASELINE_NAMES) == tuple(BASELINES)
    assert list(_action("baseline", dest="kind").choices) == list(BASELINES)


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

    assert tuple(SUPPORTED) == tuple(choices.MILP_COLLECTIVES)
    assert list(_action("synth", "milp", dest="collective").choices) == list(SUPPORTED)
    assert tuple(BACKENDS) == tuple(choices.MILP_SOLVERS)
    assert choices.MILP_TIME_LIMIT_S == DEFAULT_TIME_LIMIT_S
    assert choices.MILP_STAGE_TIME_LIMIT_S == DEFAULT_STAGE_TIME_LIMIT_S


def test_runtime_names():
    """``run`` and ``bench`` offer the registered backends (``run`` those that check), each with its
    description, and the reductions the reference computes."""
    from runtime.bench import backends
    from runtime.reference import REDUCTIONS

    table = backends()
    bench = _action("bench", dest="backend")
    assert list(bench.choices) == sorted(table)
    assert all(f"{name}: {cls.description}" in bench.help for name, cls in table.items())
    assert list(_action("run", dest="backend").choices) == sorted(n for n, c in table.items() if c.checks)
    for command in ("run", "bench"):
        assert list(_action(command, dest="op").choices) == list(REDUCTIONS)


def test_registry_names_read_their_registry_on_first_use():
    names = choices.RegistryNames("tests_absent_module", "NAMES")
    assert repr(names) == "RegistryNames(tests_absent_module.NAMES)"  # nothing imported yet
    lazy = choices.RegistryNames("runtime.datatypes", "REDUCTIONS")
    assert "max" in lazy and list(lazy) == ["sum", "prod", "min", "max"] and lazy[1] == "prod"


HEAVY = ("z3", "networkx", "numpy", "highspy", "pulp", "matplotlib", "synth.smt", "runtime.bench")


def test_building_the_parser_loads_no_heavy_library():
    code = (
        "import sys; import xccl; from xccl.cli.main import build_parser; build_parser(); "
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.split() == []

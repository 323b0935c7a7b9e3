"""What the parser offers from registries that live in heavy modules, without loading them when
the parser is built (``xccl --help``, every command's start).

A choice list is a :class:`RegistryNames`: a view of its registry's keys that imports the registry
the first time a value is checked or the names are listed, which argparse does only for an option
that is given, or in the help of the command that has it. The synthesizers' defaults and fixed
choices live in the light :mod:`synth.defaults`, re-exported here under the names the commands use;
registries in light modules (the runtime backends, dtypes and reductions) are imported directly by
the commands that offer them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import cached_property
from typing import overload

from synth.defaults import (
    ALLREDUCE_METHODS,
    MILP_STAGE_TIME_LIMIT_S,
    MILP_TIME_LIMIT_S,
    SMT_INSTANCE_TIME_LIMIT_S,
    SMT_TIME_LIMIT_S,
)
from synth.defaults import PARETO_MAX_CHUNKS as DEFAULT_MAX_CHUNKS

__all__ = [
    "ALLREDUCE_METHODS",
    "BASELINE_NAMES",
    "DEFAULT_MAX_CHUNKS",
    "MILP_COLLECTIVES",
    "MILP_SOLVERS",
    "MILP_STAGE_TIME_LIMIT_S",
    "MILP_TIME_LIMIT_S",
    "NCCL_ALGO_NAMES",
    "SMT_INSTANCE_TIME_LIMIT_S",
    "SMT_TIME_LIMIT_S",
    "RegistryNames",
]


class RegistryNames(Sequence[str]):
    """The keys of ``module.attribute`` (a name -> factory map, or a tuple of names), in its order,
    read on first use."""

    def __init__(self, module: str, attribute: str) -> None:
        self.module, self.attribute = module, attribute

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(getattr(importlib.import_module(self.module), self.attribute))

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self.names[index]

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"RegistryNames({self.module}.{self.attribute})"


BASELINE_NAMES = RegistryNames("synth.baselines", "BASELINES")

NCCL_ALGO_NAMES = RegistryNames("synth.baselines.nccl", "NCCL_ALGOS")

MILP_COLLECTIVES = RegistryNames("synth.milp.synthesis", "SUPPORTED")

MILP_SOLVERS = RegistryNames("synth.milp.solvers", "BACKENDS")
"""In order of preference."""

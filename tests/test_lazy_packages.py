"""Packages that import their public names on first use still give every name in ``__all__``,
and the object it names (never a submodule of the same name)."""

from __future__ import annotations

import importlib
import types

import pytest


@pytest.mark.parametrize("package", ["topologies", "codegen", "xccl", "synth.milp"])
def test_every_public_name_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="nosuch"):
        importlib.import_module("topologies").nosuch  # noqa: B018

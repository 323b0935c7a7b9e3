"""The import graph points one way (DESIGN.md): each package imports only those to its left.

    common <- topologies <- sketches <- synth <- codegen <- runtime <- xccl

Every import statement of every library module counts, those inside functions and under
``TYPE_CHECKING`` too, and so does a module named in a string (the lazy exports of a package, the
back ends a registry imports by name).
"""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT

LAYERS = ("common", "topologies", "sketches", "synth", "codegen", "runtime", "xccl")


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _ours() -> frozenset[str]:
    """The dotted name of every library module."""
    return _modules_under(ROOT)


@functools.lru_cache
def _modules_under(root: Path) -> frozenset[str]:
    paths = (p for layer in LAYERS for p in (root / layer).rglob("*.py"))
    return frozenset(".".join(p.relative_to(root).with_suffix("").parts) for p in paths)


def _imports(path: Path, ours: frozenset[str]) -> list[tuple[int, str]]:
    """``(line, module)`` for each module ``path`` imports or names in a string (one of ``ours``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ours:
            out.append((node.lineno, node.value))
    return out


def _violations(package: str) -> list[str]:
    rank, ours = LAYERS.index(package), _ours()
    out = []
    for path in _modules(package):
        for line, module in _imports(path, ours):
            top = module.split(".")[0]
            if top in LAYERS and LAYERS.index(top) > rank:
                out.append(f"{path.relative_to(ROOT)}:{line}: imports {module} ({top} is right of {package})")
    return out


def test_every_library_package_has_its_place_in_the_order():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages == set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_no_package_imports_one_to_its_right(package):
    assert _violations(package) == []


def test_the_bottom_package_imports_only_the_standard_library():
    """``common`` is what every layer can import at no cost: nothing of ours, nothing heavy."""
    ours = _ours()
    found = {
        module: f"{path.relative_to(ROOT)}:{line}"
        for path in _modules("common")
        for line, module in _imports(path, ours)
        if module.split(".")[0] not in (*sys.stdlib_module_names, "__future__", "common")
    }
    assert found == {}


def test_the_check_sees_an_import_to_the_right(tmp_path, monkeypatch):
    """The check itself: a function-level import and a module named in a string are both seen."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "synth").mkdir()
    (tmp_path / "codegen").mkdir()
    (tmp_path / "codegen" / "ir.py").write_text("")
    (tmp_path / "synth" / "bad.py").write_text(
        'def f():\n    from codegen import ir\n\nHOME = {"IR": "codegen.ir"}\n'
    )
    assert _violations("synth") == [
        "synth/bad.py:2: imports codegen (codegen is right of synth)",
        "synth/bad.py:4: imports codegen.ir (codegen is right of synth)",
    ]

"""The notebooks in ``notebooks/`` run from top to bottom, as a user would run them.

Each runs in a fresh ``python3`` kernel (this interpreter: jupyter_client starts the kernel with
``sys.executable``) in fast mode (``XCCL_NOTEBOOK_FAST=1``: smaller solver runs, the same steps),
with its working directory and ``TMPDIR`` in a temporary folder, so whatever it writes lands there
and never in the repository. A failing cell fails the test with that cell's source and error.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _repo_files() -> set[str]:
    """Every file in the repository outside the venv, caches and build metadata."""
    skip = {".git", ".venv", ".pytest_cache", ".ruff_cache", "__pycache__", ".ipynb_checkpoints"}
    found = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        found.update(os.path.relpath(os.path.join(root, f), REPO) for f in files)
    return found


def _failed_cell(nb: nbformat.NotebookNode) -> str:
    """The source and error of the first cell whose outputs hold an error."""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                trace = ANSI.sub("", "\n".join(out.get("traceback", [])))
                return f"cell {i}:\n{cell.source}\n\n{out.ename}: {out.evalue}\n{trace}"
    return "(no cell output holds the error)"


def test_there_are_four_notebooks_each_described_in_the_readme():
    names = [p.stem for p in NOTEBOOKS]
    assert names == ["01-quickstart", "02-new-cluster", "03-pareto-fronts", "04-dsl"]
    readme = (REPO / "notebooks" / "README.md").read_text()
    for name in names:
        assert f"{name}.ipynb" in readme, f"notebooks/README.md does not describe {name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name} cell {i} has outputs: clear them before committing"
            assert cell["execution_count"] is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("XCCL_NOTEBOOK_FAST", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    before = _repo_files()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    )
    failure = None
    try:
        client.execute()
    except CellExecutionError:
        failure = _failed_cell(nb)  # reported outside the except: no chained, colored duplicate
    if failure is not None:
        pytest.fail(f"{path.name}: {failure}", pytrace=False)
    assert _repo_files() == before, f"{path.name} wrote into the repository"
    assert any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")

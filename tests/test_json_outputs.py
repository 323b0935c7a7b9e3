"""Every ``--json`` output is exactly one strict JSON document on standard output.

The commands are found in the parser itself, so a new command with ``--json`` fails here until it
has a case. Each runs as a subprocess: solver libraries (HiGHS through ``bound``) write to file
descriptor 1 below Python, and only a real process shows what lands there.
"""

from __future__ import annotations

import argparse
import json

import pytest
from conftest import run_cli

from xccl.cli.main import build_parser

ALGORITHM = "ag.json"
"""A ring allgather on ring:4, written by ``xccl baseline`` in the cases' folder."""

ONE_RANK = "one.json"
"""A topology of one rank: its collectives take no time, their bandwidth is infinite (not JSON)."""

CASES: dict[tuple[str, ...], list[list[str]]] = {
    ("topo", "list"): [[]],
    ("topo", "show"): [["ring:4"], ["ndv2x2"]],
    ("cost",): [[ALGORITHM, "--size", "1KiB"]],
    ("bound",): [["-t", "dgx1", "-C", "allgather"], ["-t", ONE_RANK, "-C", "allreduce", "--size", "1KiB"]],
    ("sketch", "show"): [["ndv2x2-relay"]],
    ("bench",): [[ALGORITHM, "--sizes", "1KiB", "--backend", "numpy"], [ALGORITHM, "--sizes", "1KiB", "--backend", "sim"]],
    ("run",): [[ALGORITHM, "--size", "1KiB"]],
    ("nccl",): [["-t", "dgx1", "-C", "allgather", "-s", "1KiB,1GiB"], ["-t", ONE_RANK, "-C", "allreduce"]],
    ("tune",): [["ring:4", "allgather", "--sizes", "1KiB..4KiB", "-o", "tune-bundle"]],
}
"""Small valid arguments for every command with ``--json``."""


def _json_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The command paths (``("topo", "show")``) under ``parser`` that accept ``--json``."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _json_commands(sub, (*path, name))
        elif "--json" in action.option_strings:
            found.append(path)
    return found


JSON_COMMANDS = _json_commands(build_parser())


def _reject(token: str) -> None:
    raise ValueError(f"{token} is not JSON")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("json-outputs")
    proc = run_cli("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", ALGORITHM, cwd=path)
    assert proc.returncode == 0, proc.stderr
    (path / ONE_RANK).write_text(json.dumps({"name": "one", "ranks": 1, "links": []}))
    return path


def test_commands_are_found_and_every_one_has_a_case():
    assert ("topo", "show") in JSON_COMMANDS and ("bound",) in JSON_COMMANDS  # the walk works
    assert sorted(JSON_COMMANDS) == sorted(CASES), "give every command with --json a case in CASES"


@pytest.mark.parametrize("command", JSON_COMMANDS, ids=" ".join)
def test_json_output_is_one_strict_document(folder, command):
    if command not in CASES:
        pytest.fail(f"xccl {' '.join(command)} has --json but no case in CASES")
    for args in CASES[command]:
        proc = run_cli(*command, *args, "--json", cwd=folder, timeout=60)
        assert proc.returncode == 0, (command, args, proc.stderr)
        # one document, nothing before or after it (json.loads refuses "Extra data"), no NaN/Infinity
        try:
            doc = json.loads(proc.stdout, parse_constant=_reject)
        except ValueError as exc:
            pytest.fail(f"xccl {' '.join((*command, *args))} --json: {exc}; stdout: {proc.stdout[:300]!r}")
        assert isinstance(doc, dict | list), (command, args)
        assert proc.stdout.endswith("}\n") or proc.stdout.endswith("]\n"), proc.stdout[-80:]

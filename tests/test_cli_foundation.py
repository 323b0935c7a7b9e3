"""The foundation's commands, run as a user runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, assert_one_line_error

from xccl.cli.main import build_parser


def test_topo_list_and_show(cli):
    proc = cli("topo", "list")
    assert proc.returncode == 0
    for name in ("dgx1", "ndv2", "dgx2", "dgx-a100", "dgx-h100", "amd-mi50"):
        assert name in proc.stdout
    proc = cli("topo", "show", "ndv2x2")
    assert proc.returncode == 0 and "m0.nic0 > net > m1.nic0" in proc.stdout
    proc = cli("topo", "show", "ring:4", "--json")
    assert json.loads(proc.stdout)["ranks"] == 4


def test_baseline_verify_cost_bound(tmp_path, cli):
    out = tmp_path / "ag.json"
    proc = cli("baseline", "ring", "--topology", "dgx1", "--collective", "allgather", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.exists()
    proc = cli("verify", str(out))
    assert proc.returncode == 0 and "ok" in proc.stdout
    proc = cli("cost", str(out), "--size", "1MiB", "--json")
    rows = json.loads(proc.stdout)["rows"]
    assert rows[0]["size_bytes"] == 1 << 20 and rows[0]["time_us"] >= rows[0]["bound_us"]
    proc = cli("bound", "--topology", "dgx1", "--collective", "allgather", "--json")
    data = json.loads(proc.stdout)
    assert data["steps"] == 2 and data["rounds_per_chunk"] == "7/6"
    proc = cli("bound", "--topology", "dgx1", "--collective", "allgather")
    assert "7/6" in proc.stdout


def test_existing_output_is_not_overwritten_without_force(tmp_path, cli):
    out = tmp_path / "mine.json"
    out.write_text("my notes")
    proc = cli("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(out))
    assert_one_line_error(proc, str(out), "--force")
    assert out.read_text() == "my notes"
    proc = cli("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(out), "--force")
    assert proc.returncode == 0 and out.read_text() != "my notes"


def test_verify_rejects_a_corrupted_file_naming_the_step(tmp_path, cli):
    out = tmp_path / "ag.json"
    assert cli("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(out)).returncode == 0
    doc = json.loads(out.read_text())
    doc["schedule"][1]["sends"].pop(0)
    doc["rounds"] = sum(s["rounds"] for s in doc["schedule"])
    out.write_text(json.dumps(doc))
    assert_one_line_error(cli("verify", str(out)), "step 2")


def test_bad_inputs_exit_2_with_one_line(tmp_path, cli):
    assert_one_line_error(cli("bound", "-t", "nosuch", "-C", "allgather"), "unknown topology 'nosuch'")
    assert_one_line_error(cli("bound", "-t", "ring:x", "-C", "allgather"), "ring:x")
    assert_one_line_error(cli("bound", "-t", "ring:4", "-C", "gossip"), "gossip")
    assert_one_line_error(cli("baseline", "direct", "-t", "dgx1", "-C", "allgather"), "no link 0 -> 5")
    assert_one_line_error(cli("verify", str(tmp_path / "missing.json")), "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert_one_line_error(cli("verify", str(bad)), "bad.json:1")
    assert_one_line_error(cli("cost", str(bad), "--size", "12 parsecs"), "bad.json")
    ok = tmp_path / "ok.json"
    assert cli("baseline", "ring", "-t", "ring:4", "-C", "allgather", "-o", str(ok)).returncode == 0
    assert_one_line_error(cli("cost", str(ok), "--size", "12 parsecs"), "12 parsecs")
    assert_one_line_error(cli("verify", str(ok), "--topology", "ring:5"), "5 ranks")
    assert_one_line_error(cli("topo", "check", str(tmp_path / "none.json")), "none.json")


def test_every_command_is_exercised_by_a_test():
    """Registry kept honest: each top-level command appears in some test's cli(...) call."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    text = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    used = set(re.findall(r'cli\(\s*"([a-z-]+)"', text))
    missing = set(commands) - used
    assert not missing, f"commands without a CLI test: {sorted(missing)}"


_EXIT_PROBE = """
import atexit, sys
from xccl.cli import main as cli_main

class Loud:
    def __del__(self):
        print("torn down", flush=True)

cli_main.KEPT = Loud()  # freed only by the interpreter's teardown
atexit.register(lambda: print("exit handler ran", file=sys.stderr, flush=True))
{call}
"""


def _probe(call: str) -> subprocess.CompletedProcess:
    script = _EXIT_PROBE.format(call=call)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_the_executable_skips_the_teardown_but_not_the_exit_handlers_nor_its_output():
    # the control: through main, the teardown frees the module's object (so the probe can tell)
    plain = _probe('sys.exit(cli_main.main(["topo", "list"]))')
    assert plain.returncode == 0 and "torn down" in plain.stdout, plain
    done = _probe('cli_main.entry(["topo", "list"])')
    assert done.returncode == 0, done.stderr
    assert "dgx-h100" in done.stdout and "torn down" not in done.stdout
    assert "exit handler ran" in done.stderr  # common.forked ends its children in one
    failed = _probe('cli_main.entry(["verify", "no-such-file.json"])')
    assert failed.returncode == 2 and "no-such-file.json" in failed.stderr
    assert "exit handler ran" in failed.stderr

"""``xccl demo`` (the README's first command) runs end to end."""

from __future__ import annotations


def test_demo_prints_verified_rows_and_the_bound(cli):
    proc = cli("demo")
    assert proc.returncode == 0, proc.stderr
    assert "lower bound" in proc.stdout
    assert proc.stdout.count("verified") >= 2

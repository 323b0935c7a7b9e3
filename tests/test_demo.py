"""``xccl demo`` (the README's first command) runs end to end.

docs/cli.md shows this command and leaves running it to this test (it takes half a minute).
"""

from __future__ import annotations

from pathlib import Path


def test_demo_checks_every_row_and_writes_its_files(tmp_path: Path, cli):
    out = tmp_path / "demo"
    proc = cli("demo", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("machine "))
    rows = lines[start + 2 : lines.index("", start)]
    assert {row.split()[0] for row in rows} == {"dgx1", "ndv2x2"}
    assert len(rows) >= 4 and all("passed" in row for row in rows), rows
    assert "lower bound on dgx1" in proc.stdout and "lower bound on ndv2x2" in proc.stdout
    written = sorted(p.name for p in out.iterdir())
    assert len([n for n in written if n.endswith(".xml")]) == len(rows)
    assert {"allgather-times.png", "dgx1-allgather-front.png"} <= set(written)
    assert f"files: {', '.join(written)}" in proc.stdout
    assert "verified" in proc.stderr  # the progress lines say each synthesized algorithm was verified

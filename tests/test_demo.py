"""``xccl demo`` (the README's first command) runs end to end."""

from __future__ import annotations


def test_demo_checks_every_row_and_writes_its_files(cli, tmp_path):
    proc = cli("demo", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    rows = lines[start : lines.index("", start)]
    assert len(rows) >= 4  # SMT front and ring on dgx1, MILP and ring on ndv2x2
    assert all("passed (" in row for row in rows), rows
    assert {row.split()[0] for row in rows} == {"dgx1", "ndv2x2"}
    assert "lower bound on dgx1" in proc.stdout and "lower bound on ndv2x2" in proc.stdout
    assert proc.stderr.count("verified") >= 2  # the progress lines of the MILP and baseline stages
    out = tmp_path / "xccl-demo"
    assert len(list(out.glob("*.xml"))) == len(rows)
    assert {p.name for p in out.glob("*.png")} == {"dgx1-allgather-front.png", "allgather-times.png"}

"""``xccl demo`` (the README's first command) runs end to end, as a user runs it."""

from __future__ import annotations

import re

from agreement import TOLERANCE

EXPECTED_FILES = {
    "allgather-dgx1-s2-r3-c2.xml",
    "allgather-dgx1-s3-r7-c6.xml",
    "allgather-dgx1-s7-r7-c1-ring.xml",
    "allgather-ndv2x2-s15-r15-c1-ring.xml",
    "allgather-dgx1-s7-r7-c6-nccl.xml",
    "allgather-ndv2x2-s15-r15-c1-nccl.xml",
    "allgather-times.png",
    "dgx1-allgather-front.png",
}


def _table_rows(stdout: str) -> list[list[str]]:
    """The demo table's data rows, split on runs of two or more spaces."""
    lines = stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("-------"))
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_demo_checks_every_row_and_writes_its_files(cli, tmp_path):
    out = tmp_path / "demo-out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # the demo rewrites its own files only
    proc = cli("demo", "--out", str(out), "--model", "ideal", cwd=tmp_path)  # the XML column's 2% holds there
    assert proc.returncode == 0, proc.stderr
    stages = [line.split("]")[0] for line in proc.stderr.splitlines() if line.startswith("[demo ")]
    assert stages == [f"[demo {k}/6" for k in range(1, 7)]
    rows = _table_rows(proc.stdout)
    labels = [row[1] for row in rows]
    assert labels[:2] == ["SMT S=2 R=3 C=2", "SMT S=3 R=7 C=6"]  # DGX-1's known front (SCCL)
    assert "MILP (ndv2x2-relay)" in labels and labels.count("textbook ring") == 2
    assert "NCCL layout (6 ch)" in labels and "NCCL layout (1 ch)" in labels  # DGX-1's six rings, NDv2's one
    for row in rows:
        assert row[5].startswith("passed ("), row
        shares = [int(cell.rstrip("%")) for cell in row[-4:-1]]
        assert all(0 < share <= 100 for share in shares), row  # never faster than the lower bound
        model, compiled = float(row[-5]), float(row[-1])  # at 1 GiB: the Algorithm, its XML
        assert model * (1 - 1e-6) <= compiled <= (1 + TOLERANCE) * model, row
    milp = next(row for row in rows if row[1].startswith("MILP"))
    ring = next(row for row in rows if row[0] == "ndv2x2" and row[1] == "textbook ring")
    assert float(milp[-5]) < float(ring[-5])  # the MILP schedule beats the ring at 1 GiB
    assert float(milp[8].rstrip("x")) > 1.5  # and NCCL's one ring (NDv2 has one NIC): "vs NCCL @1GiB"
    nccl = next(row for row in rows if row[0] == "dgx1" and row[1].startswith("NCCL layout"))
    assert nccl[6:9] == ["1.00x"] * 3  # NCCL against itself
    assert "NCCL's own model on dgx1 (modeled)" in proc.stdout
    written = {p.name for p in out.iterdir()}
    assert written >= EXPECTED_FILES
    assert any(n.startswith("allgather-ndv2x2-s") and n.endswith(".xml") for n in written - EXPECTED_FILES)
    assert (out / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "xccl-demo").exists()  # --out is honored
    for name in written:
        if name.endswith(".xml"):
            assert (out / name).read_text().startswith("<algo "), name

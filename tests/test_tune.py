"""``xccl tune``: the bundle a user deploys. Its XMLs pass the checker of their runtime and compute
their collective on the NumPy executor at the ends of their windows; per runtime and placement the
windows never overlap and cover exactly the sizes the table says ship; nothing ships where NCCL
wins; bad input is one line."""

from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli

from codegen.formats import read_ir
from codegen.ir import IR
from common.errors import XcclError
from runtime.selection import check_window
from topologies import load
from xccl import api
from xccl.tune import tune
from xccl.tune.bundle import BUNDLE_DIALECTS as DIALECTS
from xccl.tune.bundle import PLACEMENTS
from xccl.tune.sweep import ELEMENT_BYTES, Candidate, Point, Timed
from xccl.tune.windows import cells, cut, runtime_window, winning_windows

CASES = {
    # ring:4: baselines and the SMT front in seconds; dgx1: the SMT front on DGX-1 (no sketch);
    # ndv2x2: baselines and MILP schedules from its two sketches (about 25 s each: slow)
    "ring:4": ("--sizes", "1KiB..1MiB:4", "--time-limit", "40"),
    "dgx1": ("--sizes", "1KiB..1MiB:4", "--time-limit", "40"),
    "ndv2x2": ("--sizes", "1KiB..16KiB:4", "--time-limit", "40"),
}


@pytest.fixture(
    scope="module",
    params=[pytest.param(name, marks=[] if name == "ring:4" else [pytest.mark.slow]) for name in CASES],
)
def bundle(request, tmp_path_factory):
    """(topology name, folder, its tune.json) of a bundle written by the command line."""
    name = request.param
    folder = tmp_path_factory.mktemp("tune") / name.replace(":", "")
    proc = run_cli("tune", name, "allgather", "allreduce", *CASES[name], "-o", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert "time limit 40 s" in proc.stderr
    return name, folder, json.loads((folder / "tune.json").read_text())


def _xmls(folder: Path, dialect: str) -> list[Path]:
    return sorted((folder / dialect).glob("*.xml"))


def test_the_bundle_ships_windows_for_both_collectives_runtimes_and_placements(bundle):
    _, folder, doc = bundle
    assert {w["collective"] for w in doc["windows"]} == {"allgather", "allreduce"}
    for w in doc["windows"]:
        assert set(w["files"]) == set(DIALECTS)
        for dialect in DIALECTS:
            assert set(w["files"][dialect]) == set(PLACEMENTS)
            for path in w["files"][dialect].values():
                assert (folder / path).is_file()
    assert len(_xmls(folder, "azure")) == len(_xmls(folder, "msccl")) == 2 * len(doc["windows"])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_xml_passes_the_checker_of_its_runtime_and_says_what_it_is_for(xccl, bundle, dialect):
    name, folder, _ = bundle
    for path in _xmls(folder, dialect):
        proc = xccl("check", "--dialect", dialect, str(path))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        head = path.read_text().splitlines()[0]
        inplace = path.stem.endswith("-inplace")
        assert f'ngpus="{load(name).num_ranks}"' in head
        assert f'coll="{path.stem.split("-")[0]}"' in head
        assert f'name="{path.stem}"' in head
        assert f'inplace="{int(inplace)}"' in head
        if dialect == "azure":
            assert f'outofplace="{int(not inplace)}"' in head


def test_every_xml_computes_its_collective_at_both_ends_of_its_window(bundle):
    _, folder, doc = bundle
    for w in doc["windows"]:
        for dialect in DIALECTS:
            for placement, path in w["files"][dialect].items():
                for size in (w["low_bytes"], w["high_bytes"]):
                    result = api.run(folder / path, size, backend="numpy", inplace=placement == "inplace")
                    assert result.checked, (path, size)


@functools.cache
def _ir(path: Path) -> IR:
    return read_ir(path.read_text(), str(path))


def _selected(folder: Path, dialect: str, collective: str, placement: str, size: int) -> list[str]:
    """The bundle's files ``dialect``'s runtime would select for a float32 call of ``size``."""
    out = []
    for path in (folder / dialect).glob(f"{collective}-*-{placement}.xml"):
        ir = _ir(path)
        if size % (ir.nchunksperloop * ELEMENT_BYTES):
            continue
        try:
            check_window(ir, size, dialect)
        except XcclError:
            continue
        out.append(path.name)
    return out


def test_windows_never_overlap_and_cover_exactly_the_shipped_sizes(bundle):
    name, folder, doc = bundle
    n = load(name).num_ranks
    for entry in doc["collectives"]:
        coll = entry["collective"]
        windows = [w for w in doc["windows"] if w["collective"] == coll]
        probes = {r["size_bytes"] for r in entry["rows"]}
        for w in windows:  # the edges, and the sizes just outside them
            probes |= {w["low_bytes"], w["high_bytes"], w["low_bytes"] - n * 64, w["high_bytes"] + n * 64}
        for size in sorted(s for s in probes if s > 0 and s % n == 0):
            inside = any(w["low_bytes"] <= size <= w["high_bytes"] for w in windows)
            for dialect in DIALECTS:
                for placement in PLACEMENTS:
                    chosen = _selected(folder, dialect, coll, placement, size)
                    assert len(chosen) <= 1, (dialect, placement, size, chosen)
                    assert bool(chosen) == inside or (inside and not chosen and size % (n * 4)), (
                        dialect,
                        placement,
                        size,
                    )
        for row in entry["rows"]:
            assert (row["window"] is not None) == (row["speedup"] is not None and row["speedup"] >= 1.05)


def test_env_files_name_each_runtimes_switches_and_the_bundles_files(bundle):
    _, folder, _ = bundle
    azure = (folder / "azure.env").read_text()
    assert "NCCL_MSCCL_ENABLE=1" in azure and f"MSCCL_ALGO_DIR={(folder / 'azure').resolve()}" in azure
    msccl = (folder / "msccl.env").read_text()
    assert re.search(r"^NCCL_ALGO=MSCCL,", msccl, re.M)
    listed = re.search(r"^MSCCL_XML_FILES=(.*)$", msccl, re.M).group(1).split(":")
    assert sorted(listed) == sorted(str(p.resolve()) for p in _xmls(folder, "msccl"))
    placements = [name.endswith("-inplace.xml") for name in listed]
    assert placements == sorted(placements, reverse=True)  # in-place first: PyTorch's calls
    assert (len(listed) > 4) == ("MSCCL_MAX_NUM_ALGOS" in msccl)  # the research runtime loads 4
    rccl = (folder / "rccl.env").read_text()
    assert "RCCL_MSCCL_ENABLE=1" in rccl and "RCCL_MSCCL_FORCE_ENABLE=1" in rccl
    assert (folder / "speedup.png").read_bytes()[:4] == b"\x89PNG"


def test_where_nccl_wins_nothing_ships_and_the_folder_is_not_made(xccl, tmp_path):
    out = tmp_path / "bundle"
    proc = xccl(
        "tune", "dgx1", "allgather", "--sizes", "256MiB..1GiB:4", "--time-limit", "30", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "nothing beats NCCL by 5%" in proc.stdout and "nothing shipped" in proc.stdout
    assert "modeled" in proc.stdout
    assert not out.exists()


def test_json_is_one_document_with_every_size(xccl, tmp_path):
    proc = xccl("tune", "ring:4", "allgather", "--sizes", "1KiB..4KiB", "--json", "-o", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["size_bytes"] for r in doc["collectives"][0]["rows"]] == [1024, 2048, 4096]
    assert doc["times"].startswith("modeled")


def test_force_replaces_a_previous_bundle_and_refuses_a_foreign_xml(xccl, tmp_path):
    out = tmp_path / "b"
    args = ("tune", "ring:4", "allgather", "--sizes", "1KiB..4KiB", "-o", str(out))
    assert xccl(*args).returncode == 0
    stale = out / "azure" / "allgather-ring-4-1-2-inplace.xml"
    doc = json.loads((out / "tune.json").read_text())
    (out / "tune.json").write_text(json.dumps({**doc, "files": [*doc["files"], "azure/" + stale.name]}))
    stale.write_text("<algo/>")
    assert_one_line_error(xccl(*args), "not empty", "--force")
    assert xccl(*args, "--force").returncode == 0
    assert not stale.exists()  # a previous bundle's file the runtime would still load
    foreign = out / "azure" / "mine.xml"
    foreign.write_text("<algo/>")
    assert_one_line_error(xccl(*args, "--force"), "mine.xml", "not written by xccl tune")
    assert foreign.exists()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("ring:4", "allgather", "--sizes", "4KiB..1KiB"), ("sizes",)),
        (("ring:4", "allgather", "--margin", "five"), ("--margin", "five")),
        (("ring:4", "allgather", "--margin", "-1%"), ("--margin",)),
        (("ring:4", "alltoall"), ("alltoall", "choose from")),
        (("nosuchmachine", "allgather"), ("nosuchmachine",)),
        (("ring:4", "allgather", "--time-limit", "0"), ("--time-limit",)),
    ],
)
def test_bad_input_is_one_line(xccl, tmp_path, args, fragments):
    assert_one_line_error(xccl("tune", *args, "-o", str(tmp_path / "b")), *fragments)


def test_a_folder_a_colon_list_cannot_name_is_refused(xccl, tmp_path):
    assert_one_line_error(xccl("tune", "ring:4", "-o", str(tmp_path / "a:b")), "MSCCL_XML_FILES")


def test_an_output_that_is_a_file_is_refused_before_work(xccl, tmp_path):
    target = tmp_path / "file"
    target.write_text("mine")
    assert_one_line_error(xccl("tune", "ring:4", "-o", str(target)), "expected a folder")
    assert target.read_text() == "mine"


def test_ctrl_c_keeps_what_was_timed(monkeypatch):
    def progress(message: str) -> None:
        if "SMT" in message:
            raise KeyboardInterrupt

    sweeps, _ = tune(load("ring:4"), ["allgather", "allreduce"], [1024, 4096], 0.05, 60, progress)
    assert len(sweeps) == 1 and sweeps[0].interrupted  # the second collective was not started
    assert sweeps[0].timings  # the baselines timed before Ctrl-C are kept
    assert all(p.best is not None for p in sweeps[0].points())


def _point(size: int, label: str, speedup: float) -> Point:
    algo = api.synthesize("ring:4", "allgather", "ring")
    return Point(size, speedup, "Ring/LL", None, Timed(Candidate(label, algo), "LL", 1.0))


def test_cells_tile_the_range_and_windows_merge_only_neighbours_with_one_winner():
    sizes = [1024, 2048, 4096, 8192, 16384]
    tiles = cells(sizes)
    assert tiles[0][0] == 1024 and tiles[-1][1] == 16384
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(tiles))
    assert all(lo <= s <= hi for (lo, hi), s in zip(tiles, sizes, strict=True))
    points = [_point(1024, "a", 2), _point(2048, "a", 2), _point(4096, "a", 1.01), _point(8192, "a", 2)]
    points.append(_point(16384, "b", 2))
    windows = winning_windows(points, 0.05)
    assert [(w.low, w.high, w.key[0]) for w in windows] == [
        (1024, tiles[1][1], "a"),
        (tiles[3][0], tiles[3][1], "a"),
        (tiles[4][0], 16384, "b"),
    ]
    narrowed = cut(windows[0], 3)  # 12-byte units: the ends move inward onto multiples
    assert narrowed.low % 12 == 0 and narrowed.high % 12 == 0
    assert windows[0].low <= narrowed.low and narrowed.high <= windows[0].high


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_runtime_windows_select_exactly_the_sizes_asked(dialect, collective):
    """What each runtime compares (the whole buffer or a rank's share, inclusive or not) is read
    back through the one selection model, runtime.selection."""
    n, low, high = 8, 1000, 4000
    algo = api.synthesize(f"ring:{n}", collective, "ring")
    ir = api.compile(algo, dialect=dialect)
    lo, hi = runtime_window(collective, n, low, high, dialect)
    ir = replace(ir, min_bytes=lo, max_bytes=hi)
    for size in range(n, 5000, n):
        try:
            check_window(ir, size, dialect)
            selected = True
        except XcclError:
            selected = False
        assert selected == (low <= size <= high), (size, lo, hi)


def test_a_winner_that_does_not_compile_gives_its_sizes_to_the_next_fastest(monkeypatch):
    """Before, its windows were dropped and NCCL kept sizes another candidate beats it at."""
    from codegen.errors import CodegenError
    from xccl.tune import bundle as bundle_module
    from xccl.tune.bundle import plan_bundle
    from xccl.tune.sweep import CollectiveSweep

    topo = load("ring:4")
    sweep = CollectiveSweep(topo, "allgather", (1024, 4096), reference=[(100.0, "Ring/LL", None)] * 2)
    for kind in ("ring", "bidir-ring"):
        sweep.add(Candidate(f"baseline {kind}", api.synthesize(topo, "allgather", kind)))
    first = sweep.points()[0].best.candidate
    compile_ir = api.compile

    def refuse_first(algo, *args, **kwargs):
        if algo is first.algorithm:
            raise CodegenError("threadblock 128: its id exceeds 127")
        return compile_ir(algo, *args, **kwargs)

    monkeypatch.setattr(bundle_module.api, "compile", refuse_first)
    planned = plan_bundle([sweep], 0.05)
    assert planned.shipped and {s.window.winner.candidate.label for s in planned.shipped} != {first.label}
    assert first.label in sweep.unshippable
    assert all(p.best.candidate.label != first.label for p in sweep.points())
    assert any("does not compile" in note for note in sweep.notes)

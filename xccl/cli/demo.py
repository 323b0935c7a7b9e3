"""``xccl demo``: the whole pipeline on shipped machines, in under two minutes on a laptop.

1. DGX-1 allgather: the SMT Pareto front (SCCL style, every instance proven sat or unsat).
2. Two NDv2 machines, allgather: the MILP schedule from the shipped sketch ``ndv2x2-relay``.
3. The baselines on both machines: the textbook ring (one channel) and NCCL's own layout (its
   channels as an Algorithm, ``xccl baseline nccl``).
4. Every algorithm compiled to MSCCL XML (azure dialect) and statically checked.
5. Every IR executed on the best backend present (the GPU with CuPy, else NumPy) and its outputs
   compared with the NumPy reference.
6. One table against NCCL and the lower bound (the Algorithm model's times, the gain over NCCL's
   layout in the same model, and the compiled XML's time in the IR simulator at 1 GiB), NCCL's own
   model per machine, and plots, in ``./xccl-demo/``.

The demo shares its output folder with whatever is there: it replaces a file only where it wrote
that file itself and nobody changed it since (a list of what it wrote, with each file's SHA-256, is
kept in ``.xccl-demo.json``), or with ``--force``; every file is written atomically.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import XcclError
from common.files import read_json_file, save, save_text
from common.units import format_size, parse_size
from synth.collectives import make_collective
from synth.timing.calibration import DEFAULT_MODEL, MODELS
from xccl.cli.output import print_table, progress

if TYPE_CHECKING:
    from codegen.ir import IR
    from synth.algorithm import Algorithm
    from synth.nccl.compare import NcclReference
    from synth.smt.pareto import Front
    from synth.timing import Params
    from topologies.model import Topology

__all__ = ["register"]

SIZES = ("1KiB", "1MiB", "1GiB")
RING_LABEL = "textbook ring"
"""The one-channel ring of the textbooks (and of the papers' baselines), which NCCL never runs here."""
NCCL_LABEL = "NCCL layout"
_SUFFIX = {"baseline:ring": "-ring", "baseline:nccl": "-nccl"}
"""XML names of the baselines (the synthesized ones are named by their S, R, C alone)."""
RUN_SIZE = "1MiB"
STAGES = 6


FRONT_PNG = "dgx1-allgather-front.png"
TIMES_PNG = "allgather-times.png"
OUTPUTS = ("allgather-dgx1-s*-r*-c*.xml", "allgather-ndv2x2-s*-r*-c*.xml", FRONT_PNG, TIMES_PNG)
"""Every name the demo may write (the XML names carry what the solvers found)."""
MANIFEST = ".xccl-demo.json"
MANIFEST_FORMAT = "xccl-demo-files/1"
_TAKEN = "already exists and was not written by the demo; use --force to overwrite, or another --out"


class DemoError(XcclError):
    """The demo cannot write its output folder."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class DemoFolder:
    """The output folder: a file is replaced only if the demo wrote it and it is unchanged, or with
    ``force``. ``known`` is what the manifest records; ``written``, this run's files."""

    path: Path
    force: bool = False
    known: dict[str, str] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path, force: bool) -> DemoFolder:
        """Read the manifest and refuse, before any work, a file the demo would replace but did not write."""
        folder = cls(path, force)
        manifest = path / MANIFEST
        if manifest.exists():
            try:
                doc = read_json_file(manifest, DemoError)
            except DemoError:
                doc = None
            files = (
                doc.get("files") if isinstance(doc, dict) and doc.get("format") == MANIFEST_FORMAT else None
            )
            if isinstance(files, dict):
                folder.known = {k: v for k, v in files.items() if isinstance(v, str)}
            elif not force:
                raise DemoError(f"{manifest}: {_TAKEN}")
        for entry in sorted(path.iterdir()):
            if any(fnmatch(entry.name, p) for p in OUTPUTS) and not (force or folder.ours(entry.name)):
                raise DemoError(f"{entry}: {_TAKEN}")
        return folder

    def ours(self, name: str) -> bool:
        digest = self.written.get(name, self.known.get(name))
        path = self.path / name
        return digest is not None and path.is_file() and _sha256(path.read_bytes()) == digest

    def save(self, name: str, data: bytes) -> None:
        if not (self.force or self.ours(name)) and (self.path / name).exists():
            raise DemoError(f"{self.path / name}: {_TAKEN}")
        save(self.path / name, data, force=True, error=DemoError)
        self.written[name] = _sha256(data)

    def finish(self) -> None:
        """Record this run's files, and the earlier ones still as the demo wrote them."""
        files = {n: h for n, h in self.known.items() if n not in self.written and self.ours(n)}
        doc = {"format": MANIFEST_FORMAT, "files": dict(sorted((files | self.written).items()))}
        save_text(self.path / MANIFEST, json.dumps(doc, indent=2) + "\n", force=True, error=DemoError)


def _plot_bytes(plot, *args, **kwargs) -> bytes:
    """The PNG ``plot`` draws, made in a scratch folder so that the demo's own :meth:`DemoFolder.save`
    puts it in place atomically."""
    with tempfile.TemporaryDirectory(prefix="xccl-demo-") as scratch:
        path = Path(scratch) / "plot.png"
        plot(path, *args, force=True, **kwargs)
        return path.read_bytes()


@dataclass(frozen=True)
class Row:
    """One algorithm of the table: where it runs, its label, and (once compiled) its IR and check."""

    machine: Topology
    label: str
    algorithm: Algorithm
    ir: IR | None = None
    check: str = ""


def _stage(k: int, text: str) -> float:
    progress(f"[demo {k}/{STAGES}] {text}")
    return time.perf_counter()


def _done(start: float, text: str) -> None:
    progress(f"           {text} ({time.perf_counter() - start:.1f} s)")


def cmd_demo(args: argparse.Namespace) -> int:
    from synth.timing import model_params
    from topologies import load
    from xccl.api import best_backend

    out = _output_folder(args.out)
    folder = DemoFolder.open(out, args.force)
    backend = args.backend or best_backend()
    dgx1, ndv2x2 = load("dgx1"), load("ndv2x2")
    params = model_params(args.model)
    front = _smt_front(dgx1)
    milp = _milp_schedule(ndv2x2, params)
    rows = _with_baselines(dgx1, ndv2x2, front.algorithms, milp)
    rows = _compile(rows, folder)
    rows = _execute(rows, backend)
    table = _compare(rows, front, (dgx1, ndv2x2), folder, params)
    _print_report(table, (dgx1, ndv2x2), folder, params)
    return 0


def _output_folder(text: str) -> Path:
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DemoError(f"{out}: --out: expected a folder to write into: {exc.strerror or exc}") from None
    return out


def _smt_front(dgx1: Topology) -> Front:
    """Stage 1: the SMT Pareto front of DGX-1 allgather, each instance reported as it is decided."""
    from synth.smt import pareto_front

    t = _stage(1, "DGX-1 allgather: SMT Pareto front (SCCL's walk, bounds from HiGHS)")
    front = pareto_front(
        dgx1, "allgather", on_outcome=lambda o: progress(f"           {o.instance}: {o.summary()}")
    )
    _done(t, front.message())
    return front


def _milp_schedule(ndv2x2: Topology, params: Params) -> Algorithm:
    """Stage 2: the MILP schedule of two NDv2 machines from the shipped sketch, optimised in the
    model the demo times in."""
    from synth.milp import Options
    from synth.milp import synthesize as milp_synthesize

    t = _stage(
        2, "2 x NDv2 allgather: MILP from sketch ndv2x2-relay at 1 GiB (routing, ordering, scheduling)"
    )
    milp = milp_synthesize(
        ndv2x2,
        "allgather",
        "ndv2x2-relay",
        size_bytes=parse_size("1GiB"),
        options=Options(params=params),
        log=lambda s: None,
    )
    _done(t, f"{milp.algorithm.name}, chunkup {milp.chunkup}, verified")
    return milp.algorithm


def _with_baselines(dgx1: Topology, ndv2x2: Topology, smt: Sequence[Algorithm], milp: Algorithm) -> list[Row]:
    """Stage 3: the synthesized algorithms, NCCL's layout and the textbook ring on each machine
    (``xccl.synthesize``)."""
    from xccl.api import synthesize

    t = _stage(3, "baselines on both machines: NCCL's layout and the textbook ring")
    rows = [Row(dgx1, f"SMT S={a.num_steps} R={a.rounds} C={a.chunks}", a) for a in smt]
    rows.append(Row(ndv2x2, "MILP (ndv2x2-relay)", milp))
    for machine in (dgx1, ndv2x2):
        nccl = synthesize(machine, "allgather", "nccl")
        rows.append(Row(machine, f"{NCCL_LABEL} ({nccl.chunks} ch)", nccl))
        rows.append(Row(machine, RING_LABEL, synthesize(machine, "allgather", "ring")))
    _done(t, "built and verified")
    return rows


def _compile(rows: list[Row], folder: DemoFolder) -> list[Row]:
    """Stage 4: each algorithm compiled (``xccl.compile``, statically checked) and written as XML."""
    from codegen import write_ir
    from xccl.api import compile as compile_ir

    t = _stage(4, f"compile to MSCCL XML (azure dialect), static checks, write {folder.path}/")
    compiled = []
    for row in rows:
        ir = compile_ir(row.algorithm, row.machine, dialect="azure")
        name = f"{row.algorithm.file_stem}{_SUFFIX.get(row.algorithm.provenance.method, '')}.xml"
        folder.save(name, write_ir(ir, "azure").encode("utf-8"))
        compiled.append(replace(row, ir=ir))
    _done(t, f"{len(compiled)} XML files, every one passed the checker")
    return compiled


def _execute(rows: list[Row], backend: str) -> list[Row]:
    """Stage 5: each IR executed once (``xccl.run``) and compared with the NumPy reference."""
    from xccl.api import run

    t = _stage(5, f"execute at {RUN_SIZE} on {backend}, every output compared with the NumPy reference")
    checked = []
    for row in rows:
        result = run(row.ir, RUN_SIZE, backend=backend)
        checked.append(replace(row, check=f"passed ({backend})" if result.checked else "not checked"))
    _done(t, "all outputs correct")
    return checked


def _compare(
    rows: list[Row], front: Front, machines: Sequence[Topology], folder: DemoFolder, params: Params
) -> list[list]:
    """Stage 6: the table of modeled times against NCCL and the lower bound, the compiled XML's time
    in the IR simulator, and the two plots."""
    t = _stage(6, "modeled times against NCCL and the lower bound, the XML in the IR simulator; plots")
    nccl = {m.name: _nccl(m, params) for m in machines}
    table = [_table_row(row, nccl[row.machine.name], params) for row in rows]
    folder.save(FRONT_PNG, _front_png(machines[0], front, params))
    folder.save(TIMES_PNG, _times_png(rows, machines, params))
    folder.finish()
    _done(t, f"plots in {folder.path}/")
    return table


def _nccl(machine: Topology, params: Params) -> list[NcclReference]:
    """NCCL's two estimates of an allgather on ``machine`` at each size (synth.nccl.compare)."""
    from synth.nccl.compare import nccl_reference

    coll = make_collective("allgather", machine.num_ranks)
    return [nccl_reference(machine, coll, parse_size(s), params) for s in SIZES]


def _gain(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _table_row(row: Row, nccl: list[NcclReference], params: Params) -> list:
    from runtime.sim import simulate as simulate_ir
    from synth.cost import simulate
    from xccl.api import lower_bound

    sizes = [parse_size(s) for s in SIZES]
    times = [simulate(row.algorithm, row.machine, s, params).time_us for s in sizes]
    compiled = simulate_ir(row.ir, row.machine, sizes[-1], params=params).time_us
    bounds = [lower_bound(row.machine, "allgather", s) for s in sizes]
    algo = row.algorithm
    return [
        row.machine.name,
        row.label,
        algo.num_steps,
        algo.rounds,
        algo.chunks,
        row.check,
        *(_gain(ref.gains(x)[0]) for ref, x in zip(nccl, times, strict=True)),
        *(f"{x:.2f}" for x in times),
        *(f"{100 * b / x:.0f}%" for b, x in zip(bounds, times, strict=True)),
        f"{compiled:.2f}",
    ]


def _front_png(dgx1: Topology, front: Front, params: Params) -> bytes:
    from synth.bounds import rounds_per_chunk_bound, steps_lower_bound
    from synth.plots import plot_front

    coll = make_collective("allgather", dgx1.num_ranks)
    return _plot_bytes(
        plot_front,
        dgx1,
        front.algorithms,
        front.found,
        steps_lower_bound(dgx1, coll),
        rounds_per_chunk_bound(dgx1, coll),
        "allgather on dgx1: SMT front",
        params=params,
    )


def _times_png(rows: list[Row], machines: Sequence[Topology], params: Params) -> bytes:
    from synth.plots import plot_times

    return _plot_bytes(
        plot_times,
        [
            (f"allgather on {m.name}", m, [(r.label, r.algorithm) for r in rows if r.machine is m])
            for m in machines
        ],
        params=params,
    )


def _print_report(table: list[list], machines: Sequence[Topology], folder: DemoFolder, params: Params) -> None:
    from xccl.api import lower_bound

    sizes = [parse_size(s) for s in SIZES]
    print()
    print_table(
        [
            "machine",
            "algorithm",
            "S",
            "R",
            "C",
            "check",
            *(f"vs NCCL @{format_size(s)}" for s in sizes),
            *(f"us @{format_size(s)}" for s in sizes),
            *(f"of bound @{format_size(s)}" for s in sizes),
            f"XML us @{format_size(sizes[-1])}",
        ],
        table,
        title=f"allgather: synthesized vs NCCL, modeled ({params.label}); vs NCCL = NCCL's layout "
        f"in the same model / this (above 1x: faster than NCCL); {RING_LABEL} = one channel",
    )
    print()
    for machine, rows in zip(machines, _by_machine(table, machines), strict=True):
        bound = [lower_bound(machine, "allgather", s) for s in sizes]
        parts = (f"{x:.2f} us @{format_size(s)}" for x, s in zip(bound, sizes, strict=True))
        print(f"lower bound on {machine.name} (line rate): " + ", ".join(parts))
        print(_model_line(machine, rows, sizes, params))
    print(f"files: {', '.join(sorted(folder.written))} in {folder.path}/")


def _by_machine(table: list[list], machines: Sequence[Topology]) -> list[list[list]]:
    return [[row for row in table if row[0] == m.name] for m in machines]


def _model_line(machine: Topology, rows: list[list], sizes: list[int], params: Params) -> str:
    """NCCL's own model on ``machine`` at each size, and the best synthesized row's gain over it."""
    refs = _nccl(machine, params)
    synthesized = [r for r in rows if not r[1].startswith((RING_LABEL, NCCL_LABEL))]
    parts = []
    for k, (ref, size) in enumerate(zip(refs, sizes, strict=True)):
        best = min(float(r[9 + k]) for r in synthesized)
        parts.append(
            f"{ref.model_us:.2f} us {ref.model_pick} @{format_size(size)} (best here {_gain(ref.gains(best)[1])})"
        )
    return f"NCCL's own model on {machine.name} (modeled): " + ", ".join(parts)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the end-to-end demonstration: SMT, MILP, compile, execute, compare")
    p.add_argument(
        "--out", default="xccl-demo", help="folder for the XML files and plots (default ./xccl-demo)"
    )
    p.add_argument(
        "--backend", choices=("numpy", "cupy"), help="executor (default: cupy with a GPU, else numpy)"
    )
    p.add_argument(
        "-f", "--force", action="store_true", help="replace files in --out that the demo did not write"
    )
    p.add_argument(
        "--model",
        choices=MODELS,
        default=DEFAULT_MODEL,
        help=f"timing model of the table (default {DEFAULT_MODEL}; ideal: SCCL's and TACCL's; docs/nccl.md)",
    )
    p.set_defaults(func=cmd_demo)

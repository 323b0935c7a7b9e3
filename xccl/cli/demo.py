"""``xccl demo``: the whole pipeline on shipped machines, in under two minutes on a laptop.

1. DGX-1 allgather: the SMT Pareto front (SCCL style, every instance proven sat or unsat).
2. Two NDv2 machines, allgather: the MILP schedule from the shipped sketch ``ndv2x2-relay``.
3. The ring baseline on both machines.
4. Every algorithm compiled to MSCCL XML (azure dialect) and statically checked.
5. Every IR executed on the best backend present (the GPU with CuPy, else NumPy) and its outputs
   compared with the NumPy reference.
6. One table against the ring and the lower bound (the Algorithm model's times, and the compiled
   XML's in the IR simulator at 1 GiB), and plots, in ``./xccl-demo/``.

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
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import XcclError
from common.files import read_json_file, save, save_text
from common.units import format_size, parse_size
from synth.collectives import make_collective
from xccl.cli.output import print_table, progress

if TYPE_CHECKING:
    from synth.algorithm import Algorithm
    from topologies.model import Topology

__all__ = ["register"]

SIZES = ("1KiB", "1MiB", "1GiB")
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
    machine: Topology
    label: str
    algorithm: Algorithm
    check: str = ""


def _stage(k: int, text: str) -> float:
    progress(f"[demo {k}/{STAGES}] {text}")
    return time.perf_counter()


def _done(start: float, text: str) -> None:
    progress(f"           {text} ({time.perf_counter() - start:.1f} s)")


def _execute(ir, backend: str) -> str:
    from runtime import cupy as gpu
    from runtime.bench import aligned_size
    from runtime.numpy import run as cpu_run

    size = aligned_size(ir, parse_size(RUN_SIZE), "float32")
    inplace = not ir.outofplace
    result = (gpu.run if backend == "cupy" else cpu_run)(ir, size, "float32", "sum", inplace=inplace)
    return f"passed ({backend})" if result.checked else "not checked"


def cmd_demo(args: argparse.Namespace) -> int:
    from codegen import compile_algorithm, write_ir
    from runtime.sim import simulate as simulate_ir
    from synth.baselines import make_baseline
    from synth.bounds import lower_bound_us, rounds_per_chunk_bound, steps_lower_bound
    from synth.cost import simulate
    from synth.milp import synthesize as milp_synthesize
    from synth.plots import plot_front, plot_times
    from synth.smt import pareto_front
    from topologies import load
    from xccl.api import best_backend

    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DemoError(f"{out}: --out: expected a folder to write into: {exc.strerror or exc}") from None
    folder = DemoFolder.open(out, args.force)
    sizes = [parse_size(s) for s in SIZES]
    backend = args.backend or best_backend()
    dgx1, ndv2x2 = load("dgx1"), load("ndv2x2")

    t = _stage(1, "DGX-1 allgather: SMT Pareto front (SCCL's walk, bounds from HiGHS)")
    front = pareto_front(
        dgx1, "allgather", on_outcome=lambda o: progress(f"           {o.instance}: {o.summary()}")
    )
    _done(t, front.message())

    t = _stage(
        2, "2 x NDv2 allgather: MILP from sketch ndv2x2-relay at 1 GiB (routing, ordering, scheduling)"
    )
    milp = milp_synthesize(
        ndv2x2, "allgather", "ndv2x2-relay", size_bytes=parse_size("1GiB"), log=lambda s: None
    )
    _done(t, f"{milp.algorithm.name}, chunkup {milp.chunkup}, verified")

    t = _stage(3, "ring baselines on both machines")
    rows = [Row(dgx1, f"SMT S={a.num_steps} R={a.rounds} C={a.chunks}", a) for a in front.algorithms]
    rows.append(Row(dgx1, "ring baseline", make_baseline("ring", dgx1, make_collective("allgather", 8))))
    rows.append(Row(ndv2x2, "MILP (ndv2x2-relay)", milp.algorithm))
    rows.append(Row(ndv2x2, "ring baseline", make_baseline("ring", ndv2x2, make_collective("allgather", 16))))
    _done(t, "built and verified")

    t = _stage(4, f"compile to MSCCL XML (azure dialect), static checks, write {out}/")
    irs = []
    for row in rows:
        ir = compile_algorithm(row.algorithm, row.machine, dialect="azure")
        name = f"{row.algorithm.file_stem}{'-ring' if row.label.startswith('ring') else ''}.xml"
        folder.save(name, write_ir(ir, "azure").encode("utf-8"))
        irs.append(ir)
    _done(t, f"{len(irs)} XML files, every one passed the checker")

    t = _stage(5, f"execute at {RUN_SIZE} on {backend}, every output compared with the NumPy reference")
    rows = [
        Row(r.machine, r.label, r.algorithm, _execute(ir, backend)) for r, ir in zip(rows, irs, strict=True)
    ]
    _done(t, "all outputs correct")

    t = _stage(6, "modeled times against the lower bound, the XML in the IR simulator; plots")
    table = []
    for row, ir in zip(rows, irs, strict=True):
        times = [simulate(row.algorithm, row.machine, s).time_us for s in sizes]
        compiled = simulate_ir(ir, row.machine, sizes[-1]).time_us
        bounds = [
            lower_bound_us(row.machine, make_collective("allgather", row.machine.num_ranks), s) for s in sizes
        ]
        table.append(
            [
                row.machine.name,
                row.label,
                row.algorithm.num_steps,
                row.algorithm.rounds,
                row.algorithm.chunks,
                row.check,
                *(f"{x:.2f}" for x in times),
                *(f"{100 * b / x:.0f}%" for b, x in zip(bounds, times, strict=True)),
                f"{compiled:.2f}",
            ]
        )
    coll = make_collective("allgather", 8)
    front_png = _plot_bytes(
        plot_front,
        dgx1,
        front.algorithms,
        front.found,
        steps_lower_bound(dgx1, coll),
        rounds_per_chunk_bound(dgx1, coll),
        "allgather on dgx1: SMT front",
    )
    times_png = _plot_bytes(
        plot_times,
        [
            ("allgather on dgx1", dgx1, [(r.label, r.algorithm) for r in rows if r.machine is dgx1]),
            ("allgather on ndv2x2", ndv2x2, [(r.label, r.algorithm) for r in rows if r.machine is ndv2x2]),
        ],
    )
    folder.save(FRONT_PNG, front_png)
    folder.save(TIMES_PNG, times_png)
    folder.finish()
    _done(t, f"plots in {out}/")
    print()
    print_table(
        [
            "machine",
            "algorithm",
            "S",
            "R",
            "C",
            "check",
            *(f"us @{format_size(s)}" for s in sizes),
            *(f"of bound @{format_size(s)}" for s in sizes),
            f"XML us @{format_size(sizes[-1])}",
        ],
        table,
        title="allgather: synthesized vs ring baseline, modeled time and share of the lower bound",
    )
    print()
    for machine in (dgx1, ndv2x2):
        bound = [lower_bound_us(machine, make_collective("allgather", machine.num_ranks), s) for s in sizes]
        parts = (f"{x:.2f} us @{format_size(s)}" for x, s in zip(bound, sizes, strict=True))
        print(f"lower bound on {machine.name}: " + ", ".join(parts))
    print(f"files: {', '.join(sorted(folder.written))} in {out}/")
    return 0


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
    p.set_defaults(func=cmd_demo)

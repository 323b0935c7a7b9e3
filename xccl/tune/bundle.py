"""The deployable bundle of ``xccl tune``: XMLs per runtime and placement, env files, the report.

Layout of the folder (docs/tune.md)::

    azure/<coll>-<topo>-<low>-<high>-{inplace,outofplace}.xml   Azure msccl-executor-nccl (and RCCL)
    msccl/<same names>                                          microsoft/msccl
    azure.env  msccl.env  rccl.env                              what turns each runtime on
    tune.json  speedup.png                                      the sweep (modeled) and its plot

Every window is written for both runtimes and both placements (PyTorch calls allreduce in place,
and an out-of-place XML is never selected for an in-place call), each file compiled and checked
for its runtime. Within one runtime and placement the windows never overlap.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from codegen.formats import write_ir
from codegen.ir import IR
from codegen.rules import DIALECTS as RULES
from common.errors import XcclError
from xccl import api
from xccl.tune.sweep import CollectiveSweep, chunks_per_loop
from xccl.tune.windows import Window, cut, runtime_window, winning_windows

__all__ = ["BUNDLE_DIALECTS", "PLACEMENTS", "Bundle", "Shipped", "TuneError", "env_files", "plan_bundle"]

BUNDLE_DIALECTS = ("azure", "msccl")
"""The runtimes a bundle is written for (RCCL reads the ``azure`` files: the same executor code)."""
PLACEMENTS = {"outofplace": False, "inplace": True}
"""microsoft/msccl's ``MSCCL_MAX_NUM_ALGOS``: files of ``MSCCL_XML_FILES`` past it are ignored
(src/include/msccl.h; the Azure executor allows 1024)."""


class TuneError(XcclError):
    """``xccl tune`` cannot do what was asked (its output folder, its input)."""


@dataclass(frozen=True)
class Shipped:
    """One window written: its collective, sizes, schedule, and per runtime its file and bytes."""

    collective: str
    window: Window
    files: dict[str, dict[str, str]]
    """runtime -> placement -> path inside the bundle."""
    byte_windows: dict[str, tuple[int, int]]
    """runtime -> (minBytes, maxBytes) as written."""


@dataclass
class Bundle:
    """What a tune run writes: file contents by path inside the folder, and what they ship."""

    files: dict[str, bytes] = field(default_factory=dict)
    shipped: list[Shipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_bundle(sweeps: Sequence[CollectiveSweep], margin: float) -> Bundle:
    """The XMLs of every window a candidate wins by ``margin`` (env files and report added later)."""
    bundle = Bundle()
    compiled: dict[tuple, IR] = {}
    for sweep in sweeps:
        windows = _shippable_windows(sweep, margin, compiled)
        for window in windows:
            _ship(bundle, sweep, window, compiled)
    return bundle


def _shippable_windows(sweep: CollectiveSweep, margin: float, cache: dict) -> list[Window]:
    """The winning windows once every winner compiles for every runtime and placement: a winner
    that does not is marked unshippable (the next fastest candidate takes its sizes) and the
    windows are drawn again."""
    while True:
        windows = winning_windows(sweep.points(), margin)
        for window in windows:
            try:
                for dialect in BUNDLE_DIALECTS:
                    for inplace in PLACEMENTS.values():
                        _compile(sweep, window, dialect, inplace, cache)
            except XcclError as exc:
                label = window.winner.candidate.label
                sweep.unshippable.add(label)
                sweep.notes.append(f"{label}: not shipped: it does not compile for every runtime: {exc}")
                break
        else:
            return windows


def _plain(name: str) -> str:
    """``name`` with only letters, digits, ``.``, ``_`` and ``-``: a file name that a colon list
    (``MSCCL_XML_FILES``) and a shell read as written (``ring:4`` -> ``ring-4``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name)


def _compile(sweep: CollectiveSweep, window: Window, dialect: str, inplace: bool, cache: dict) -> IR:
    algo, protocol = window.winner.candidate.algorithm, window.winner.protocol
    key = (sweep.collective, window.winner.candidate.label, protocol, dialect, inplace)
    if key not in cache:
        ir = api.compile(algo, sweep.topology, dialect=dialect, inplace=inplace, protocol=protocol)
        if ir.nchunksperloop != chunks_per_loop(algo):
            raise TuneError(
                f"{algo.name}: nchunksperloop {ir.nchunksperloop}, expected {chunks_per_loop(algo)}"
            )
        cache[key] = ir
    return cache[key]


def _ship(bundle: Bundle, sweep: CollectiveSweep, window: Window, cache: dict) -> None:
    what = f"{sweep.collective} {window.low}..{window.high} B ({window.winner.candidate.label})"
    irs = {
        (d, p): _compile(sweep, window, d, inplace, cache)
        for d in BUNDLE_DIALECTS
        for p, inplace in PLACEMENTS.items()
    }
    narrowed = cut(window, next(iter(irs.values())).nchunksperloop)
    if narrowed is None:
        bundle.notes.append(f"{what}: not shipped: its chunks divide no size of the window")
        return
    stem = f"{sweep.collective}-{_plain(sweep.topology.name)}-{narrowed.low}-{narrowed.high}"
    files: dict[str, dict[str, str]] = {d: {} for d in BUNDLE_DIALECTS}
    byte_windows = {}
    for (dialect, placement), ir in irs.items():
        low, high = runtime_window(sweep.collective, ir.num_ranks, narrowed.low, narrowed.high, dialect)
        byte_windows[dialect] = (low, high)
        path = f"{dialect}/{stem}-{placement}.xml"
        named = replace(ir, name=f"{stem}-{placement}", min_bytes=low, max_bytes=high)
        bundle.files[path] = write_ir(named, dialect).encode()
        files[dialect][placement] = path
    bundle.shipped.append(Shipped(sweep.collective, narrowed, files, byte_windows))


def env_files(bundle: Bundle, folder: Path) -> dict[str, bytes]:
    """One env file per runtime (``KEY=value`` lines, for ``set -a; . FILE`` or ``--env-file``),
    with the bundle's absolute paths (write the bundle where it will be used, or edit them)."""
    root = folder.resolve()
    listed = [str(root / s.files["msccl"][p]) for p in ("inplace", "outofplace") for s in bundle.shipped]
    msccl_files = ":".join(listed)
    head = "# written by xccl tune; paths are absolute: edit them if the folder moves\n"
    msccl_warning = ""
    most = RULES["msccl"].xml.max_listed_files
    if most is not None and len(listed) > most:
        warning = (
            f"microsoft/msccl loads the first {most} files of MSCCL_XML_FILES and ignores the rest "
            f"(MSCCL_MAX_NUM_ALGOS); the bundle has {len(listed)}, in-place ones first: keep those your calls use"
        )
        bundle.notes.append(f"msccl.env: {warning}")
        msccl_warning = f"# {warning}\n"
    texts = {
        "azure.env": "# Azure msccl-executor-nccl: every XML in MSCCL_ALGO_DIR is loaded and selected by its window\n"
        f"NCCL_MSCCL_ENABLE=1\nMSCCL_ALGO_DIR={root / 'azure'}\n",
        "msccl.env": msccl_warning
        + "# microsoft/msccl: MSCCL is an NCCL algorithm, off unless NCCL_ALGO names it\n"
        f"NCCL_ALGO=MSCCL,RING,TREE\nMSCCL_XML_FILES={msccl_files}\n",
        "rccl.env": "# RCCL: the executor's code; forced on where the machine model does not enable it\n"
        f"RCCL_MSCCL_ENABLE=1\nRCCL_MSCCL_FORCE_ENABLE=1\nMSCCL_ALGO_DIR={root / 'azure'}\n",
    }
    return {name: (head + text).encode() for name, text in texts.items()}

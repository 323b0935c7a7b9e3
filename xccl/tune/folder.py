"""The bundle's folder: refused before any work unless empty (or ``--force``), written atomically.

With ``--force`` a previous bundle in the folder is replaced: the files its ``tune.json`` lists
are removed first, since the Azure executor loads every XML of ``MSCCL_ALGO_DIR`` and a stale one
would be selected. An XML in ``azure/`` or ``msccl/`` that no bundle wrote is refused even then.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.errors import XcclError
from common.files import read_json_file, save
from xccl.tune.bundle import BUNDLE_DIALECTS, TuneError

__all__ = ["REPORT", "check_folder", "write_folder"]

REPORT = "tune.json"


def _previous(folder: Path) -> set[str]:
    """The files a previous bundle in ``folder`` wrote (its report, its plot, its env files)."""
    report = folder / REPORT
    if not report.is_file():
        return set()
    try:
        listed = read_json_file(report, TuneError).get("files", [])
    except (XcclError, AttributeError):
        return set()
    return {f for f in listed if isinstance(f, str)} | {REPORT}


def check_folder(folder: str | Path, force: bool) -> Path:
    """Refuse ``folder`` now if it could not take the bundle: a file, not writable, or not empty
    without ``force``; with ``force``, holding an XML where the runtimes would load it that no
    bundle wrote."""
    path = Path(folder)
    if ":" in str(path.resolve()):
        raise TuneError(
            f"{path}: -o: a folder whose path holds ':' cannot be listed in MSCCL_XML_FILES (a ':' list)"
        )
    if path.exists() and not path.is_dir():
        raise TuneError(f"{path}: -o: expected a folder, got a file")
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise TuneError(f"{path}: -o: no permission to write in {existing}")
    if not path.exists() or not any(path.iterdir()):
        return path
    if not force:
        raise TuneError(f"{path}: -o: the folder is not empty; use --force to replace a bundle there")
    ours = _previous(path)
    for dialect in BUNDLE_DIALECTS:
        for xml in sorted((path / dialect).glob("*.xml")) if (path / dialect).is_dir() else ():
            if f"{dialect}/{xml.name}" not in ours:
                raise TuneError(
                    f"{xml}: not written by xccl tune, and the runtime would load it with the bundle; move it away"
                )
    return path


def write_folder(folder: Path, files: dict[str, bytes], force: bool) -> list[Path]:
    """Remove the previous bundle's files (``force`` only), then write ``files`` atomically."""
    if force:
        for name in sorted(_previous(folder)):
            (folder / name).unlink(missing_ok=True)
    written = []
    for name, data in sorted(files.items()):
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        written.append(save(target, data, force, TuneError))
    return written

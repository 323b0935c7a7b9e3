"""Reading the user's files and writing ours without losing anything.

Readers turn every way a file can be wrong (missing, a folder, a device, too large, not UTF-8,
invalid or too deeply nested JSON, NaN where JSON has none) into one error naming the file. Writers
never leave a half-written file: the text goes to a temporary file in the same folder, which is
renamed into place once complete, and an existing file is kept unless the caller forces it.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from common.errors import XcclError

__all__ = [
    "MAX_INPUT_BYTES",
    "check_writable",
    "named_file",
    "parse_json",
    "read_json_file",
    "read_shipped",
    "read_text",
    "save",
    "save_text",
    "shipped_names",
]

MAX_INPUT_BYTES = 1 << 30
"""Input files larger than this (1 GiB) are refused before they are read; ``XCCL_MAX_INPUT_BYTES``
raises the limit."""

_LIMIT_ENV = "XCCL_MAX_INPUT_BYTES"


def _input_limit() -> int:
    text = os.environ.get(_LIMIT_ENV, "")
    return int(text) if text.isdigit() else MAX_INPUT_BYTES


def read_text(path: str | Path, error: type[XcclError] = XcclError) -> str:
    """The UTF-8 text of ``path``; devices, folders, unreadable, oversized or non-UTF-8 files raise
    ``error`` naming the file."""
    path = Path(path)
    limit = _input_limit()
    try:
        with open(path, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                raise error(f"{path}: is a device, not a file")
            data = handle.read(limit + 1)
    except OSError as exc:  # missing, a folder, no permission
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{path}: larger than {limit} bytes, the input limit (set {_LIMIT_ENV} to raise it)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})") from None


def named_file(name: str | Path, what: str, error: type[XcclError] = XcclError) -> Path | None:
    """The file ``name`` means, or None where it is a name to look up (a shipped file, a family).

    A name means a file when it ends in ``.json``, has a folder in it, or exists (a folder or a
    device too, so that the reader names what is wrong with it); a file that does not exist raises
    ``error`` (``PATH: no such WHAT file``)."""
    text = str(name)
    path = Path(text)
    if text.endswith(".json") or "/" in text or os.sep in text or _exists(path):
        if not _exists(path):
            raise error(f"{path}: no such {what} file")
        return path
    return None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long to be a file's (ring:<5,000 digits>)
        return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json(text: str, where: str, error: type[XcclError] = XcclError) -> Any:
    """Strict JSON (no NaN or Infinity); errors name ``where`` with the line and column."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise error(f"{where}: invalid JSON: {exc}") from None
    except RecursionError:
        raise error(f"{where}: invalid JSON: nested too deeply to read") from None


def read_json_file(path: str | Path, error: type[XcclError] = XcclError) -> Any:
    """Parse a JSON file, turning I/O and syntax errors into one-line ``error``s naming the file."""
    return parse_json(read_text(path, error), str(path), error)


def shipped_names(package: str, folder: str) -> list[str]:
    """Names (without ``.json``) of the JSON files shipped in ``package``'s ``folder``, sorted."""
    files = (resources.files(package) / folder).iterdir()
    return sorted(p.name[: -len(".json")] for p in files if p.name.endswith(".json"))


def read_shipped(package: str, folder: str, name: str, error: type[XcclError] = XcclError) -> tuple[Any, str]:
    """The parsed JSON file ``name`` shipped in ``package``'s ``folder``, and where it is as a
    message names it (``topologies/machines/dgx1.json``)."""
    where = f"{package}/{folder}/{name}.json"
    text = (resources.files(package) / folder / f"{name}.json").read_text(encoding="utf-8")
    return parse_json(text, where, error), where


def check_writable(path: str | Path, force: bool = False, error: type[XcclError] = XcclError) -> Path:
    """Refuse, before any work is done, an output that :func:`save` would refuse after it."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a folder; expected a file name")
    if path.exists() and not force:
        raise error(f"{path}: file already exists; use --force to overwrite")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise error(f"{path}: cannot write: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise error(f"{path}: cannot write: no permission in {folder}")
    return path


def save(path: str | Path, data: bytes, force: bool = False, error: type[XcclError] = XcclError) -> Path:
    """Write ``data`` to ``path`` atomically: complete or not at all, and an existing file only with
    ``force`` (it keeps its permissions)."""
    path = check_writable(path, force, error)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:  # a parent that is a file, no permission, a full disk
        raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return path


def save_text(path: str | Path, text: str, force: bool = False, error: type[XcclError] = XcclError) -> Path:
    """:func:`save` for text (UTF-8)."""
    return save(path, text.encode("utf-8"), force, error)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

"""Load a user's DSL program from a Python file (how ``xccl compile program.py`` finds it).

The file is run as a fresh module. It either defines ``program(**params)`` returning a
:class:`~codegen.dsl.ChunkProgram` (called with the parameters given, e.g. ``-D num_ranks=4``), or builds
exactly one ``ChunkProgram`` while it runs (a module-level ``with ChunkProgram(...) as prog:`` block).
``example:NAME`` names a shipped example (``codegen/examples/NAME.py``). An error inside the file
is reported on one line with the file and line number, and so is a file that exits
(``sys.exit()``) instead of building a program.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import traceback
from importlib import resources
from pathlib import Path

from codegen.dsl import ChunkProgram
from codegen.errors import DslError
from codegen.examples import EXAMPLES_PREFIX, example_names
from common.errors import XcclError

__all__ = ["EXAMPLES_PREFIX", "example_names", "load_program", "parse_params"]


def parse_params(pairs: list[str]) -> dict[str, object]:
    """``["n=4", "name=x"]`` -> ``{"n": 4, "name": "x"}`` (Python literals where they parse)."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise DslError(f"parameter {pair!r}: expected NAME=VALUE")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def _resolve(source: str) -> Path:
    if source.startswith(EXAMPLES_PREFIX):
        name = source[len(EXAMPLES_PREFIX) :]
        if name not in example_names():
            raise DslError(f"unknown example {name!r}: expected one of {', '.join(example_names())}")
        return Path(str(resources.files("codegen") / "examples" / f"{name}.py"))
    path = Path(source)
    if not path.is_file():
        raise DslError(f"{path}: no such program file")
    return path


def _where(exc: BaseException, path: Path) -> str:
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path.resolve()
    ]
    return f"{path}:{frames[-1].lineno}" if frames else str(path)


def _exit_call(exc: SystemExit) -> str:
    """``sys.exit(...)`` as the program called it (``raise SystemExit`` reads the same)."""
    return "sys.exit()" if exc.code is None else f"sys.exit({exc.code!r})"


def load_program(source: str | Path, params: dict[str, object] | None = None) -> ChunkProgram:
    """The ChunkProgram a DSL file defines (see the module docstring)."""
    path = _resolve(str(source))
    params = params or {}
    name = f"_xccl_program_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DslError(f"{path}: cannot load as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        try:
            spec.loader.exec_module(module)
            factory = getattr(module, "program", None)
            if callable(factory):
                accepted = inspect.signature(factory).parameters
                extra = sorted(set(params) - set(accepted))
                if extra and not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
                    raise DslError(
                        f"{path}: program() takes no parameter {extra[0]!r} (it takes {', '.join(accepted) or 'none'})"
                    )
                prog = factory(**params)
                if not isinstance(prog, ChunkProgram):
                    raise DslError(f"{path}: program() returned {type(prog).__name__}, expected a ChunkProgram")
                return prog
        except XcclError as exc:
            if str(exc).startswith(f"{path}:"):  # already names the file (the checks just above)
                raise
            raise type(exc)(f"{_where(exc, path)}: {exc}") from None
        except Exception as exc:
            raise DslError(f"{_where(exc, path)}: {type(exc).__name__}: {exc}") from None
        except SystemExit as exc:  # sys.exit(), exit(), raise SystemExit: not a way to end loading
            raise DslError(
                f"{_where(exc, path)}: {path.name} called {_exit_call(exc)} while loading; a DSL program "
                "defines program() or builds one ChunkProgram, it does not exit"
            ) from None
        if params:
            raise DslError(f"{path}: parameters were given but the file defines no program() function")
        built = list({id(v): v for v in vars(module).values() if isinstance(v, ChunkProgram)}.values())
        if len(built) != 1:
            raise DslError(
                f"{path}: expected a function program() or exactly one ChunkProgram built at module level, "
                f"found {len(built)}"
            )
        return built[0]
    finally:
        sys.modules.pop(name, None)

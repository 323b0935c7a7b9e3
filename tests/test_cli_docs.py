"""Every example in docs/cli.md is run as a user would run it, and every command has one.

How docs/cli.md is read (write new examples this way):

- A *session* is a fenced code block whose first line starts with ``$ ``. Each session is one test,
  named after the heading above it. Other fenced blocks are not run, and none may show a line that
  starts with ``xccl `` (a command shown must be a command tested).
- Each ``$ `` line is one command line, run by bash in the session's own temporary directory, in
  order (later commands see the files earlier ones wrote), with the venv's ``xccl`` first on PATH.
  The repository's ``docs``, ``sketches``, ``topologies`` and ``codegen`` folders are linked into
  that directory, so paths like ``docs/examples/...`` work as they do from a clone's root.
- The lines after a ``$`` line, up to the next one, are what it prints: standard output and
  standard error together, in order, as a terminal shows them. They must equal the real output
  line for line, except that a line ``...`` stands for any number of lines (none included). Before
  comparing, runs of spaces become one space and timings become ``<time>``: a number with unit
  ``s`` or ``ms`` (``(0.06 s)``, ``0.99 ms``) and the solve-time cell after an SMT status
  (``sat  0.03``). Nothing else is loose, so keep machine-dependent lines (``# device: ...``,
  wall-clock tables) behind ``...``.
- The command must exit with status 0, or N when the line ends with ``# exit N``.
- After a command that exits 0, every file it names exists: the argument of ``-o``/``--output``,
  ``--out``, ``--plot``, ``--smt2``, ``--directory`` (and ``-d`` of ``xccl synth``/``xccl pareto``)
  and the target of a shell redirect ``> FILE``.
- A line ending with ``# run by tests/test_NAME.py`` is shown but not run here (it is too slow to run
  twice); that file must exist and run the command through the ``cli`` fixture.

Besides: every command and subcommand of the parser has a ``$ xccl`` line in docs/cli.md, and every
``xccl ...`` the other docs and the README name is a real command (so it has a run example too).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xccl.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
LINKED = ("docs", "sketches", "topologies", "codegen")
"""Repository folders a session can read through relative paths (never written by an example)."""

ELLIPSIS = "..."
EXIT_MARK = re.compile(r"#\s*exit\s+(\d+)\s*$")
RUN_BY_MARK = re.compile(r"#\s*run by (tests/test_\w+\.py)\s*$")
TIMINGS = (
    (re.compile(r"\b\d+(?:\.\d+)? ?m?s\b"), "<time>"),
    (re.compile(r"\b(sat|unsat|unknown) +\d+\.\d+\b"), r"\1 <time>"),
)
FILE_FLAGS = ("-o", "--output", "--out", "--plot", "--smt2", "--directory")
DIRECTORY_SHORT_FLAG_COMMANDS = ("synth", "pareto")
"""Where ``-d`` is a directory (elsewhere it is ``--dtype``)."""


@dataclass
class Command:
    line: str
    expected: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        match = EXIT_MARK.search(self.line)
        return int(match[1]) if match else 0

    @property
    def run_by(self) -> str | None:
        match = RUN_BY_MARK.search(self.line)
        return match[1] if match else None


@dataclass
class Session:
    name: str
    lineno: int
    commands: list[Command]


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def fenced_blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """``(line number, heading above, lines)`` of every fenced code block."""
    blocks, heading, inside, start, body = [], "", False, 0, []
    for k, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if inside:
                blocks.append((start, heading, body))
            inside, start, body = not inside, k, []
        elif inside:
            body.append(line)
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    assert not inside, f"{DOC}:{start}: unclosed code block"
    return blocks


def sessions(text: str) -> list[Session]:
    found, seen = [], {}
    for lineno, heading, body in fenced_blocks(text):
        if not body or not body[0].startswith("$ "):
            continue
        commands: list[Command] = []
        for line in body:
            if line.startswith("$ "):
                commands.append(Command(line[2:]))
            else:
                commands[-1].expected.append(line)
        name = _slug(heading) or "top"
        seen[name] = seen.get(name, 0) + 1
        found.append(Session(name if seen[name] == 1 else f"{name}-{seen[name]}", lineno, commands))
    return found


def normalize(line: str) -> str:
    line = " ".join(line.split())
    for pattern, replacement in TIMINGS:
        line = pattern.sub(replacement, line)
    return line


def output_matches(expected: list[str], actual: list[str]) -> str | None:
    """None when ``actual`` is ``expected`` with each ``...`` standing for any lines; else why not."""
    want = [normalize(x) for x in expected]
    got = [normalize(x) for x in actual]
    # segments between ellipses; each must match a contiguous run, in order
    segments: list[list[str]] = [[]]
    for line in want:
        if line == ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(line)
    anchored_start, anchored_end = want[:1] != [ELLIPSIS], want[-1:] != [ELLIPSIS]
    pos = 0
    for k, segment in enumerate(segments):
        if not segment:
            continue
        first, last = k == 0 and anchored_start, k == len(segments) - 1 and anchored_end
        candidates = [pos] if first else range(pos, len(got) - len(segment) + 1)
        if last:
            candidates = [c for c in candidates if c == len(got) - len(segment)]
        hit = next((c for c in candidates if got[c : c + len(segment)] == segment), None)
        if hit is None:
            return _closest_miss(segment, got, list(candidates))
        pos = hit + len(segment)
    if anchored_end and segments[-1] == [] and len(segments) == 1 and got:
        return "the doc shows no output, the command printed some"
    return None


def _closest_miss(segment: list[str], got: list[str], candidates: list[int]) -> str:
    """Where the segment comes closest to matching: the first line that differs there."""
    best, best_len = None, -1
    for c in candidates:
        n = 0
        while n < len(segment) and c + n < len(got) and got[c + n] == segment[n]:
            n += 1
        if n > best_len:
            best, best_len = c, n
    if best is None or best_len == 0:
        return f"no output line matches {segment[0]!r}"
    real = got[best + best_len] if best + best_len < len(got) else "(end of output)"
    return f"after {best_len} matching line(s), the doc shows {segment[best_len]!r}, the command printed {real!r}"


def named_files(line: str) -> list[str]:
    """The files a command line says it writes (see the module docstring)."""
    tokens = shlex.split(line, comments=True)
    files, command = [], None
    for k, tok in enumerate(tokens):
        if tok in ("&&", ";", "||", "|"):
            command = None
            continue
        if command is None and k > 0 and tokens[k - 1] == "xccl":
            command = tok
        takes_file = tok in (*FILE_FLAGS, ">", ">>") or (
            tok == "-d" and command in DIRECTORY_SHORT_FLAG_COMMANDS
        )
        if takes_file and k + 1 < len(tokens):
            files.append(tokens[k + 1])
        elif re.match(r"^>>?[^>&]", tok):
            files.append(tok.lstrip(">"))
    return files


def xccl_argvs(line: str) -> list[list[str]]:
    """The argument lists of the ``xccl`` calls on a command line."""
    tokens = shlex.split(line, comments=True)
    argvs, current = [], None
    for tok in tokens:
        if tok in ("&&", ";", "||", "|"):
            current = None
        elif current is not None:
            current.append(tok)
        elif tok == "xccl":
            current = []
            argvs.append(current)
    return argvs


DOC_TEXT = DOC.read_text()
SESSIONS = sessions(DOC_TEXT)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """The environment of a user whose PATH starts with the venv's bin (where ``xccl`` is)."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "xccl").exists():  # not installed as a script: the same entry point by hand
        bin_dir = tmp_path_factory.mktemp("bin")
        shim = bin_dir / "xccl"
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m xccl.cli.main "$@"\n')
        shim.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")


@pytest.mark.parametrize("session", SESSIONS, ids=[s.name for s in SESSIONS])
def test_session(session: Session, tmp_path: Path, env: dict[str, str]) -> None:
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    for cmd in session.commands:
        where = f"docs/cli.md:{session.lineno}: $ {cmd.line}"
        if cmd.run_by:
            test_file = ROOT / cmd.run_by
            (word,) = {argv[0] for argv in xccl_argvs(cmd.line)}
            assert test_file.exists(), f"{where}: {cmd.run_by} does not exist"
            assert f'cli("{word}"' in test_file.read_text(), f"{where}: {cmd.run_by} does not run it"
            continue
        proc = subprocess.run(
            ["bash", "-c", cmd.line],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        shown = proc.stdout.rstrip("\n")
        actual = shown.split("\n") if shown else []
        assert "Traceback" not in proc.stdout, f"{where}\n{proc.stdout}"
        assert proc.returncode == cmd.exit_status, f"{where}: exit {proc.returncode}\n{proc.stdout}"
        problem = output_matches(cmd.expected, actual)
        assert problem is None, f"{where}: {problem}\n--- real output ---\n{proc.stdout}"
        if proc.returncode == 0:
            for name in named_files(cmd.line):
                assert (tmp_path / name).exists(), f"{where}: {name} was not written"


def _command_paths(parser) -> set[tuple[str, ...]]:
    """Every runnable command: ``("topo", "list")``, ``("synth", "smt", "instance")``, ``("demo",)``."""
    paths: set[tuple[str, ...]] = set()

    def walk(p, prefix: tuple[str, ...]) -> None:
        subs = [a for a in p._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            paths.add(prefix)
        for action in subs:
            for name, child in action.choices.items():
                walk(child, (*prefix, name))

    walk(parser, ())
    return paths


def test_every_command_has_an_example_in_the_docs():
    """A new command (or subcommand) cannot go undocumented: each appears on some ``$ xccl`` line."""
    shown = {tuple(argv) for s in SESSIONS for c in s.commands for argv in xccl_argvs(c.line)}
    missing = sorted(
        " ".join(path)
        for path in _command_paths(build_parser())
        if not any(argv[: len(path)] == path for argv in shown)
    )
    assert not missing, f"commands with no `$ xccl ...` example in docs/cli.md: {missing}"


def test_every_command_the_docs_name_exists():
    """Commands named anywhere in docs/ and the README (code, prose) are real ones, so each is one
    the test above finds a run example of; a renamed or misspelt command fails here."""
    parser = build_parser()
    paths = _command_paths(parser)
    prefixes = {path[:k] for path in paths for k in range(1, len(path) + 1)}
    bad = []
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for words in re.findall(r"\bxccl((?: [a-z][a-z0-9-]*)+)", doc.read_text()):
            named: tuple[str, ...] = ()
            for word in words.split():
                if named in paths or (*named, word) not in prefixes:
                    break
                named = (*named, word)
            if not named or (named not in paths and len(words.split()) > len(named)):
                bad.append(f"{doc.relative_to(ROOT)}: xccl{words}")
    assert not bad, f"not commands of xccl: {bad}"


def test_every_command_shown_is_a_session_line():
    """A command in a block that is not run (no ``$``) would go stale unnoticed."""
    for lineno, _, body in fenced_blocks(DOC_TEXT):
        if body and body[0].startswith("$ "):
            continue
        stray = [line for line in body if line.lstrip().startswith("xccl ")]
        assert not stray, f"docs/cli.md:{lineno}: commands outside a `$` session: {stray}"


def test_the_output_matcher_is_strict():
    """The matcher itself: ellipses, anchoring, timings, and that a wrong line fails."""
    real = ["Solving S=2 ... sat (0.03 s)", "a  b", "c", "d"]
    assert output_matches(["Solving S=2 ... sat (1.5 s)", "a b", "c", "d"], real) is None
    assert output_matches(["...", "d"], real) is None
    assert output_matches(["a b", "...", "d"], real) is not None  # not anchored at the start
    assert output_matches(["...", "a b", "d"], real) is not None  # c is missing without "..."
    assert output_matches(["...", "c"], real) is not None  # d follows c
    assert output_matches(["...", "e", "..."], real) is not None
    assert output_matches([], real) is not None
    assert output_matches([], []) is None
    assert normalize("allgather 2 3 2 3/2 sat 0.02 * 1.40") == "allgather 2 3 2 3/2 sat <time> * 1.40"
    assert named_files("xccl run ag.json -d f16 && xccl pareto -d front --plot f.png > out.txt") == [
        "front",
        "f.png",
        "out.txt",
    ]

"""What goes wrong when ranks run in processes of their own, and how one error is made of it.

Every rank that fails says what it saw as a :class:`Failure`: its own error (a tensor of the wrong
size, an exception), a transfer with a peer that failed (the peer is gone, or did not answer
within the timeout), or, as seen from outside, that it died or hung or never took part. Several
ranks fail together when one goes wrong (its peers time out waiting for it), so :func:`blame`
picks the cause: a rank that died, then one that failed on its own, then one that hung or never
took part (the one most peers timed out waiting for first: a rank stuck on a hung peer looks hung
too), and only then a failed transfer. The result is one :class:`RankFault` naming the rank
and the level. Light to import (no torch).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runtime.errors import ExecutionError

__all__ = [
    "FAULT_ENV",
    "FAULT_KINDS",
    "KINDS",
    "Failure",
    "Fault",
    "RankFault",
    "blame",
    "parse_fault",
    "settle",
    "short",
    "where",
]

KINDS = ("died", "error", "hung", "absent", "peer")
"""A failure's kind, most telling first (the order :func:`blame` picks the cause in)."""


FAULT_ENV = "XCCL_TORCH_FAULT"
"""Fault injection for the torch backend: ``KIND@RANK:LEVEL`` (:func:`parse_fault`)."""
FAULT_KINDS = ("die", "hang", "size")
"""What an injected :class:`Fault` does to its rank when it reaches its level: end the process,
stop answering, or post that level's transfers with one element too many."""


@dataclass(frozen=True)
class Fault:
    """A fault to inject on ``rank`` when it reaches ``level`` (one of :data:`FAULT_KINDS`): how the
    tests, and a user who wants to see the fault handling, make a rank die, hang or send a
    wrong-sized tensor in a real run."""

    kind: str
    rank: int
    level: int


def parse_fault(text: str, where: str = FAULT_ENV) -> Fault:
    """``KIND@RANK:LEVEL`` (``die@2:1``) as a :class:`Fault`; ExecutionError naming ``where`` else."""
    kind, _, at = text.strip().partition("@")
    rank, _, level = at.partition(":")
    if kind not in FAULT_KINDS or not rank.isdigit() or not level.isdigit():
        raise ExecutionError(
            f"{where}={text!r}: expected KIND@RANK:LEVEL with KIND one of {', '.join(FAULT_KINDS)} "
            "and RANK, LEVEL whole numbers (like die@2:1)"
        )
    return Fault(kind, int(rank), int(level))


@dataclass(frozen=True)
class Failure:
    """What one rank saw: ``level`` is where it stopped (-1: before level 0; the number of levels:
    after the last); ``peer`` the rank a failed transfer was with."""

    rank: int
    kind: str
    level: int
    message: str
    peer: int | None = None

    def to_json(self) -> dict:
        return asdict(self)


class RankFault(ExecutionError):
    """A run on several processes failed: the message names the rank at fault and the level."""

    def __init__(self, message: str, rank: int, level: int) -> None:
        super().__init__(message)
        self.rank, self.level = rank, level

    def __reduce__(self):
        return (RankFault, (str(self), self.rank, self.level))


def where(level: int, levels: int) -> str:
    """``level`` in words, for a schedule of ``levels`` levels numbered from 0 (-1: before the
    first; -2: while joining the process group)."""
    if level < -1:
        return "while joining the process group"
    if level < 0:
        return "before level 0"
    if level >= levels:
        return f"after the last level ({levels - 1})" if levels else "after the run"
    return f"at level {level} of 0-{levels - 1}"


_PATH = re.compile(r"^\[[^\]]*\]\s*")


def short(text: str) -> str:
    """A library's error on one line: its first line, without a leading ``[file:line]``, up to the
    first sentence after the reason (Gloo adds advice paragraphs)."""
    line = _PATH.sub("", str(text).strip().splitlines()[0] if str(text).strip() else "no message")
    cut = line.find(". This ")
    return line[: cut + 1] if cut > 0 else line


def blame(name: str, levels: int, failures: Sequence[Failure]) -> RankFault:
    """One error for a failed run of ``name`` (``levels`` levels) from what the ranks saw;
    ``failures`` must not be empty."""
    blamed = [f.peer for f in failures if f.kind == "peer"]
    cause = min(failures, key=lambda f: (KINDS.index(f.kind), -blamed.count(f.rank), f.level, f.rank))
    at = where(cause.level, levels)
    if cause.kind in ("hung", "absent"):
        waiting = sorted({f.rank for f in failures if f.kind == "peer" and f.peer == cause.rank})
        also = f"; rank(s) {', '.join(map(str, waiting))} timed out waiting for it" if waiting else ""
        return RankFault(f"{name}: rank {cause.rank} {cause.message} {at}{also}", cause.rank, cause.level)
    if cause.kind == "died":
        return RankFault(f"{name}: rank {cause.rank} died {at} ({cause.message})", cause.rank, cause.level)
    others = sorted({f.rank for f in failures} - {cause.rank})
    also = f" (rank(s) {', '.join(map(str, others))} failed too)" if others else ""
    return RankFault(f"{name}: rank {cause.rank} failed {at}: {cause.message}{also}", cause.rank, cause.level)


def settle(
    name: str, levels: int, replies: Sequence[tuple[str, Any] | None], failures: Sequence[Failure] = ()
) -> list[Any]:
    """Every rank's value from its reply to one job (``("ok", value)``, ``("error", exc)``,
    ``("fault", Failure)``, None for a rank that gave none), in rank order. Raises
    :func:`blame`'s error when a rank failed (or ``failures`` names one seen from outside), else
    the error of the lowest rank that raised one."""
    given = [reply for reply in replies if reply is not None]
    found = [*failures, *(value for kind, value in given if kind == "fault")]
    if found:
        raise blame(name, levels, found)
    if len(given) < len(replies):
        raise RankFault(f"{name}: rank {replies.index(None)} gave no reply", replies.index(None), -1)
    errors = [value for kind, value in given if kind == "error"]
    if errors:
        raise errors[0]
    return [value for _, value in given]

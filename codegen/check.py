"""The static checker: prove what the runtimes need before an IR is written or run.

The rules on what an IR may contain and on what each runtime accepts are :mod:`codegen.rules`'s
(the checker asks there, as the XML reader and writer and the runtime loader do). What the checker
adds is the flow of the whole schedule: on every connection (sender, receiver, channel) the
sender's counts equal the receiver's, in order; no cycle through dependencies, program order and
connection order together (a cycle is a deadlock), also once every connection holds only as many
calls as NCCL's FIFO does (``codegen.protocols``) and every step moves one call per chunk, as at
large sizes. Every problem names rank, threadblock and step. What the schedule computes is
:mod:`codegen.semantics`'s to check.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from codegen.errors import IRCheckError
from codegen.ir import IR, Threadblock
from codegen.limits import TRANSFERS
from codegen.protocols import PROTOCOLS, fifo_calls
from codegen.rules import (
    DIALECTS,
    Dialect,
    Problem,
    connections,
    dialect_problems,
    file_problems,
    get_dialect,
    ranks_in_order,
)
from codegen.rules import structure_problems as _structure_problems
from common.forked import Forked, forked
from common.gc_pause import gc_paused
from common.memo import Marks, SameObjects

if TYPE_CHECKING:
    from codegen.call_graph import Steps
    from codegen.formats.xml_reader import XmlFacts

__all__ = ["Problem", "check_ir", "check_ir_beside", "find_deadlock", "find_problems", "settle"]


def check_ir(ir: IR, dialect: str | Dialect | None = None, final: bool = True) -> None:
    """Raise :class:`IRCheckError` with the first problem (and how many more there are). An IR
    this passed before for the same dialect and ``final`` passes again without a second look; one
    whose check for them runs beside (:func:`check_ir_beside`) waits for that one's verdict."""
    d = DIALECTS[dialect] if isinstance(dialect, str) and dialect in DIALECTS else dialect
    known = d is None or isinstance(d, Dialect)  # else find_problems says what is wrong with it
    pending = _BESIDE.get(id(ir))
    if known and pending is not None and pending.holds(ir, (d, final)):
        settle(ir)
    if known and _PASSED.holds(ir, (d, final)):
        return
    _verdict(ir, find_problems(ir, d, final), (d, final) if known else None)


def check_ir_beside(ir: IR, dialect: Dialect | None = None, final: bool = True) -> None:
    """:func:`check_ir` of ``ir`` started in a child process (``common.forked``) while the caller
    goes on: ``xccl compile`` times the IR it compiled meanwhile (at 512 ranks the check takes 1.5
    s, the timing 3 s). The verdict is taken by :func:`settle` or by the next :func:`check_ir` of
    ``ir`` for the same ``dialect`` and ``final``; inline there where no child can be had."""
    if _PASSED.holds(ir, (dialect, final)) or id(ir) in _BESIDE:
        return
    job = forked(partial(find_problems, ir, dialect, final))
    _BESIDE[id(ir)] = _Beside(weakref.ref(ir, partial(_dropped, id(ir))), (dialect, final), job)


def settle(ir: IR) -> None:
    """Take the verdict of the check :func:`check_ir_beside` started on ``ir``, where one was:
    raise its :class:`IRCheckError`, or count ``ir`` as passed (nothing where none runs)."""
    pending = _BESIDE.pop(id(ir), None)
    if pending is None or pending.ir() is not ir:
        return
    _verdict(ir, pending.job.result(), pending.key)


def _verdict(ir: IR, problems: list[Problem], key: tuple | None) -> None:
    """Raise the first of ``problems``; where none, ``ir`` passed for ``key`` (None: not remembered)."""
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise IRCheckError(f"{ir.name}: {problems[0]}{more}")
    if key is not None:
        _PASSED.add(ir, key)


@dataclass(frozen=True)
class _Beside:
    """A check running beside: the IR (weakly), the (dialect, final) it is for, its job."""

    ir: weakref.ref
    key: tuple
    job: Forked[list[Problem]]

    def holds(self, ir: IR, key: tuple) -> bool:
        return self.ir() is ir and self.key == key


_BESIDE: dict[int, _Beside] = {}
"""The checks running beside, by the id of their IR (an IR let go kills its child)."""


def _dropped(key: int, _gone: weakref.ref) -> None:
    pending = _BESIDE.pop(key, None)
    if pending is not None:
        pending.job.close()


_PASSED = Marks()
"""The IRs :func:`check_ir` passed, each with the (dialect, final) it passed for: the compiler
checks the IR it keeps and the writer checks it again before printing it (at 512 ranks the
runtime's rules alone take a second or more), after other variants' IRs were checked in between."""


@gc_paused()
def find_problems(
    ir: IR, dialect: str | Dialect | None = None, final: bool = True, facts: XmlFacts | None = None
) -> list[Problem]:
    """Every rule the IR breaks (empty: it is safe to run): the universal rules (``final`` adds
    ``has_dep`` on every awaited step), the flow once they hold, then ``facts`` (what the XML file
    it was read from says beyond it) and ``dialect``'s rules."""
    out = list(_BY_IR.get([ir], ("structure", final), lambda: _structure_problems(ir, final=final)))
    if not ranks_in_order(ir):
        return out
    if not out:  # the flow checks need a sound structure
        out.extend(_BY_RANKS.get(ir.gpus, ("connections", ir.protocol), lambda: _check_connections(ir)))
        if not out:
            out.extend(_BY_RANKS.get(ir.gpus, ("deadlock", ir.protocol), lambda: _check_deadlock(ir)))
    d = None if dialect is None else get_dialect(dialect)
    if facts is not None:
        out.extend(file_problems(ir, facts, d))
    if d is not None:
        out.extend(dialect_problems(ir, d))
    return out


_BY_IR = SameObjects()
"""The structure's problems of the last IR checked: the compiler asks whether the IR it keeps
deadlocks, then checks it in full (about a second each at 512 ranks)."""
_BY_RANKS = SameObjects()
"""The flow's (connections, deadlock): they depend on the ranks and the protocol only, so they hold
for a copy of the IR with another size window too."""


def _steps(ir: IR) -> Steps:
    """The steps of ``ir`` in bulk, read once for the connections' and the deadlock check."""
    from codegen.call_graph import Steps  # NumPy: not loaded by building the CLI's parser

    return _BY_RANKS.get(ir.gpus, "steps", lambda: Steps(ir))


def _transfers(
    tbs: dict[tuple[int, int], Threadblock], rank: int, tb_id: int | None, sends: bool
) -> list[tuple[int, int]]:
    if tb_id is None:
        return []
    tb = tbs[(rank, tb_id)]
    return [(k, op.count) for k, op in enumerate(tb.ops) if (op.type.sends if sends else op.type.receives)]


def _check_connections(ir: IR) -> list[Problem]:
    """On every connection, each transfer sent is received, with the same count, in order."""
    ends = sorted(connections(ir).items())
    unmatched = _steps(ir).unmatched(ends)
    if not unmatched.any():
        return []
    out = []
    # threadblocks by (rank, id), found once (``Gpu.threadblock`` scans the rank's: hundreds at 512 ranks)
    tbs: dict[tuple[int, int], Threadblock] = {}
    for g in ir.gpus:
        for tb in g.threadblocks:
            tbs.setdefault((g.rank, tb.id), tb)
    for (a, b, ch), (stb, rtb) in (end for end, bad in zip(ends, unmatched.tolist(), strict=True) if bad):
        sent = _transfers(tbs, a, stb, True)
        got = _transfers(tbs, b, rtb, False)
        if rtb is None or stb is None:
            out.append(_one_sided(a, b, ch, stb, rtb, sent or got))
            continue
        found = _count_mismatch(a, b, ch, (stb, sent), (rtb, got))
        if found is not None:
            out.append(found)
    return out


def _one_sided(a: int, b: int, ch: int, stb: int | None, rtb: int | None, moves: list) -> Problem:
    """A connection with a threadblock at one end only: its first transfer is never matched."""
    if rtb is None:
        me, peer, verb, other = (a, stb), b, f"sends to rank {b}", f"receives from rank {a}"
    else:
        me, peer, verb, other = (b, rtb), a, f"receives from rank {a}", f"sends to rank {b}"
    return Problem(
        f"{verb} on channel {ch}, but no threadblock of rank {peer} {other} on it", *me, moves[0][0]
    )


def _count_mismatch(
    a: int, b: int, ch: int, sender: tuple[int, list], receiver: tuple[int, list]
) -> Problem | None:
    """The first transfer whose counts differ at the two ends, or the first one left over."""
    (stb, sent), (rtb, got) = sender, receiver
    for n, ((sk, sc), (rk, rc)) in enumerate(zip(sent, got, strict=False)):
        if sc != rc:
            return Problem(
                f"transfer {n} to rank {b} on channel {ch} sends cnt={sc}, but rank {b} threadblock {rtb} "
                f"step {rk} receives cnt={rc}",
                a,
                stb,
                sk,
            )
    if len(sent) == len(got):
        return None
    matched = min(len(sent), len(got))
    if len(sent) > matched:
        what = f"sends {len(sent)} transfers to rank {b} on channel {ch}, rank {b} threadblock {rtb} receives"
        return Problem(f"{what} {len(got)}: this step's transfer is never received", a, stb, sent[matched][0])
    what = f"receives {len(got)} transfers from rank {a} on channel {ch}, rank {a} threadblock {stb} sends"
    return Problem(f"{what} {len(sent)}: this step waits forever", b, rtb, got[matched][0])


def find_deadlock(ir: IR) -> Problem | None:
    """The deadlock of a structurally sound IR (see :func:`_check_deadlock`), or None."""
    found = _BY_RANKS.get(ir.gpus, ("deadlock", ir.protocol), lambda: _check_deadlock(ir))
    return found[0] if found else None


def _check_deadlock(ir: IR) -> list[Problem]:
    """A cycle through program order, dependencies and connection order, with unbounded FIFOs; else
    one that NCCL's bounded FIFOs add (see :class:`codegen.call_graph.CallGraph`). The bounded graph
    is searched first: it holds every edge of the unbounded one, so most schedules, which have no
    cycle in it, need no second search."""
    from codegen.call_graph import CallGraph, find_cycle  # NumPy: not loaded by building the CLI's parser

    steps = _steps(ir)
    transfers = sum(steps.counts[steps.flags > 0].tolist())  # chunks sent and received (Python ints: exact)
    TRANSFERS.check(transfers, f"{ir.name}: the deadlock check", IRCheckError)
    calls = CallGraph(ir, steps)
    depth = fifo_calls(ir.protocol) if ir.protocol in PROTOCOLS else None
    cycle = find_cycle(calls.n, *calls.edges(depth))  # its edges hold the unbounded graph's
    if cycle is None:
        return []
    unbounded = find_cycle(calls.n, *calls.edges(None)) if depth is not None else cycle
    if unbounded is not None:  # a cycle without FIFO limits is the one to name
        cycle, depth = unbounded, None
    steps = [calls.name(i) for i in cycle]
    steps = [s for k, s in enumerate(steps) if not k or s != steps[k - 1]]
    shown = " -> ".join("r{}.tb{}.s{}".format(*s) for s in steps[:8]) + (" -> ..." if len(steps) > 8 else "")
    if depth is None:
        what = f"a cycle of {len(steps)} steps through dependencies and connection order"
    else:
        what = (
            f"a cycle of {len(steps)} steps once connections hold {depth} calls, as NCCL's FIFOs do "
            f"with {ir.protocol} (a step moves one call per chunk at large sizes)"
        )
    return [Problem(f"deadlock: {what} ({shown})", *steps[0])]

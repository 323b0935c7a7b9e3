"""Symbolic replay of an algorithm: the proof a user never receives a wrong schedule.

State is, per rank and address, the set of contributions (chunk ids) held there, as a bitmask
over :attr:`Collective.contribution_bits`: the replay of an n-rank allreduce keeps n bits per rank
and address (a 512-rank one fits in tens of MB; sets of ids needed n^3 objects). The checks are
those of sets, exactly: a copy must hold every bit it replaces, a reduce must share none with
what it lands on. Every send of a step reads the state left by the previous step. Checks, each
reported with the step it fails in: the chunk is at its source, the link exists, each link and
shared resource carries no more than its capacity times the step's rounds, no contribution is
reduced in twice, no copy discards contributions, and at the end every postcondition holds.

A collective that does not combine is replayed on arrays instead (:mod:`synth.replay`: the same
checks in the same order, with the same messages, on a boolean matrix of what each rank holds), so
that a 16.8 M-send composed allgather is verified without a Python object per send. A combining
one is replayed there first on packed bitsets (:func:`synth.replay.replayed_combining`); the replay
below runs only where that one finds a fault, to name it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from synth.errors import VerificationError
from synth.replay import copy_only, replay_copies, replayed_combining, step_columns

if TYPE_CHECKING:
    from synth.algorithm import Algorithm, Send, Step
    from topologies.model import Topology

__all__ = ["final_state", "verify"]

State = list[dict[int, int]]
"""``state[rank][address]``: the contributions held, bit b for the address's b-th (by id)."""


def _fmt(mask: int, addr: int, algo: Algorithm) -> str:
    """The ranks whose contributions to ``addr`` are in ``mask``."""
    coll = algo.collective
    members = sorted(coll.contributions[addr])
    ranks = sorted({r for b, cid in enumerate(members) if mask >> b & 1 for r in coll.chunks[cid].pre})
    return "{" + ",".join(map(str, ranks)) + "}"


def _initial(algo: Algorithm) -> State:
    coll = algo.collective
    bits = coll.contribution_bits
    state: State = [{} for _ in range(coll.num_ranks)]
    for cid, chunk in enumerate(coll.chunks):
        bit = 1 << bits[cid]
        for r in chunk.pre:
            state[r][chunk.address] = state[r].get(chunk.address, 0) | bit
    return state


def _what(where: str, send: Send) -> str:
    return f"{where}: send of chunk {send.chunk} from rank {send.src} to rank {send.dst}"


def _check_send(algo: Algorithm, send: Send, where: str, known: bool, logical) -> None:
    """Raise on a malformed send or one without a link; ``known``: its pair passed before."""
    coll, n = algo.collective, algo.collective.num_ranks
    if not known and (not (0 <= send.src < n and 0 <= send.dst < n) or send.src == send.dst):
        raise VerificationError(f"{_what(where, send)}: expected two different ranks in 0..{n - 1}")
    if not 0 <= send.chunk < coll.num_addresses:
        raise VerificationError(f"{_what(where, send)}: expected a chunk in 0..{coll.num_addresses - 1}")
    if send.op not in ("copy", "reduce"):
        raise VerificationError(f"{_what(where, send)}: unknown op {send.op!r}")
    if send.op == "reduce" and not coll.combining:
        raise VerificationError(f"{_what(where, send)}: {coll.name} does not combine; op must be copy")
    if not known and logical is not None and (send.src, send.dst) not in logical.links:
        raise VerificationError(f"{_what(where, send)}: no link {send.src} -> {send.dst} in {algo.topology}")


def _reads(
    algo: Algorithm, step: Step, where: str, state: State, logical, linked: set[tuple[int, int]]
) -> dict[tuple[int, int], list]:
    """What each (destination, address) receives in ``step``: (send, contributions it carries);
    raises on a send that is malformed, has no link, or sends what its source does not hold.
    ``linked`` keeps the pairs already found to be two ranks with a link, checked once each."""
    writes: dict[tuple[int, int], list] = {}
    num_addresses = algo.collective.num_addresses
    ops = ("copy", "reduce") if algo.collective.combining else ("copy",)
    for send in step.sends:
        src, chunk = send.src, send.chunk
        pair = (src, send.dst)
        known = pair in linked
        if not (known and 0 <= chunk < num_addresses and send.op in ops):
            _check_send(algo, send, where, known, logical)
            linked.add(pair)
        held = state[src].get(chunk)
        if not held:
            raise VerificationError(f"{_what(where, send)}: rank {src} does not hold chunk {chunk} yet")
        key = (send.dst, chunk)
        if key in writes:
            writes[key].append((send, held))
        else:
            writes[key] = [(send, held)]
    return writes


def _received(algo: Algorithm, where: str, dst: int, addr: int, before: int, incoming: list) -> int:
    """What ``dst`` holds of ``addr`` after the step: one copy (which must keep what it replaces),
    or its sum with every reduction (none counting a contribution twice)."""
    if any(send.op == "copy" for send, _ in incoming):
        if len(incoming) > 1:
            raise VerificationError(
                f"{where}: chunk {addr} reaches rank {dst} from several sends in one step"
            )
        send, held = incoming[0]
        lost = before & ~held
        if lost:
            raise VerificationError(
                f"{where}: copy of chunk {addr} from rank {send.src} to rank {dst} would discard "
                f"the contributions of ranks {_fmt(lost, addr, algo)}"
            )
        return held
    acc = before
    for send, held in incoming:
        twice = acc & held
        if twice:
            raise VerificationError(
                f"{where}: reduce of chunk {addr} from rank {send.src} into rank {dst} counts the "
                f"contributions of ranks {_fmt(twice, addr, algo)} twice"
            )
        acc |= held
    return acc


def final_state(algo: Algorithm, topology: Topology | None = None) -> State:
    """Replay ``algo`` and return the final state; with a topology, links and capacities are checked."""
    n = algo.collective.num_ranks
    logical = topology.logical() if topology is not None else None
    capacity = topology.chunk_capacity() if topology is not None else None
    if topology is not None and topology.num_ranks != n:
        raise VerificationError(
            f"{algo.name}: the topology has {topology.num_ranks} ranks, the collective {n}"
        )
    if topology is not None:
        algo.route(topology)
    state = _initial(algo)
    linked: set[tuple[int, int]] = set()
    for index, step in enumerate(algo.steps):
        where = f"{algo.name}: step {index}"
        if step.rounds < 1:
            raise VerificationError(f"{where}: rounds must be >= 1, got {step.rounds}")
        writes = _reads(algo, step, where, state, logical, linked)
        if capacity is not None:
            over = capacity.overloaded(((s.src, s.dst) for s in step.sends), step.rounds)
            if over:
                c = over[0]
                raise VerificationError(
                    f"{where}: {c.used} chunks over {c.name} exceed its capacity "
                    f"{c.capacity} x {step.rounds} round(s) = {c.capacity * step.rounds}"
                )
        # every read of this step is taken (the masks are immutable ints), and each (dst, addr) is
        # written once, from its own value before the step: updating in place replays it exactly
        for (dst, addr), incoming in writes.items():
            held = state[dst]
            before = held.get(addr, 0)
            if len(incoming) == 1:  # the common case, inline: one send, which must not lose or repeat
                send, mask = incoming[0]
                copy = send.op == "copy"
                if not (before & ~mask if copy else before & mask):
                    held[addr] = mask if copy else before | mask
                    continue
            held[addr] = _received(algo, where, dst, addr, before, incoming)
    return state


def verify(algo: Algorithm, topology: Topology) -> None:
    """Raise :class:`VerificationError` unless ``algo`` implements its collective on ``topology``."""
    coll = algo.collective
    if copy_only(coll):
        _replay(algo, topology)
        return
    if coll.combining and replayed_combining(algo, topology):
        return  # every check passed on arrays; any fault is found and named by the replay below
    state = final_state(algo, topology)
    if coll.combining:
        for addr, posts in enumerate(coll.address_posts):
            needed = (1 << len(coll.contributions[addr])) - 1
            for r in sorted(posts):
                got = state[r].get(addr, 0)
                if got != needed:
                    raise VerificationError(
                        f"{algo.name}: postcondition: rank {r} ends with chunk {addr} reduced over ranks "
                        f"{_fmt(got, addr, algo)}, expected all of {_fmt(needed, addr, algo)}"
                    )
        return
    for cid, chunk in enumerate(coll.chunks):
        for r in sorted(chunk.post):
            if not state[r].get(cid, 0):
                raise VerificationError(f"{algo.name}: postcondition: rank {r} never gets chunk {cid}")


def _replay(algo: Algorithm, topology: Topology) -> None:
    """:func:`synth.replay.replay_copies` of ``algo``'s steps as arrays (ops coded only where a
    send does not copy)."""
    columns = [step_columns(st.sends) for st in algo.steps]
    if any(c is None for c in columns):  # a Python caller's odd field: read as it always was
        columns = [_rows(st) for st in algo.steps]
    blocks = [block for block, _ in columns]
    rounds = [st.rounds for st in algo.steps]
    ops = names = None
    if any(op.any() for _, op in columns):
        names = [[s.op for s in st.sends] for st in algo.steps]
        ops = [op for _, op in columns]
    replay_copies(
        algo.name, algo.collective, topology, blocks, rounds, ops=ops, op_names=names, topology_name=algo.topology
    )


def _rows(step: Step) -> tuple[np.ndarray, np.ndarray]:
    """:func:`synth.replay.step_columns` of a step, made send by send."""
    block = np.array([(s.chunk, s.src, s.dst) for s in step.sends], dtype=np.int64).reshape(-1, 3)
    code = {"copy": 0, "reduce": 1}
    return block, np.array([code.get(s.op, 2) for s in step.sends], dtype=np.int64)

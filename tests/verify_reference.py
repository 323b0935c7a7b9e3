"""The verifier as it was before contributions became bitmasks: per rank and address, a frozenset
of chunk ids (n^3 of them in the replay of an n-rank allreduce). Kept as the oracle that
:mod:`synth.verify` must agree with, message for message, on small instances
(tests/test_verify_compact.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from synth.errors import VerificationError

if TYPE_CHECKING:
    from synth.algorithm import Algorithm, Step
    from topologies.model import Topology

__all__ = ["final_state", "verify"]

State = list[dict[int, frozenset[int]]]


def _fmt(ids: frozenset[int], algo: Algorithm) -> str:
    ranks = sorted({r for cid in ids for r in algo.collective.chunks[cid].pre})
    return "{" + ",".join(map(str, ranks)) + "}"


def _initial(algo: Algorithm) -> State:
    coll = algo.collective
    state: State = [{} for _ in range(coll.num_ranks)]
    for cid, chunk in enumerate(coll.chunks):
        for r in chunk.pre:
            state[r][chunk.address] = state[r].get(chunk.address, frozenset()) | {cid}
    return state


def _reads(algo: Algorithm, step: Step, where: str, state: State, logical) -> dict[tuple[int, int], list]:
    """What each (destination, address) receives in ``step``: (send, contributions it carries);
    raises on a send that is malformed, has no link, or sends what its source does not hold."""
    coll, n = algo.collective, algo.collective.num_ranks
    writes: dict[tuple[int, int], list] = {}
    for send in step.sends:
        what = f"{where}: send of chunk {send.chunk} from rank {send.src} to rank {send.dst}"
        if not (0 <= send.src < n and 0 <= send.dst < n) or send.src == send.dst:
            raise VerificationError(f"{what}: expected two different ranks in 0..{n - 1}")
        if not 0 <= send.chunk < coll.num_addresses:
            raise VerificationError(f"{what}: expected a chunk in 0..{coll.num_addresses - 1}")
        if send.op not in ("copy", "reduce"):
            raise VerificationError(f"{what}: unknown op {send.op!r}")
        if send.op == "reduce" and not coll.combining:
            raise VerificationError(f"{what}: {coll.name} does not combine; op must be copy")
        if logical is not None and (send.src, send.dst) not in logical.links:
            raise VerificationError(f"{what}: no link {send.src} -> {send.dst} in {algo.topology}")
        held = state[send.src].get(send.chunk)
        if not held:
            raise VerificationError(f"{what}: rank {send.src} does not hold chunk {send.chunk} yet")
        writes.setdefault((send.dst, send.chunk), []).append((send, held))
    return writes


def _received(
    algo: Algorithm, where: str, dst: int, addr: int, before: frozenset[int], incoming: list
) -> frozenset[int]:
    """What ``dst`` holds of ``addr`` after the step: one copy (which must keep what it replaces),
    or its sum with every reduction (none counting a contribution twice)."""
    if any(send.op == "copy" for send, _ in incoming):
        if len(incoming) > 1:
            raise VerificationError(
                f"{where}: chunk {addr} reaches rank {dst} from several sends in one step"
            )
        send, held = incoming[0]
        if not before <= held:
            raise VerificationError(
                f"{where}: copy of chunk {addr} from rank {send.src} to rank {dst} would discard "
                f"the contributions of ranks {_fmt(before - held, algo)}"
            )
        return held
    acc = before
    for send, held in incoming:
        twice = acc & held
        if twice:
            raise VerificationError(
                f"{where}: reduce of chunk {addr} from rank {send.src} into rank {dst} counts the "
                f"contributions of ranks {_fmt(twice, algo)} twice"
            )
        acc = acc | held
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
    state = _initial(algo)
    for index, step in enumerate(algo.steps):
        where = f"{algo.name}: step {index}"
        if step.rounds < 1:
            raise VerificationError(f"{where}: rounds must be >= 1, got {step.rounds}")
        writes = _reads(algo, step, where, state, logical)
        if capacity is not None:
            over = capacity.overloaded(((s.src, s.dst) for s in step.sends), step.rounds)
            if over:
                c = over[0]
                raise VerificationError(
                    f"{where}: {c.used} chunks over {c.name} exceed its capacity "
                    f"{c.capacity} x {step.rounds} round(s) = {c.capacity * step.rounds}"
                )
        new_state = [dict(s) for s in state]
        for (dst, addr), incoming in writes.items():
            before = state[dst].get(addr, frozenset())
            new_state[dst][addr] = _received(algo, where, dst, addr, before, incoming)
        state = new_state
    return state


def verify(algo: Algorithm, topology: Topology) -> None:
    """Raise :class:`VerificationError` unless ``algo`` implements its collective on ``topology``."""
    coll = algo.collective
    state = final_state(algo, topology)
    if coll.combining:
        for addr, needed in enumerate(coll.contributions):
            posts = set().union(*(coll.chunks[cid].post for cid in needed))
            for r in sorted(posts):
                got = state[r].get(addr, frozenset())
                if got != needed:
                    raise VerificationError(
                        f"{algo.name}: postcondition: rank {r} ends with chunk {addr} reduced over ranks "
                        f"{_fmt(got, algo)}, expected all of {_fmt(needed, algo)}"
                    )
        return
    for cid, chunk in enumerate(coll.chunks):
        for r in sorted(chunk.post):
            if cid not in state[r].get(cid, frozenset()):
                raise VerificationError(f"{algo.name}: postcondition: rank {r} never gets chunk {cid}")

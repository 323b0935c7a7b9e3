"""The scheduled stages between the instruction DAG and the IR.

:class:`ChannelDAG`: every instruction that sends or receives has its channel (local instructions
``cpy``/``re`` have none: any threadblock may run them). :class:`ScheduledDAG`: every instruction
sits in a threadblock (one send peer, one receive peer, one channel) at a position; threadblocks run
their instructions in the DAG's global order, so sends and receives on a connection line up.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property

from codegen.errors import CodegenError
from codegen.instr_dag import InstrDAG

__all__ = ["ChannelDAG", "ScheduledDAG", "TbPlan", "check_fifo"]


def check_fifo(dag: InstrDAG, channel: tuple[int | None, ...], what: str) -> None:
    """Raise unless, on every connection (sender, receiver, channel), receives come in send order."""
    pos = dag.position
    conns: dict[tuple[int, int, int | None], list[tuple[int, int]]] = defaultdict(list)
    for i, ins in enumerate(dag.instrs):
        if ins.send_match is not None:
            r = ins.send_match
            if channel[i] != channel[r]:
                raise CodegenError(
                    f"{what}: instruction {i} ({ins}) and its receive {r} are on different channels"
                )
            conns[(ins.rank, ins.send_to, channel[i])].append((pos[i], pos[r]))
    for (a, b, ch), pairs in sorted(conns.items()):
        pairs.sort()
        for (s1, r1), (s2, r2) in itertools.pairwise(pairs):
            if r1 > r2:
                raise CodegenError(
                    f"{what}: connection {a} -> {b} on channel {ch}: sends at positions {s1} < {s2} "
                    f"are received in the opposite order"
                )


@dataclass(frozen=True)
class ChannelDAG:
    dag: InstrDAG
    channel: tuple[int | None, ...]

    def verify(self) -> None:
        self.dag.verify()
        for i, ins in enumerate(self.dag.instrs):
            comm = ins.type.sends or ins.type.receives
            if comm and (self.channel[i] is None or self.channel[i] < 0):
                raise CodegenError(f"channel DAG: instruction {i} ({ins}) communicates but has no channel")
        check_fifo(self.dag, self.channel, "channel DAG")

    def describe(self) -> str:
        lines = [f"channels of {self.dag.info.name}:"]
        for i in self.dag.order:
            ch = self.channel[i]
            lines.append(f"  {i}: {self.dag.instrs[i]}  ch={'-' if ch is None else ch}")
        return "\n".join(lines)


@dataclass(frozen=True)
class TbPlan:
    """A threadblock: peers, channel and its instructions in execution order."""

    send: int | None
    recv: int | None
    channel: int
    instrs: tuple[int, ...]


@dataclass(frozen=True)
class ScheduledDAG:
    dag: InstrDAG
    threadblocks: tuple[tuple[TbPlan, ...], ...]
    """Per rank, indexed by threadblock id."""

    @cached_property
    def placement(self) -> tuple[tuple[int, int], ...]:
        """``placement[i] = (threadblock id, position)`` of instruction ``i`` on its rank."""
        where: list[tuple[int, int] | None] = [None] * len(self.dag.instrs)
        for tbs in self.threadblocks:
            for t, tb in enumerate(tbs):
                for p, i in enumerate(tb.instrs):
                    where[i] = (t, p)
        missing = [i for i, w in enumerate(where) if w is None]
        if missing:
            raise CodegenError(f"scheduled DAG: instruction {missing[0]} is in no threadblock")
        return tuple(where)  # type: ignore[arg-type]

    def verify(self) -> None:
        """Every instruction in one threadblock of its rank whose peers fit it, at most one
        threadblock per (channel, peer) and direction, program order = global order, FIFO order."""
        dag = self.dag
        dag.verify()
        if len(self.threadblocks) != dag.info.num_ranks:
            raise CodegenError("scheduled DAG: expected one list of threadblocks per rank")
        seen = [0] * len(dag.instrs)
        pos = dag.position
        channel: list[int | None] = [None] * len(dag.instrs)
        for rank, tbs in enumerate(self.threadblocks):
            senders: dict[tuple[int, int], int] = {}
            receivers: dict[tuple[int, int], int] = {}
            for t, tb in enumerate(tbs):
                where = f"scheduled DAG: rank {rank} threadblock {t}"
                for peers, peer in ((senders, tb.send), (receivers, tb.recv)):
                    if peer is not None:
                        if (tb.channel, peer) in peers:
                            raise CodegenError(
                                f"{where}: threadblock {peers[(tb.channel, peer)]} already has peer {peer} "
                                f"on channel {tb.channel} in the same direction"
                            )
                        peers[(tb.channel, peer)] = t
                for p, i in enumerate(tb.instrs):
                    ins = dag.instrs[i]
                    seen[i] += 1
                    channel[i] = tb.channel
                    if ins.rank != rank:
                        raise CodegenError(f"{where}: holds instruction {i} of rank {ins.rank}")
                    if ins.type.sends and ins.send_to != tb.send:
                        raise CodegenError(
                            f"{where}: instruction {i} ({ins}) sends to a peer the threadblock lacks"
                        )
                    if ins.type.receives and ins.recv_from != tb.recv:
                        raise CodegenError(
                            f"{where}: instruction {i} ({ins}) receives from a peer the threadblock lacks"
                        )
                    if p and pos[tb.instrs[p - 1]] > pos[i]:
                        raise CodegenError(f"{where}: steps {p - 1} and {p} are out of the global order")
        if any(c != 1 for c in seen):
            bad = next(i for i, c in enumerate(seen) if c != 1)
            raise CodegenError(f"scheduled DAG: instruction {bad} is in {seen[bad]} threadblocks")
        check_fifo(dag, tuple(channel), "scheduled DAG")

    def describe(self) -> str:
        lines = [f"threadblocks of {self.dag.info.name}:"]
        for rank, tbs in enumerate(self.threadblocks):
            for t, tb in enumerate(tbs):
                lines.append(f"  rank {rank} tb {t} send={tb.send} recv={tb.recv} ch={tb.channel}:")
                lines.extend(f"    {p}: {self.dag.instrs[i]}" for p, i in enumerate(tb.instrs))
        return "\n".join(lines)

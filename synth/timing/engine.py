"""Non-delay list scheduling of transfers on shared edges (the rules: :mod:`synth.timing`).

A feeder hands the engine its whole job graph at once (:class:`Jobs`): each job's transfer (or
none: a receive, a local copy), its priority, and what it waits for as arcs, each giving its
target a ready time some fixed time after the job starts. The engine starts every job that can
start and says when (:class:`Started`). Knowing the graph before anything runs is what lets the
loop run compiled (:mod:`synth.timing.event_loop`): the Algorithm model, the MILP's ordering and
the IR simulator each describe what they time as arrays, and none is called back per start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from synth.timing.event_loop import run_loop

if TYPE_CHECKING:
    from synth.timing.model import Network, Transfer
    from topologies.logical import Edge

__all__ = ["Jobs", "Started", "arc_sources", "arcs_by_source", "run_jobs", "warm_up"]


@dataclass(frozen=True)
class Jobs:
    """A job graph: jobs ``0 .. n - 1``, then *nodes* (ids from ``n`` on) that take no time and
    no link and pass their ready time on as soon as their waits are met (a feeder's shared waits:
    :func:`synth.cost._dependencies`' slot nodes).

    A job or node becomes ready when its ``waits`` arcs have all been counted off (a wait that no
    arc counts off, for a predecessor that never exists, is never met), at the latest of its
    ``ready`` time and what each arc gave it: an arc from a job gives ``start + after``, an arc
    from a node ``ready + after``. Arcs are grouped by source (``arcs_from[i]:arcs_from[i + 1]``)."""

    transfers: Sequence[Transfer]
    """The distinct transfers the jobs make."""
    transfer: np.ndarray
    """Per job, its transfer's index in :attr:`transfers` (-1: it uses no link)."""
    priority: np.ndarray
    """Per job, its priority (smaller first: the tie rule)."""
    waits: np.ndarray
    """Per job, then per node, how many arcs it waits for."""
    ready: np.ndarray
    """Per job, then per node, the earliest it is ready (0.0: as soon as its arcs allow)."""
    arcs_from: np.ndarray
    arc_to: np.ndarray
    arc_after: np.ndarray

    @property
    def count(self) -> int:
        return len(self.transfer)


@dataclass(frozen=True)
class Started:
    """What a run started: each job's start (NaN: never) and place in start order (-1: never),
    and, where recorded, the jobs each ``(edge, server index)`` carried in order."""

    starts: np.ndarray
    order: np.ndarray
    used: dict[tuple[Edge | tuple, int], list[int]] | None = None


def arcs_by_source(source: np.ndarray, target: np.ndarray, after: np.ndarray, size: int) -> tuple[np.ndarray, ...]:
    """:class:`Jobs`' ``(arcs_from, arc_to, arc_after)`` of arcs given in any order, for ``size``
    jobs and nodes (within one source, the order given is kept)."""
    source = np.asarray(source, np.int64)
    order = np.argsort(source, kind="stable")
    start = np.zeros(size + 1, np.int64)
    np.cumsum(np.bincount(source, minlength=size), out=start[1:])
    return start, np.asarray(target, np.int64)[order], np.asarray(after, np.float64)[order]


def arc_sources(arcs_from: np.ndarray) -> np.ndarray:
    """Each arc's source, from :class:`Jobs`' ``arcs_from``: for a feeder that prices its arcs by
    what their source does (a start, an arrival, an end), once per model."""
    return np.repeat(np.arange(len(arcs_from) - 1), np.diff(arcs_from))


def run_jobs(network: Network, jobs: Jobs, *, record: bool = False) -> Started:
    """Run ``jobs`` on ``network`` (every transfer in ``jobs.transfers`` made by it); ``record``:
    keep which jobs each server carried (:attr:`Started.used`)."""
    lengths, paths = _paths(jobs.transfers)
    _check(jobs, paths[1], len(network.servers))
    transfer = np.ascontiguousarray(jobs.transfer, np.int64)
    taken = np.empty((int(lengths[transfer[transfer >= 0]].sum()) if record else 0, 3), np.int64)
    servers = np.array(network.servers, np.int64)
    events = _events_room(jobs.count, servers)
    while True:
        starts, order, done = run_loop(
            np.ascontiguousarray(jobs.priority, np.int64), transfer, *paths, servers,
            float(network.params.tolerance_us),
            np.ascontiguousarray(jobs.arcs_from, np.int64), np.ascontiguousarray(jobs.arc_to, np.int64),
            np.ascontiguousarray(jobs.arc_after, np.float64), jobs.count,
            np.array(jobs.waits, np.int64), np.array(jobs.ready, np.float64),  # copies: used up
            taken, events,
        )  # fmt: skip
        if done:
            break
        events *= 2  # more pending at once than the room given: the run again, with more
    used = None
    if record:
        used = {}
        for job, e, k in taken.tolist():
            used.setdefault((network.edges[e], k), []).append(job)
    return Started(starts, order, used)


def _paths(transfers: Sequence[Transfer]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Each transfer's path length, and the paths as the loop reads them: where each starts, then
    every path's resources and holds, one after the other."""
    holds = [t.path for t in transfers]
    lengths = np.fromiter((len(p) for p in holds), np.int64, len(holds))
    path_start = np.zeros(len(holds) + 1, np.int64)
    np.cumsum(lengths, out=path_start[1:])
    flat = [item for path in holds for item in path]
    path_edge = np.fromiter((e for e, _ in flat), np.int64, len(flat))
    path_hold = np.fromiter((h for _, h in flat), np.float64, len(flat))
    return lengths, (path_start, path_edge, path_hold)


def _events_room(jobs: int, servers: np.ndarray) -> int:
    """Room for the events pending at once: each job's readiness once, and a resource's freeing per
    server (its first server's next free time; a few more where instants fall within the
    tolerance). Where that is short the loop stops and :func:`run_jobs` runs it again with twice."""
    return jobs + 2 * int(servers.sum()) + 64


def _check(jobs: Jobs, path_edge: np.ndarray, resources: int) -> None:
    """Raise ValueError where ``jobs`` is not a graph the loop can run: the compiled loop reads
    its arrays unchecked, so a feeder's mistake would read or write past them."""
    n, size = jobs.count, len(jobs.waits)
    problems = [
        (len(jobs.priority) != n, "a priority per job"),
        (size < n or len(jobs.ready) != size, "waits and ready times for every job, then every node"),
        (len(jobs.arcs_from) != size + 1 or (size and jobs.arcs_from[-1] != len(jobs.arc_to)), "arcs_from over all arcs"),
        (len(jobs.arc_after) != len(jobs.arc_to), "a time per arc"),
        (bool(np.any(np.diff(jobs.arcs_from) < 0)), "arcs_from increasing"),
        (bool(np.any((jobs.arc_to < 0) | (jobs.arc_to >= size))), "arc targets among the jobs and nodes"),
        (bool(np.any((jobs.transfer < -1) | (jobs.transfer >= len(jobs.transfers)))), "transfers among those given"),
        (bool(np.any((path_edge < 0) | (path_edge >= resources))), "paths over the network's resources"),
    ]
    for bad, expected in problems:
        if bad:
            raise ValueError(f"engine: a job graph needs {expected}")


def warm_up() -> None:
    """Compile the event loop now, if no earlier run has (numba keeps it in ``__pycache__`` beside
    its module, or in the user's cache where that is read-only): ``make`` calls this after it
    installs, so that no first simulation pays the compile (about 8 s)."""
    from synth.timing.model import Network
    from topologies.builders import ring

    network = Network(ring(2, 25.0, 0.7))
    none = arcs_by_source([], [], [], 1)
    run_jobs(network, Jobs([network.transfer(0, 1, 1.0)], *np.zeros((4, 1)), *none), record=True)

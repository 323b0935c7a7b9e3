"""The engine's event loop, compiled (numba): :func:`run_loop` runs a feeder's whole job graph
(:class:`synth.timing.engine.Jobs`, as arrays) under the rules of :mod:`synth.timing`.

Why compiled: the loop is the hot path of every modeled time. At 512 ranks an IR simulation starts
a million calls, with hundreds of candidates at an instant; in Python each start cost 7-8 us, so
the four runs of a 512-rank ``xccl compile`` took 25 s. Compiled, the graph is arrays and every
wait is counted off in the loop itself, not in a Python callback.

The loop (non-delay list scheduling, event driven):

- An *event* is a job becoming ready or a resource freeing while jobs wait for it, kept in a heap
  by instant. An instant takes all its events, then decides: its candidates go in the tie rule's
  order, ``(priority, ready time, job)``.
- A candidate starts where every resource of its path has a free server within the tolerance of
  the instant; it takes, on each, the server that frees first (the first such). Otherwise it waits
  in the queue of the resource that frees last (the first such on its path), and that resource's
  freeing becomes an event. Only a queue's head is ever a candidate: when its resource frees, and
  again after a candidate drawn from that queue was decided, while a server is free.
- A start counts the job off its arcs' targets; a target whose last wait this is becomes ready at
  the latest of what its arcs gave it. A target that is a *node* (ids from the number of jobs on)
  takes no time and no link: it hands its ready time on at once, in the same start.

A queue's candidate carries the job's queue generation; a job queued again since (on any resource)
has a new one, so the stale copy is passed over. Per-resource queues are skew heaps threaded
through per-job arrays (a job waits in one queue at a time); the candidates and the events are
binary heaps in arrays sized before the loop, which never reallocates: where more events are
pending at once than the room given, it stops, and the caller runs it again with more.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from synth.compiled import compiled, heap_pop, heap_push

__all__ = ["run_loop"]


@njit(inline="always")
def _first(p1, r1, j1, v1, g1, p2, r2, j2, v2, g2):
    """Candidate 1 goes before candidate 2: priority, ready time, job, then (two copies of one job,
    one stale) the resource it waited on and its queue generation."""
    if p1 != p2:
        return p1 < p2
    if r1 != r2:
        return r1 < r2
    if j1 != j2:
        return j1 < j2
    if v1 != v2:
        return v1 < v2
    return g1 < g2


@njit(inline="always")
def _push_candidate(hp, hr, hj, hv, hg, size, p, r, j, v, g):
    """Add a candidate to the heap ``h*[:size]`` (sift up)."""
    pos = size
    while pos > 0:
        up = (pos - 1) >> 1
        if not _first(p, r, j, v, g, hp[up], hr[up], hj[up], hv[up], hg[up]):
            break
        hp[pos], hr[pos], hj[pos], hv[pos], hg[pos] = hp[up], hr[up], hj[up], hv[up], hg[up]
        pos = up
    hp[pos], hr[pos], hj[pos], hv[pos], hg[pos] = p, r, j, v, g


@njit(inline="always")
def _drop_candidate(hp, hr, hj, hv, hg, size):
    """Remove the top of the heap ``h*[:size]`` (the caller has read it; sift down the last)."""
    n = size - 1
    p, r, j, v, g = hp[n], hr[n], hj[n], hv[n], hg[n]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        c = child + 1
        if c < n and _first(hp[c], hr[c], hj[c], hv[c], hg[c], hp[child], hr[child], hj[child], hv[child], hg[child]):
            child = c
        if not _first(hp[child], hr[child], hj[child], hv[child], hg[child], p, r, j, v, g):
            break
        hp[pos], hr[pos], hj[pos], hv[pos], hg[pos] = hp[child], hr[child], hj[child], hv[child], hg[child]
        pos = child
    if n > 0:
        hp[pos], hr[pos], hj[pos], hv[pos], hg[pos] = p, r, j, v, g


@njit(inline="always")
def _queued_first(a, b, prio, ready):
    """Queued job ``a`` goes before queued job ``b`` (one queue: the same resource)."""
    if prio[a] != prio[b]:
        return prio[a] < prio[b]
    if ready[a] != ready[b]:
        return ready[a] < ready[b]
    return a < b


@njit(inline="always")
def _merge(a, b, left, right, prio, ready):
    """The root of skew heaps ``a`` and ``b`` merged (-1: empty; top-down, children swapped)."""
    if a < 0:
        return b
    if b < 0:
        return a
    if _queued_first(b, a, prio, ready):
        a, b = b, a
    cur = a
    while True:
        nxt = right[cur]
        right[cur] = left[cur]
        if nxt < 0:
            left[cur] = b
            break
        if _queued_first(b, nxt, prio, ready):
            nxt, b = b, nxt
        left[cur] = nxt
        cur = nxt
    return a


@njit(inline="always")
def _take(first, free, server_at, servers, path_start, path_edge, path_hold, t, start, job, taken, ntaken):
    """Transfer ``t`` started by ``job`` at ``start`` takes, on each resource of its path, the
    server that frees first (the first such); where ``taken`` has room, it says which. Returns how
    many servers ``taken`` holds."""
    for k in range(path_start[t], path_start[t + 1]):
        e, end = path_edge[k], start + path_hold[k]
        s = server_at[e]
        if servers[e] > 1:
            for x in range(server_at[e] + 1, server_at[e + 1]):
                if free[x] < free[s]:
                    s = x
            free[s] = end
            end = free[server_at[e]]
            for x in range(server_at[e] + 1, server_at[e + 1]):
                end = min(end, free[x])
        first[e] = end
        if ntaken < len(taken):
            taken[ntaken, 0], taken[ntaken, 1], taken[ntaken, 2] = job, e, s - server_at[e]
            ntaken += 1
    return ntaken


@njit(inline="always")
def _queue(job, e, start, head, left, right, generation, priority, ready, armed, at, what, ne):
    """``job``, blocked until ``start`` by resource ``e``, waits in its queue; the resource's freeing
    then becomes an event (unless one is pending for that instant). Returns the events' count
    (-1: no room for the event)."""
    generation[job] += 1
    left[job], right[job] = -1, -1
    head[e] = _merge(head[e], job, left, right, priority, ready)
    return _arm(e, start, armed, at, what, ne)


@njit(inline="always")
def _arm(e, t, armed, at, what, ne):
    """Resource ``e``'s freeing at ``t`` as an event, unless one is pending for that instant.
    Returns the events' count (-1: no room)."""
    if armed[e] == t:
        return ne
    if ne == len(at):
        return -1
    armed[e] = t
    heap_push(at, what, ne, t, -1 - e)
    return ne + 1


@njit(inline="always")
def _count_off(
    job, start, limit, njobs, arc_start, arc_to, arc_after, waits, ready, priority, stack, hp, hr, hj, hv, hg,
    nc, at, what, ne,
):
    """Count ``job``, started at ``start``, off its arcs' targets (and each node it completes off
    theirs, at once): a job whose last wait this is becomes a candidate of this instant, or an
    event of a later one. Returns the candidates' and the events' counts (events -1: no room)."""
    x, base, ns = job, start, 0
    while True:
        for a in range(arc_start[x], arc_start[x + 1]):
            d = arc_to[a]
            ready[d] = max(ready[d], base + arc_after[a])
            waits[d] -= 1
            if waits[d] != 0:
                continue
            if d >= njobs:
                stack[ns] = d
                ns += 1
            elif ready[d] <= limit:
                _push_candidate(hp, hr, hj, hv, hg, nc, priority[d], ready[d], d, -1, -1)
                nc += 1
            elif ne == len(at):
                return nc, -1
            else:
                heap_push(at, what, ne, ready[d], d)
                ne += 1
        if ns == 0:
            return nc, ne
        ns -= 1
        x = stack[ns]
        base = ready[x]


@compiled  # cached on disk: a process loads it instead of compiling it (about 8 s)
def run_loop(
    priority, transfer, path_start, path_edge, path_hold, servers, tolerance,
    arc_start, arc_to, arc_after, njobs, waits, ready, taken, events,
):
    """Run the job graph (module docstring); ``waits`` and ``ready`` are used up, ``taken`` (rows
    of (job, resource, server), one per server a started job takes, in start order) filled while
    it has room. Returns each job's start (NaN: never), its place in start order (-1: never) and
    whether it ran to the end: False where ``events`` pending at once were too few (the caller
    runs it again with more; a heap that never grows keeps the loop free of reallocations)."""
    nres = len(servers)
    server_at = np.zeros(nres + 1, np.int64)
    for r in range(nres):
        server_at[r + 1] = server_at[r] + servers[r]
    free = np.zeros(server_at[nres], np.float64)  # per server, when it frees
    first = np.zeros(nres, np.float64)  # per resource, when its first server frees
    armed = np.full(nres, np.nan)  # per resource, the instant of its pending freeing event
    head = np.full(nres, -1, np.int64)  # per resource, its queue's root job
    left, right = np.full(njobs, -1, np.int64), np.full(njobs, -1, np.int64)
    generation = np.zeros(njobs, np.int64)  # per job, how often it was queued
    starts, order = np.full(njobs, np.nan), np.full(njobs, -1, np.int64)
    cap = njobs + nres + 1  # a bound on the candidates at one instant
    hp, hr, hj = np.empty(cap, np.int64), np.empty(cap, np.float64), np.empty(cap, np.int64)
    hv, hg = np.empty(cap, np.int64), np.empty(cap, np.int64)
    at, what = np.empty(events, np.float64), np.empty(events, np.int64)
    stack = np.empty(max(1, len(waits) - njobs), np.int64)
    nc, ne, ntaken, started = 0, 0, 0, 0
    for j in range(njobs):
        if waits[j] == 0:
            if ne == events:
                return starts, order, False
            heap_push(at, what, ne, ready[j], j)
            ne += 1
    while ne:
        now = at[0]
        while ne and at[0] == now:  # the instant's events: ready jobs, freed resources' queue heads
            w = heap_pop(at, what, ne)
            ne -= 1
            if w >= 0:
                _push_candidate(hp, hr, hj, hv, hg, nc, priority[w], ready[w], w, -1, -1)
                nc += 1
            else:
                armed[-1 - w] = np.nan
                q = head[-1 - w]
                if q >= 0:
                    _push_candidate(hp, hr, hj, hv, hg, nc, priority[q], ready[q], q, -1 - w, generation[q])
                    nc += 1
        limit = now + tolerance
        while nc:
            job, came, gen = hj[0], hv[0], hg[0]
            _drop_candidate(hp, hr, hj, hv, hg, nc)
            nc -= 1
            go = came < 0 or (head[came] == job and generation[job] == gen)  # else a stale copy
            if go and came >= 0:  # a queue's head: taken off its queue
                head[came] = _merge(left[job], right[job], left, right, priority, ready)
            if go:
                start = max(ready[job], now)
                t = transfer[job]
                if t >= 0:
                    binding = -1
                    for k in range(path_start[t], path_start[t + 1]):
                        if first[path_edge[k]] > start:
                            start, binding = first[path_edge[k]], path_edge[k]
                    if start > limit:  # waits in the queue of the resource that frees last
                        go = False
                        ne = _queue(
                            job, binding, start, head, left, right, generation, priority, ready,
                            armed, at, what, ne,
                        )  # fmt: skip
                    else:
                        ntaken = _take(
                            first, free, server_at, servers, path_start, path_edge, path_hold, t, start,
                            job, taken, ntaken,
                        )  # fmt: skip
            if go:
                starts[job], order[job] = start, started
                started += 1
                nc, ne = _count_off(
                    job, start, limit, njobs, arc_start, arc_to, arc_after, waits, ready, priority,
                    stack, hp, hr, hj, hv, hg, nc, at, what, ne,
                )  # fmt: skip
            if ne >= 0 and came >= 0 and head[came] >= 0:  # the queue it came from offers its next head
                q = head[came]
                if first[came] <= limit:
                    _push_candidate(hp, hr, hj, hv, hg, nc, priority[q], ready[q], q, came, generation[q])
                    nc += 1
                else:
                    ne = _arm(came, first[came], armed, at, what, ne)
            if ne < 0:
                return starts, order, False
    return starts, order, True

"""How large a topology may be, and which link values make sense: checked before anything is built.

A name like ``hypercube:64`` or ``ring:99999999999999999999``, or a file declaring 10**9 ranks,
would otherwise hang or exhaust memory while its graph is built. Sizes are multiplied out from the
name or the file's counts first and refused above the limits, which an environment variable raises.
Link values are kept in a range where every quantity derived from them (times, chunks per round)
stays a finite, non-zero number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.fields import is_integer, is_number
from common.limits import Limit
from topologies.errors import TopologyError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ALPHA_US_MAX",
    "BANDWIDTH_GBPS_RANGE",
    "COUNT_MAX",
    "LINKS",
    "LINKS_ENV",
    "MAX_LINKS",
    "MAX_RANKS",
    "RANKS",
    "RANKS_ENV",
    "alpha_problem",
    "bandwidth_problem",
    "check_links",
    "check_ranks",
    "count_problem",
    "logical_links_bound",
    "max_ranks",
]

MAX_RANKS = 1 << 20
"""1,048,576 ranks: 8x the largest family size in use (``hypercube:17``, 131,072 ranks)."""

MAX_LINKS = 1 << 24
"""16,777,216 directed links, physical or rank-to-rank (each costs a few hundred bytes: several GiB
at the limit); ``hypercube:17`` has 2.2 million, ``torus:300x300`` 360,000."""

RANKS_ENV = "XCCL_MAX_RANKS"
LINKS_ENV = "XCCL_MAX_LINKS"
RANKS = Limit("ranks", MAX_RANKS, RANKS_ENV)
"""Ranks of a topology, and ``ngpus`` of an IR."""
LINKS = Limit("links", MAX_LINKS, LINKS_ENV)

BANDWIDTH_GBPS_RANGE = (1e-3, 1e6)
"""1 MB/s to 1 PB/s per link. Below 1/1000 GB/s the integer capacity model (whose unit is a fraction
of denominator at most 1000) rounds a rate to zero and divides by it; the ratio of the extremes
(1e9) keeps chunks per round within 64-bit integers and every modeled time finite."""

ALPHA_US_MAX = 1e6
"""One second per transfer: far above any interconnect, and low enough that sums of latencies stay finite."""

COUNT_MAX = 1024
"""Parallel links between two vertices (an NVLink bond has at most 18)."""


def max_ranks() -> int:
    """:data:`MAX_RANKS`, or ``XCCL_MAX_RANKS`` where set."""
    return RANKS.value


def check_ranks(where: str, ranks: int) -> None:
    """Refuse more ranks than the limit, naming it and how to raise it."""
    RANKS.check(ranks, where, TopologyError)


def check_links(where: str, links: int, what: str = "links") -> None:
    """Refuse more directed links (``what``: physical or rank-to-rank) than the limit."""
    LINKS.check(links, where, TopologyError, unit=what)


def logical_links_bound(num_ranks: int, tails: np.ndarray, heads: np.ndarray) -> int:
    """An upper bound on the rank-to-rank links of the logical view, from the physical links
    ``tails[i] -> heads[i]`` (vertex ids: ranks below ``num_ranks``, switches above).

    A rank pair is linked directly or through a connected group of switches; every group
    contributes at most ``r * (r - 1)`` pairs for the ``r`` ranks wired to it. A switch joins all its
    ranks to each other (``switch:N`` has N*(N-1) rank pairs from 2N links), so this is checked
    before the view is derived.
    """
    import numpy as np  # the limits load without numpy (the command line starts without it)

    from topologies.numeric import distinct

    n = num_ranks
    tail_rank, head_rank = tails < n, heads < n
    direct = int(np.count_nonzero(tail_rank & head_rank))
    size = int(max(tails.max(initial=n - 1), heads.max(initial=n - 1))) + 1 - n
    parent = list(range(size))  # switches joined by switch-to-switch links (few: no NumPy step)

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    between = ~tail_rank & ~head_rank
    for a, b in zip((tails[between] - n).tolist(), (heads[between] - n).tolist(), strict=True):
        parent[root(a)] = root(b)
    group = np.array([root(v) for v in range(size)], dtype=np.int64)
    attached = tail_rank ^ head_rank
    ranks = np.where(tail_rank, tails, heads)[attached]
    switch = np.where(tail_rank, heads, tails)[attached] - n
    pairs = distinct(group[switch] * max(n, 1) + ranks)  # each (group, rank) once
    _, per_group = np.unique(pairs // max(n, 1), return_counts=True)
    bound = direct + int((per_group * (per_group - 1)).sum())
    return min(bound, num_ranks * (num_ranks - 1))


def bandwidth_problem(value: Any) -> str | None:
    """What a ``bandwidth_GBps`` is expected to be, or None when ``value`` is one."""
    low, high = BANDWIDTH_GBPS_RANGE
    if is_number(value) and low <= value <= high:
        return None
    return f"a number of GB/s from {low:g} to {high:g}"


def alpha_problem(value: Any) -> str | None:
    """What an ``alpha_us`` is expected to be, or None when ``value`` is one."""
    if is_number(value) and 0 <= value <= ALPHA_US_MAX:
        return None
    return f"a number of microseconds from 0 to {ALPHA_US_MAX:g}"


def count_problem(value: Any) -> str | None:
    """What a link ``count`` is expected to be, or None when ``value`` is one."""
    if is_integer(value) and 1 <= value <= COUNT_MAX:
        return None
    return f"an integer from 1 to {COUNT_MAX}"

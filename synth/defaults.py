"""The synthesizers' defaults and fixed choices, in a module that imports nothing: the command line
builds its parser from them without loading z3 or a MILP back end, and the synthesizers read the
same values, so there is one copy of each."""

from __future__ import annotations

__all__ = [
    "ALLREDUCE_METHODS",
    "MILP_STAGE_TIME_LIMIT_S",
    "MILP_TIME_LIMIT_S",
    "PARETO_MAX_CHUNKS",
    "SMT_INSTANCE_TIME_LIMIT_S",
    "SMT_TIME_LIMIT_S",
    "TREES_COLLECTIVES",
    "TREES_TIME_LIMIT_S",
]

SMT_TIME_LIMIT_S = 600.0
"""Wall time of a whole SMT run (one instance, a least-steps search or a front walk) unless told
otherwise; what was found by then is kept."""
SMT_INSTANCE_TIME_LIMIT_S = 60.0
"""Within a search or walk, one instance gives up after this long (unknown) and the search goes on,
so that one hard instance cannot take the whole run."""
PARETO_MAX_CHUNKS = 8
"""Enough for the bandwidth-optimal DGX-1 allgather (C = 6); larger C grows every instance."""
ALLREDUCE_METHODS = ("auto", "compose", "direct")
"""``auto``: compose when the chunks per rank are a multiple of the ranks, else direct."""

MILP_TIME_LIMIT_S = 600.0
"""Wall time of a whole MILP synthesis: once it is spent no further chunkup is tried and no solve
starts; the best verified result so far is returned (the ordering of the chosen routes and the
verification still run after it: seconds at most, on 40,000 sends)."""
MILP_STAGE_TIME_LIMIT_S = 30.0
"""Each MILP or LP solve stops after this long (or when the whole time is spent) with its best
solution."""

TREES_COLLECTIVES = ("allgather", "reducescatter", "allreduce")
"""What tree packing synthesizes (the others have no spanning-tree form)."""
TREES_TIME_LIMIT_S = 600.0
"""Wall time of a tree-packing synthesis's searches in all; each then keeps its best packing (valid,
with its gap to the proven bound)."""

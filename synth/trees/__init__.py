"""Tree-packing synthesis (ForestColl's idea): bandwidth-optimal allgather, reducescatter and
allreduce from spanning trees packed at the rate the topology's cuts allow, solved under the
topology's symmetry and lifted back (docs/trees.md).

- :mod:`~synth.trees.symmetry`: the group of rank permutations a packing is solved under;
- :mod:`~synth.trees.arborescence`: cheapest spanning arborescences (Chu-Liu/Edmonds);
- :mod:`~synth.trees.packing`: the fractional packing, by column generation, with its dual bound;
- :mod:`~synth.trees.schedule`: the packing as a pipelined allgather Algorithm;
- :mod:`~synth.trees.synthesis`: the front end, through the shared reductions.
"""

from synth.trees.synthesis import TreesResult, synthesize

__all__ = ["TreesResult", "synthesize"]

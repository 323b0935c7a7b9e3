"""How closely the compiled IR's time (``runtime.sim``) follows its Algorithm's (``synth.cost.simulate``)
at a bandwidth-bound size: one tolerance, stated here and in docs/runtime.md ("Agreement")."""

TOLERANCE = 0.02
"""The compiled IR of the SMT DGX-1 fronts, the ring baselines and the shipped MILP schedules of
NDv2 x2 and DGX-A100 x2 takes within 2% of its Algorithm's time at 1 GiB."""

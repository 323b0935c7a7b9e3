"""How closely the compiled IR's time (``runtime.sim``) follows its Algorithm's (``synth.cost.simulate``)
at a bandwidth-bound size (1 GiB): the tolerances, stated here and in docs/runtime.md ("Agreement")."""

TOLERANCE = 0.02
"""The compiled IR of the SMT DGX-1 allgather front, the ring baselines (and the ring alltoalls on
fully-connected:4, switch:6 and DGX-A100 x2) and the shipped MILP schedules of NDv2 x2 and DGX-A100 x2
(the demo's two columns among them) takes within 2% of its Algorithm's time at 1 GiB (the
allgather front and the rings also at 1 MiB)."""

REDUCING_TOLERANCE = 0.10
"""The SMT DGX-1 allreduce front: within 10% at 1 GiB (1.00x to 1.07x, depending on the solution z3
returns: the compiled reductions' channels and FIFOs, not the timing model)."""

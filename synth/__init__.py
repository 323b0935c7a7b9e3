"""Synthesis: collectives, the Algorithm and its verifier, cost models, bounds, baselines, SMT and MILP."""

"""Lower bounds: fewest steps, fewest rounds per chunk, and the time at a size (alpha-beta model)."""

from synth.bounds.bandwidth import bandwidth_bound_method, bandwidth_time_us, rounds_per_chunk_bound
from synth.bounds.latency import latency_time_us, lower_bound_us, steps_lower_bound

__all__ = [
    "bandwidth_bound_method",
    "bandwidth_time_us",
    "latency_time_us",
    "lower_bound_us",
    "rounds_per_chunk_bound",
    "steps_lower_bound",
]

"""Size limits checked before work starts, so that a huge request is refused, not run out of memory.

Each limit is stated next to the code it protects (``synth.collectives.MAX_CHUNKS``,
``synth.smt.synthesizer.MAX_SENDS``, ...); every one can be raised with an environment variable,
read here, and every refusal names the limit and that variable.
"""

from __future__ import annotations

import os

from synth.errors import InfeasibleError

__all__ = ["LimitError", "check_limit", "limit"]


class LimitError(InfeasibleError):
    """A request beyond a size limit (the message names the limit and how to raise it)."""


def limit(default: int, env: str) -> int:
    """``default``, or the positive integer in the environment variable ``env``."""
    text = os.environ.get(env, "").strip().replace("_", "")
    return int(text) if text.isdigit() and int(text) > 0 else default


def check_limit(what: str, value: int, default: int, env: str) -> None:
    """Raise :class:`LimitError` when ``value`` is above the limit (``default`` unless ``env`` raises it)."""
    bound = limit(default, env)
    if value > bound:
        raise LimitError(f"{what}: {value:,} is above the limit of {bound:,} (set {env} to raise it)")

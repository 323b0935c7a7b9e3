"""The shipped DSL programs, run as ``example:NAME`` (a module of their own, light enough for the
command line to list them in its help without loading the DSL)."""

from __future__ import annotations

from importlib import resources

__all__ = ["EXAMPLES_PREFIX", "example_names"]

EXAMPLES_PREFIX = "example:"


def example_names() -> list[str]:
    """The shipped examples, by name."""
    folder = resources.files("codegen") / "examples"
    return sorted(
        p.name[:-3] for p in folder.iterdir() if p.name.endswith(".py") and not p.name.startswith("_")
    )

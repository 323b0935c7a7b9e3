"""Errors of synthesis: impossible requests, solver limits, algorithms that fail verification."""

from __future__ import annotations

from common.errors import XcclError

__all__ = ["AlgorithmFormatError", "InfeasibleError", "SolverTimeout", "VerificationError"]


class InfeasibleError(XcclError):
    """No algorithm exists for the request (or none within the given limits)."""


class SolverTimeout(XcclError):
    """A solver hit its time limit before it found or refuted an algorithm."""


class VerificationError(XcclError):
    """An algorithm does not implement its collective on the topology; the message names the step."""


class AlgorithmFormatError(XcclError):
    """An algorithm file is malformed; the message names the file and field."""

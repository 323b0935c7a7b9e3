"""Errors of code generation: bad DSL programs, IRs the runtimes would reject, malformed files.

All derive from :class:`common.errors.XcclError`, so the command line prints them on one line
and exits with status 2. Messages name the file or program, the field or op, and what was expected.
"""

from __future__ import annotations

from common.errors import XcclError

__all__ = ["CodegenError", "DslError", "IRCheckError", "IRFormatError", "NoLayoutError", "XmlFormatError"]


class CodegenError(XcclError):
    """A program or algorithm cannot be compiled (e.g. it needs more channels than exist)."""


class NoLayoutError(CodegenError):
    """No threadblock layout the compiler tries fits the runtime. ``threadblocks``: what the last
    layout breaks includes threadblocks per rank or per channel, or the ids of those waited on,
    which more channels do not cure (only steps per threadblock do)."""

    def __init__(self, message: str, threadblocks: bool) -> None:
        super().__init__(message)
        self.threadblocks = threadblocks


class DslError(CodegenError):
    """A DSL program does something impossible: an unknown rank or buffer, no link, an empty slot."""


class IRCheckError(CodegenError):
    """An IR breaks a rule the runtime relies on; the message names rank, threadblock and step."""


class XmlFormatError(CodegenError):
    """An MSCCL XML file is malformed; the message names the file and line."""


class IRFormatError(CodegenError):
    """A JSON IR file is malformed; the message names the file and field."""

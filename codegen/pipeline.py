"""Run a pipeline of passes: optionally verify the stage after each, print it, time them.

``run_pipeline(stage, pipeline, options)`` applies the named passes in order. With ``verify_each``
the invariants of every intermediate stage are checked (``verify()`` of a DAG stage, the static
checker without its final rules for an IR), and a failure names the pass that broke them.
``print_after`` keeps a text dump of the stage after the named passes; timings are always kept.
Nothing here prints: the command line shows what it is asked to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from codegen.check import check_ir
from codegen.errors import CodegenError
from codegen.ir import IR
from codegen.passes import DEFAULT_PIPELINE, PASSES
from codegen.rules import MAX_CHANNELS, MAX_COUNT

__all__ = ["CompileOptions", "PassRecord", "PipelineResult", "describe_stage", "run_pipeline"]


@dataclass(frozen=True)
class CompileOptions:
    """Options passes take by name (see ``Pass.options``)."""

    instances: int = 1
    channels: int = 1
    max_count: int = MAX_COUNT
    max_channels: int = MAX_CHANNELS
    bounded_fifos: bool = True
    drain_fifos: bool = False
    """With ``bounded_fifos``, a full connection's oldest calls are received before a send
    overtakes them (``order_by_critical_path``): the compiler's compact layouts, which pair a
    connection's sends and receives in one threadblock."""
    port_order: bool = False
    """Each send of a timed program waits for the one before it through its port (``order_ports``)."""
    port_overlap: bool = False
    """With ``port_order``, chain only the sends the schedule does not overlap (``order_ports``)."""
    compact: int = 0
    """How hard threadblocks are kept few, where the default layout (0) exceeds the runtime's: 1
    spreads each connection over its share of the channels only (``assign_channels``), 2 also
    lets a timed program's sends and receives share threadblocks, busiest with busiest, 3 busiest
    with idlest (fewer steps per threadblock; ``assign_threadblocks``)."""
    window: float = 0.02
    """Aggregation's time window in a timed program (``aggregate_chunks``), a fraction of its span."""
    max_nodes: int | None = None
    """The XML reader's elements per rank the IR is for (``fit_xml_reader``; None: no XML runtime)."""
    reader_refused: bool = False
    """The compile at ``window`` was refused for the XML reader's elements: ``fit_xml_reader`` widens
    the window whatever its count says (the driver's second compile, ``codegen.compiler``)."""


@dataclass(frozen=True)
class PassRecord:
    name: str
    seconds: float
    dump: str | None = None


@dataclass(frozen=True)
class PipelineResult:
    result: object
    records: tuple[PassRecord, ...]
    window: float | None = None
    """Where ``fit_xml_reader`` widened the aggregation window, the one the result was merged over
    (``ProgramInfo.merge_window``; set by ``codegen.compiler.run_compiler``); None: the compile's own."""


def describe_stage(stage: object) -> str:
    return stage.describe() if hasattr(stage, "describe") else repr(stage)


def _verify(stage: object, after: str) -> None:
    try:
        if isinstance(stage, IR):
            check_ir(stage, final=False)
        elif hasattr(stage, "verify"):
            stage.verify()
    except CodegenError as exc:
        raise CodegenError(f"after pass {after}: {exc}") from None


def run_pipeline(
    stage: object,
    pipeline: tuple[str, ...] = DEFAULT_PIPELINE,
    options: CompileOptions = CompileOptions(),
    verify_each: bool = False,
    print_after: tuple[str, ...] = (),
) -> PipelineResult:
    """Apply ``pipeline`` (pass names) to ``stage``."""
    unknown = [p for p in (*pipeline, *print_after) if p not in PASSES]
    if unknown:
        raise CodegenError(f"unknown pass {unknown[0]!r}: expected one of {', '.join(PASSES)}")
    records = []
    for name in pipeline:
        p = PASSES[name]
        if not isinstance(stage, p.takes):
            raise CodegenError(
                f"pass {name} takes a {p.takes.__name__}, the pipeline gives it a {type(stage).__name__}"
            )
        kwargs = {opt: getattr(options, opt) for opt in p.options}
        start = time.perf_counter()
        stage = p.run(stage, **kwargs)
        seconds = time.perf_counter() - start
        if verify_each:
            _verify(stage, name)
        records.append(PassRecord(name, seconds, describe_stage(stage) if name in print_after else None))
    return PipelineResult(stage, tuple(records))

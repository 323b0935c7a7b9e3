"""The compiler passes, one per module, and the registry the pipeline and the CLI are built from.

Each pass is a pure function from one stage to the next (or the same) stage type:
``ChunkDAG -> InstrDAG -> ChannelDAG -> ScheduledDAG -> IR``. ``options`` names the compile
options (fields of :class:`codegen.pipeline.CompileOptions`) a pass takes as keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codegen.chunk_dag import ChunkDAG
from codegen.instr_dag import InstrDAG
from codegen.ir import IR
from codegen.passes.aggregate_chunks import aggregate_chunks
from codegen.passes.assign_channels import assign_channels
from codegen.passes.assign_threadblocks import assign_threadblocks
from codegen.passes.expand_instructions import expand_instructions
from codegen.passes.fit_xml_reader import fit_xml_reader
from codegen.passes.fold_deps_into_nops import fold_deps_into_nops
from codegen.passes.fuse_recv_send import fuse_recv_send
from codegen.passes.insert_dependencies import insert_dependencies
from codegen.passes.mark_has_dep import mark_has_dep
from codegen.passes.order_by_critical_path import order_by_critical_path
from codegen.passes.order_ports import order_ports
from codegen.passes.replicate_instances import replicate_instances
from codegen.passes.size_buffers import size_buffers
from codegen.schedule import ChannelDAG, ScheduledDAG

__all__ = ["DEFAULT_PIPELINE", "PASSES", "Pass"]


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable
    takes: type
    gives: type
    options: tuple[str, ...] = ()

    @property
    def doc(self) -> str:
        return (self.run.__doc__ or "").strip().splitlines()[0]


PASSES: dict[str, Pass] = {
    p.name: p
    for p in (
        Pass("replicate_instances", replicate_instances, ChunkDAG, ChunkDAG, ("instances",)),
        Pass("expand_instructions", expand_instructions, ChunkDAG, InstrDAG),
        Pass("aggregate_chunks", aggregate_chunks, InstrDAG, InstrDAG, ("max_count", "window")),
        Pass("fit_xml_reader", fit_xml_reader, InstrDAG, InstrDAG, ("max_count", "window", "max_nodes", "reader_refused")),
        Pass("fuse_recv_send", fuse_recv_send, InstrDAG, InstrDAG),
        Pass("order_by_critical_path", order_by_critical_path, InstrDAG, InstrDAG, ("bounded_fifos", "drain_fifos")),
        Pass("order_ports", order_ports, InstrDAG, InstrDAG, ("port_order", "port_overlap")),
        Pass("assign_channels", assign_channels, InstrDAG, ChannelDAG, ("channels", "max_channels", "compact")),
        Pass("assign_threadblocks", assign_threadblocks, ChannelDAG, ScheduledDAG, ("compact",)),
        Pass("insert_dependencies", insert_dependencies, ScheduledDAG, IR),
        Pass("fold_deps_into_nops", fold_deps_into_nops, IR, IR),
        Pass("mark_has_dep", mark_has_dep, IR, IR),
        Pass("size_buffers", size_buffers, IR, IR),
    )
}

DEFAULT_PIPELINE: tuple[str, ...] = tuple(PASSES)
"""Every pass, in the order above."""

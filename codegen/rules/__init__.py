"""The one set of rules: what an IR may contain and what each runtime accepts of it.

Everything that judges an IR asks here, and nothing else encodes a rule: the static checker
(:mod:`codegen.check`, which adds the flow of the connections: matched counts, no deadlock), the
XML reader and writer, the runtime loader (:mod:`runtime.program`), the compiler passes that keep
within a runtime's limits, and every exporter to come. The parts:

- :mod:`~codegen.rules.dialects`: the table of runtimes (:data:`DIALECTS`), numbers and choices
  only: steps per threadblock, threadblocks, channels, counts, dependencies, buffers, collectives,
  spellings, selection windows. A new runtime (an MSCCL++ plan, a torch executor) is one more
  entry there, read by the rules below; not a new module of checks.
- :mod:`~codegen.rules.structure`: what every IR must satisfy, whichever runtime runs it.
- :mod:`~codegen.rules.runtime`: what a runtime accepts, read from its entry, and how its parser
  reads a threadblock's steps (nops folded, ``re`` chained: :func:`fold_steps`).
- :mod:`~codegen.rules.xml_file`: the limits of the runtimes' XML reader, and what an XML file
  says beyond its IR.
"""

from __future__ import annotations

from codegen.ir import IR
from codegen.rules.dialects import (
    DIALECTS,
    MAX_BUFFER_CHUNKS,
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_DEP_THREADBLOCK,
    MAX_PEERS_PER_CHANNEL,
    MAX_REDUCE_FUSION,
    Dialect,
    PlanSpelling,
    XmlSpelling,
    get_dialect,
)
from codegen.rules.problem import Problem
from codegen.rules.runtime import (
    Folded,
    bound_problems,
    dialect_problems,
    empty_grid_problems,
    fold_steps,
    layout_problems,
    machine_problems,
    placed_problems,
    reduction_problems,
    runs_alone,
)
from codegen.rules.structure import (
    Sizes,
    buffer_sizes,
    chunk_factor,
    collective_problems,
    connections,
    declared_sizes,
    header_problems,
    ranks_in_order,
    structure_problems,
    threadblock_problems,
)
from codegen.rules.xml_file import (
    MAX_ATTRIBUTES,
    MAX_CHILDREN,
    MAX_NAME,
    MAX_NODES,
    MAX_VALUE,
    file_dialect,
    file_problems,
    load_elements,
    strtol,
    unlimited_window_problems,
    xml_problems,
)

__all__ = [
    "DIALECTS",
    "MAX_ATTRIBUTES",
    "MAX_BUFFER_CHUNKS",
    "MAX_CHANNELS",
    "MAX_CHILDREN",
    "MAX_COUNT",
    "MAX_DEP_THREADBLOCK",
    "MAX_NAME",
    "MAX_NODES",
    "MAX_PEERS_PER_CHANNEL",
    "MAX_REDUCE_FUSION",
    "MAX_VALUE",
    "Dialect",
    "Folded",
    "PlanSpelling",
    "Problem",
    "Sizes",
    "XmlSpelling",
    "bound_problems",
    "buffer_sizes",
    "chunk_factor",
    "collective_problems",
    "connections",
    "declared_sizes",
    "dialect_problems",
    "empty_grid_problems",
    "file_dialect",
    "file_problems",
    "fold_steps",
    "get_dialect",
    "header_problems",
    "layout_problems",
    "load_elements",
    "load_problems",
    "machine_problems",
    "placed_problems",
    "ranks_in_order",
    "reduction_problems",
    "runs_alone",
    "strtol",
    "structure_problems",
    "threadblock_problems",
    "unlimited_window_problems",
    "xml_problems",
]


def load_problems(ir: IR, sizes: Sizes) -> list[Problem]:
    """What a runtime refuses when it loads ``ir``, given the buffers it really has (``sizes``,
    per rank): the structure (ranks in order, threadblocks, peers, connections, ops, operands,
    dependencies) and an empty grid. What the flow of the connections needs the execution finds."""
    found = header_problems(ir)
    if not ranks_in_order(ir):
        return found
    return [*found, *empty_grid_problems(ir), *threadblock_problems(ir, sizes)]

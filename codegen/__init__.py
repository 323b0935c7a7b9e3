"""Code generation: the chunk DSL, the compiler passes, the IR and its MSCCL XML and JSON forms.

The functions most callers need:

- :func:`compile_algorithm` (``Algorithm -> IR``) and :func:`compile_program` (``ChunkProgram -> IR``),
  both statically checked for a target dialect (``"azure"`` by default, ``None`` for none);
- :func:`load_ir` / :func:`read_ir` (MSCCL XML of either dialect or our JSON -> IR),
  :func:`write_ir` / :func:`save_ir` (IR -> text or file, formats in :data:`FORMATS`);
- :func:`check_ir` / :func:`find_problems`, the static checker, asking the one set of rules on
  what an IR may contain and what each runtime accepts (:mod:`codegen.rules`); :func:`check_result` /
  :func:`find_wrong_result`, what an IR computes (symbolic execution);
- :class:`ChunkProgram` and :func:`chunk`, the DSL; :func:`custom_collective` states the result of a
  schedule that is none of the named collectives; :func:`load_program` loads a DSL file.

Names are imported on first use, so that a small module (:mod:`codegen.rules`,
:mod:`codegen.protocols`) loads alone: the command line builds its choices from them.
"""

from __future__ import annotations

from common.lazy import lazy_exports

__all__ = [
    "DEFAULT_PIPELINE",
    "DIALECTS",
    "FORMATS",
    "IR",
    "PASSES",
    "PROTOCOLS",
    "Buffer",
    "ChunkProgram",
    "ChunkRef",
    "CodegenError",
    "Dep",
    "Dialect",
    "DslError",
    "Gpu",
    "IRCheckError",
    "IRFormatError",
    "Op",
    "OpType",
    "Problem",
    "Ref",
    "Threadblock",
    "WrongSlot",
    "XmlFormatError",
    "check_ir",
    "check_result",
    "chunk",
    "compile_algorithm",
    "compile_program",
    "current_program",
    "custom_collective",
    "example_names",
    "find_deadlock",
    "find_problems",
    "find_wrong_result",
    "load_ir",
    "load_program",
    "lower_algorithm",
    "read_ir",
    "read_ir_json",
    "read_xml",
    "run_compiler",
    "save_ir",
    "write_ir",
    "write_ir_json",
    "write_xml",
]

_HOME = {
    "Problem": "codegen.rules",
    "check_ir": "codegen.check",
    "find_deadlock": "codegen.check",
    "find_problems": "codegen.check",
    "check_result": "codegen.semantics",
    "find_wrong_result": "codegen.semantics",
    "compile_algorithm": "codegen.compiler",
    "compile_program": "codegen.compiler",
    "run_compiler": "codegen.compiler",
    "DIALECTS": "codegen.rules",
    "Dialect": "codegen.rules",
    "ChunkRef": "codegen.dsl",
    "PROTOCOLS": "codegen.protocols",
    "ChunkProgram": "codegen.dsl",
    "WrongSlot": "codegen.dsl",
    "chunk": "codegen.dsl",
    "current_program": "codegen.dsl",
    "custom_collective": "codegen.custom",
    "CodegenError": "codegen.errors",
    "DslError": "codegen.errors",
    "IRCheckError": "codegen.errors",
    "IRFormatError": "codegen.errors",
    "XmlFormatError": "codegen.errors",
    "FORMATS": "codegen.formats",
    "load_ir": "codegen.formats",
    "read_ir": "codegen.formats",
    "save_ir": "codegen.formats",
    "write_ir": "codegen.formats",
    "read_ir_json": "codegen.formats.json_ir",
    "write_ir_json": "codegen.formats.json_ir",
    "read_xml": "codegen.formats.xml_reader",
    "write_xml": "codegen.formats.xml_writer",
    "Buffer": "codegen.ir",
    "Dep": "codegen.ir",
    "Gpu": "codegen.ir",
    "IR": "codegen.ir",
    "Op": "codegen.ir",
    "OpType": "codegen.ir",
    "Ref": "codegen.ir",
    "Threadblock": "codegen.ir",
    "example_names": "codegen.loader",
    "load_program": "codegen.loader",
    "lower_algorithm": "codegen.lower",
    "DEFAULT_PIPELINE": "codegen.passes",
    "PASSES": "codegen.passes",
}
"""The module that defines each public name."""


__getattr__, __dir__ = lazy_exports(__name__, _HOME)

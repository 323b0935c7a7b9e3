"""Code generation: the chunk DSL, the compiler passes, the IR and its MSCCL XML and JSON forms.

The functions most callers need:

- :func:`compile_algorithm` (``Algorithm -> IR``) and :func:`compile_program` (``Program -> IR``),
  both statically checked for a target dialect (``"azure"`` by default, ``None`` for none);
- :func:`load_ir` / :func:`read_ir` (MSCCL XML of either dialect or our JSON -> IR),
  :func:`write_ir` / :func:`save_ir` (IR -> text or file, formats in :data:`FORMATS`);
- :func:`check_ir` / :func:`find_problems`, the static checker;
- :class:`Program` and :func:`chunk`, the DSL; :func:`load_program` loads a DSL file.
"""

from codegen.check import Problem, check_ir, find_deadlock, find_problems
from codegen.compiler import compile_algorithm, compile_program, run_compiler
from codegen.dialects import DIALECTS, Dialect
from codegen.dsl import PROTOCOLS, ChunkRef, Program, WrongSlot, chunk, current_program
from codegen.errors import CodegenError, DslError, IRCheckError, IRFormatError, XmlFormatError
from codegen.formats import FORMATS, load_ir, read_ir, save_ir, write_ir
from codegen.formats.json_ir import read_ir_json, write_ir_json
from codegen.formats.xml_reader import read_xml
from codegen.formats.xml_writer import write_xml
from codegen.ir import IR, Buffer, Dep, Gpu, Op, OpType, Ref, Threadblock
from codegen.loader import example_names, load_program
from codegen.lower import lower_algorithm
from codegen.passes import DEFAULT_PIPELINE, PASSES

__all__ = [
    "DEFAULT_PIPELINE",
    "DIALECTS",
    "FORMATS",
    "IR",
    "PASSES",
    "PROTOCOLS",
    "Buffer",
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
    "Program",
    "Ref",
    "Threadblock",
    "WrongSlot",
    "XmlFormatError",
    "check_ir",
    "chunk",
    "compile_algorithm",
    "compile_program",
    "current_program",
    "example_names",
    "find_deadlock",
    "find_problems",
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

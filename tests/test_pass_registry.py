"""The pass registry is honest: every pass has a docstring and a test file of its name, and the
default pipeline's stages chain from the chunk DAG to the IR."""

from __future__ import annotations

from pathlib import Path

from codegen.chunk_dag import ChunkDAG
from codegen.ir import IR
from codegen.passes import DEFAULT_PIPELINE, PASSES
from xccl.cli.main import build_parser


def test_every_pass_has_a_doc_and_its_own_test_file():
    here = Path(__file__).parent
    for name, p in PASSES.items():
        assert p.name == name and p.run.__name__ == name
        assert p.doc, name
        assert (here / f"test_{name}.py").is_file(), f"no tests/test_{name}.py"
        assert Path(p.run.__code__.co_filename).name == f"{name}.py"


def test_the_default_pipeline_chains_its_stages():
    stage = ChunkDAG
    for name in DEFAULT_PIPELINE:
        assert PASSES[name].takes is stage, name
        stage = PASSES[name].gives
    assert stage is IR


def test_the_cli_offers_every_pass_to_print_after():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["compile"]
    action = next(a for a in sub._actions if a.dest == "print_after")
    assert list(action.choices) == list(PASSES)

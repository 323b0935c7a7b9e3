"""MSCCL++ execution plans (``xccl compile --format mscclpp``), each judged by the independent
validator (``mscclpp_validator``: reads only the JSON; structure, limits, channel pairing,
signal/wait balance, happens-before over two launches, and a NumPy run against the collective's
result): every shipped baseline and every example that compiles for MSCCL++, SMT and MILP
schedules, all at 8 ranks; plans broken on purpose are rejected; what the executor cannot do is
refused with one line."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import assert_one_line_error
from executor_suite import EXAMPLE_PARAMS

from codegen.compiler import compile_algorithm, compile_program
from codegen.errors import CodegenError
from codegen.formats import write_ir
from codegen.formats.mscclpp_validator import violations
from codegen.loader import example_names, load_program
from codegen.rules import DIALECTS
from synth.algorithm import Algorithm
from synth.baselines import BASELINES, BaselineError, applies, default_chunks, make_baseline
from synth.collectives import COLLECTIVES, make_collective
from topologies import load

HERE = Path(__file__).parent
PLAN = DIALECTS["mscclpp"]
EIGHT = ("dgx1", "fully-connected:8")
"""8-rank machines: DGX-1 (hybrid cube mesh), and one where every pair is linked (``direct``)."""
FRONTS = sorted((HERE / "data" / "dgx1-fronts").glob("*.json"))


def _baseline_cases() -> list[tuple[str, str, str, bool]]:
    """(topology, kind, collective, in place) for each baseline kind and collective it builds, on
    the first 8-rank machine where it does; both placements where the collective has two."""
    out = []
    for kind in BASELINES:
        for coll in COLLECTIVES:
            if not applies(kind, coll):
                continue
            for name in EIGHT:
                try:
                    _baseline(name, kind, coll)
                except BaselineError:
                    continue
                out += [(name, kind, coll, inplace) for inplace in ((False,) if coll == "alltoall" else (False, True))]
                break
    return out


def _baseline(name: str, kind: str, coll: str):
    topo = load(name)
    return make_baseline(kind, topo, make_collective(coll, 8, default_chunks(kind, coll, 8, topo))), topo


CASES = _baseline_cases()


def _accepted(text: str) -> dict:
    found = violations(text)
    assert found == [], "\n".join(found)
    return json.loads(text)


def test_every_baseline_kind_has_an_8_rank_case_except_the_multi_machine_one():
    kinds = {kind for _, kind, _, _ in CASES}
    assert kinds == set(BASELINES) - {"hierarchical"}  # hierarchical needs several machines
    assert {coll for _, _, coll, _ in CASES} == set(COLLECTIVES)


@pytest.mark.parametrize(
    ("topology", "kind", "coll", "inplace"), CASES, ids=["-".join(map(str, c)) for c in CASES]
)
def test_baseline_plan_is_accepted_by_the_validator(topology, kind, coll, inplace):
    algo, topo = _baseline(topology, kind, coll)
    ir = compile_algorithm(algo, topo, inplace=inplace, dialect="mscclpp")
    plan = _accepted(write_ir(ir, "mscclpp"))
    assert plan["inplace"] is (inplace and coll != "alltoall")
    assert len(plan["gpus"]) == 8
    assert max(len(tb["ops"]) for g in plan["gpus"] for tb in g["threadblocks"]) <= PLAN.plan.max_ops


def _examples() -> list[str]:
    return [n for n in example_names() if n in EXAMPLE_PARAMS]


@pytest.mark.parametrize("name", _examples())
def test_example_plan_is_accepted_or_refused_in_one_line(name):
    """At 8 ranks where the example takes a rank count; the multi-machine ones (16 ranks) must be
    refused: a plan's memory channels join GPUs of one machine only."""
    params = dict(EXAMPLE_PARAMS[name])
    if "num_ranks" in params:
        params["num_ranks"] = 8
    prog = load_program(f"example:{name}", params)
    ir = compile_program(prog, dialect="mscclpp")
    if prog.topology is not None and prog.topology.num_machines > 1:
        with pytest.raises(CodegenError, match="one machine"):
            write_ir(ir, "mscclpp", topology=prog.topology)
        return
    _accepted(write_ir(ir, "mscclpp"))


@pytest.mark.parametrize("path", FRONTS, ids=[p.stem for p in FRONTS])
def test_smt_schedule_plan_is_accepted(path):
    """Stored SMT results on DGX-1 (z3's answer depends on what ran before it in a process)."""
    algo = Algorithm.load(path)
    topo = load("dgx1")
    _accepted(write_ir(compile_algorithm(algo, topo, dialect="mscclpp"), "mscclpp"))


@pytest.mark.parametrize("coll", ["allgather", pytest.param("reducescatter", marks=pytest.mark.slow)])
def test_milp_schedule_plan_is_accepted(coll):
    """MILP schedules are large (some 10,000 ops for allgather): one random run of the interpreter
    (the happens-before check already covers every interleaving); reducescatter takes ~15 s."""
    from sketches import Sketch
    from synth.milp import synthesize

    topo = load("dgx1")
    algo = synthesize(topo, coll, Sketch("plain"), 1 << 20).algorithm
    text = write_ir(compile_algorithm(algo, topo, dialect="mscclpp"), "mscclpp")
    assert violations(text, seeds=(0,)) == []


# -- the validator rejects broken plans ------------------------------------------------------------


@pytest.fixture(scope="module")
def ring_allreduce() -> dict:
    algo, topo = _baseline("dgx1", "ring", "allreduce")
    return json.loads(write_ir(compile_algorithm(algo, topo, dialect="mscclpp"), "mscclpp"))


def _ops(plan: dict, rank: int = 0, tb: int = 0) -> list[dict]:
    return plan["gpus"][rank]["threadblocks"][tb]["ops"]


def _first(ops: list[dict], name: str) -> int:
    return next(k for k, op in enumerate(ops) if op["name"] == name)


def _broken(plan: dict, edit) -> list[str]:
    copy = json.loads(json.dumps(plan))
    edit(copy)
    return violations(json.dumps(copy))


def test_the_unbroken_plan_is_accepted(ring_allreduce):
    assert violations(json.dumps(ring_allreduce)) == []


def test_a_dropped_signal_is_an_unbalanced_channel(ring_allreduce):
    found = _broken(ring_allreduce, lambda p: _ops(p).pop(_first(_ops(p), "signal")))
    assert any("signal(s) reach it per launch" in f for f in found), found


def test_a_dropped_wait_is_an_unbalanced_channel(ring_allreduce):
    found = _broken(ring_allreduce, lambda p: _ops(p, 3).pop(_first(_ops(p, 3), "wait")))
    assert any("wait(s)" in f and "rank 3" in f for f in found), found


def test_a_swapped_buffer_is_a_wrong_result(ring_allreduce):
    """The first put writes its chunk into the peer's next slot instead of its own."""

    def swap(p):
        put = _ops(p)[_first(_ops(p), "put")]
        put["dst_buff"][0]["index"] += 1

    found = _broken(ring_allreduce, swap)
    assert found and any("race" in f or "wrong result" in f for f in found), found


def test_a_copy_from_the_wrong_buffer_is_a_wrong_result(ring_allreduce):
    def swap(p):
        copy = next(op for tb in p["gpus"][2]["threadblocks"] for op in tb["ops"] if op["name"] == "copy")
        copy["src_buff"][0]["type"] = "i"

    found = _broken(ring_allreduce, swap)
    assert any("wrong result" in f or "race" in f for f in found), found


def test_a_missing_nop_after_a_wait_is_a_race(ring_allreduce):
    def drop(p):
        ops = _ops(p, 1)
        k = _first(ops, "wait")
        assert ops[k + 1]["name"] == "nop"
        ops.pop(k + 1)

    found = _broken(ring_allreduce, drop)
    assert any(f.startswith("race") for f in found), found


def test_more_ops_than_the_executor_takes(ring_allreduce):
    found = _broken(ring_allreduce, lambda p: _ops(p).extend([{"name": "nop"}] * 64))
    assert any("ops: the executor throws above 64" in f for f in found), found


def test_an_unpaired_channel(ring_allreduce):
    def extra(p):
        p["gpus"][0]["channels"][0]["connected_to"].append(p["gpus"][0]["channels"][0]["connected_to"][0])

    found = _broken(ring_allreduce, extra)
    assert any("pair one to one" in f for f in found), found


def test_a_swapped_channel_pairing_deadlocks_or_unbalances(ring_allreduce):
    """Rank 0 declares its channels to one peer in the reverse order: the j-th channel of each end
    no longer joins the same link."""

    def reverse(p):
        p["gpus"][0]["channels"][0]["connected_to"].reverse()

    found = _broken(ring_allreduce, reverse)
    assert found, "a plan whose channels pair the wrong links was accepted"


def test_a_reduction_other_than_sum(ring_allreduce):
    def maxed(p):
        for tb in p["gpus"][0]["threadblocks"]:
            for op in tb["ops"]:
                if op["name"] in ("re", "res"):
                    op["reduce_op"] = "max"
                    return

    found = _broken(ring_allreduce, maxed)
    assert any("reduce_op 'max'" in f for f in found), found


def test_the_validator_accepts_a_plan_it_did_not_see_written():
    """A 2-rank in-place allgather in the shape mscclpp's own DSL writes (reference 1.14): a start
    handshake, a put straight into the peer's output, a closing signal and wait."""

    def rank(r: int) -> dict:
        mem = {"channel_type": "memory"}
        return {
            "id": r, "input_chunks": 1, "output_chunks": 2, "scratch_chunks": 0,
            "channels": [{**mem, "connected_to": [1 - r]}],
            "remote_buffers": [{"rank": 1 - r, "type": "o", "access_channel_types": ["memory"]}],
            "semaphores": [],
            "threadblocks": [{
                "id": 0, "channels": [{**mem, "channel_ids": [0]}],
                "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}],
                "ops": [
                    {"name": "nop"}, {"name": "rlxsignal", "channel_ids": [0], **mem}, {"name": "nop"},
                    {"name": "rlxwait", "channel_ids": [0], **mem}, {"name": "nop"},
                    {"name": "put", "src_buff": [{"type": "o", "index": r, "size": 1}],
                     "dst_buff": [{"buffer_id": 0, "index": r, "size": 1}], **mem},
                    {"name": "nop"}, {"name": "signal", "channel_ids": [0], **mem},
                    {"name": "wait", "channel_ids": [0], **mem}, {"name": "nop"},
                ],
            }],
        }  # fmt: skip

    plan = {"name": "ag2", "collective": "allgather", "protocol": "Simple", "inplace": True, "gpus": [rank(0), rank(1)]}
    plan["max_message_size"] = 1 << 30  # the DSL's default, 2^64 - 1, would pass the 32-bit offsets
    assert violations(json.dumps(plan)) == []
    plan["gpus"][1]["threadblocks"][0]["ops"].pop(8)  # rank 1 no longer waits for rank 0's data
    assert any("signal(s)" in f for f in violations(json.dumps(plan)))


def test_the_validator_imports_nothing_else_of_xccl():
    """Independent: it reads only the JSON and shares no code with the writer (its three modules
    import each other, the standard library and NumPy only)."""
    own = {f"codegen.formats.mscclpp_{m}" for m in ("validator", "hb", "interp")}
    ours = {"codegen", "synth", "runtime", "xccl", "common", "topologies", "sketches"}
    for module in own:
        tree = ast.parse((HERE.parent / (module.replace(".", "/") + ".py")).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert all(n in own or n.split(".")[0] not in ours for n in names), (module, names)


# -- what the executor cannot do is refused in one line --------------------------------------------


@pytest.fixture(scope="module")
def ring_files(tmp_path_factory) -> Path:
    from xccl.cli.main import main

    folder = tmp_path_factory.mktemp("plans")
    for coll in ("allreduce", "allgather"):
        assert main(["baseline", "ring", "-t", "dgx1", "-C", coll, "-o", str(folder / f"{coll}.json")]) == 0
    return folder


def test_compile_format_mscclpp_writes_a_plan_the_validator_accepts(xccl, ring_files, tmp_path):
    out = tmp_path / "ar.plan.json"
    proc = xccl("compile", str(ring_files / "allreduce.json"), "--format", "mscclpp", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "checked for the mscclpp runtime" in proc.stdout and "plan (mscclpp execution plan" in proc.stdout
    plan = _accepted(out.read_text())
    assert plan["collective"] == "allreduce" and plan["protocol"] == "Simple"


def test_compile_window_goes_into_the_plan(xccl, ring_files):
    proc = xccl(
        "compile", str(ring_files / "allgather.json"), "--format", "mscclpp", "--min-bytes", "1MiB", "--max-bytes", "64MiB"
    )
    assert proc.returncode == 0, proc.stderr
    plan = _accepted(proc.stdout)
    assert (plan["min_message_size"], plan["max_message_size"]) == (1 << 20, 64 << 20)


def test_a_reduction_other_than_sum_is_refused(xccl, ring_files):
    proc = xccl("compile", str(ring_files / "allreduce.json"), "--format", "mscclpp", "--op", "max")
    assert_one_line_error(proc, "allreduce with max", "only reduces with sum")


def test_allgather_with_any_reduction_is_written(xccl, ring_files):
    proc = xccl("compile", str(ring_files / "allgather.json"), "--format", "mscclpp", "--op", "max")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("protocol", ["LL128", "LL"])
def test_protocols_other_than_simple_are_refused(xccl, ring_files, protocol):
    proc = xccl("compile", str(ring_files / "allreduce.json"), "--format", "mscclpp", "--protocol", protocol)
    assert_one_line_error(proc, f"protocol {protocol}", "Simple")


def test_a_window_past_the_32_bit_offsets_is_refused(xccl, ring_files):
    proc = xccl("compile", str(ring_files / "allreduce.json"), "--format", "mscclpp", "--max-bytes", "8GiB")
    assert_one_line_error(proc, "maxBytes", "32-bit")


def test_a_multi_machine_schedule_is_refused(xccl, tmp_path):
    algo = tmp_path / "h.json"
    assert xccl("baseline", "hierarchical", "-t", "ndv2x2", "-C", "allgather", "-o", str(algo)).returncode == 0
    proc = xccl("compile", str(algo), "--format", "mscclpp")
    assert_one_line_error(proc, "one machine", "memory channels")


def test_a_plan_given_back_to_compile_says_it_is_not_read(xccl, ring_files, tmp_path):
    out = tmp_path / "p.json"
    assert xccl("compile", str(ring_files / "allgather.json"), "--format", "mscclpp", "-o", str(out)).returncode == 0
    proc = xccl("compile", str(out), "--format", "azure")
    assert_one_line_error(proc, "MSCCL++ execution plan", "does not read them back")


def test_check_accepts_a_plan_it_wrote_and_reports_a_broken_one(xccl, ring_files, tmp_path):
    plan = tmp_path / "ar.json"
    assert xccl("compile", str(ring_files / "allreduce.json"), "--format", "mscclpp", "-o", str(plan)).returncode == 0
    proc = xccl("check", str(plan))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MSCCL++ plan" in proc.stdout and "ok:" in proc.stdout and "computes allreduce" in proc.stdout
    doc = json.loads(plan.read_text())
    _ops(doc).pop(_first(_ops(doc), "signal"))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    proc = xccl("check", str(broken))
    assert proc.returncode == 1 and "signal(s) reach it per launch" in proc.stdout, proc.stdout
    assert_one_line_error(xccl("check", str(plan), "--dialect", "azure"), "--dialect mscclpp")


def test_plans_of_two_windows_have_different_names_and_the_same_input_the_same_bytes(ring_allreduce):
    """The executor caches a plan's resources by name: two different plans must not share one."""
    from dataclasses import replace

    algo, topo = _baseline("dgx1", "ring", "allreduce")
    ir = compile_algorithm(algo, topo, dialect="mscclpp")
    small = json.loads(write_ir(replace(ir, max_bytes=1 << 20), "mscclpp"))
    assert small["name"] != ring_allreduce["name"]
    assert small["name"].startswith(ir.name) and ring_allreduce["name"].startswith(ir.name)
    assert write_ir(ir, "mscclpp") == write_ir(ir, "mscclpp")

"""MSCCL XML written by other tools executes correctly on the NumPy executor.

The XML here is written by hand, as text, the way the MSCCL tools emit it (reference/msccl-xml.md,
2.10), quirks included: the research dialect without ``outofplace``/``minBytes``/``maxBytes``; an
``rrc`` whose ``srcbuf``/``srcoff`` name the sender's location (here ``o``, which an in-place
allreduce file sizes as ``o_chunks="0"``) rather than the local operand; usage-based
``i_chunks``/``o_chunks`` (``i_chunks="0"`` for an in-place allgather); dependencies beyond the
first carried by ``nop`` steps.
"""

from __future__ import annotations

import pytest
from executor_suite import calls

from codegen.check import find_problems
from codegen.formats import load_ir
from codegen.ir import OpType
from runtime.errors import DeadlockError, ExecutionMismatch, UninitializedRead
from runtime.numpy import run


def _step(
    s: int, kind: str, src: tuple[str, int], dst: tuple[str, int], cnt=1, dep=(-1, -1), hasdep=0
) -> str:
    return (
        f'      <step s="{s}" type="{kind}" srcbuf="{src[0]}" srcoff="{src[1]}" dstbuf="{dst[0]}" '
        f'dstoff="{dst[1]}" cnt="{cnt}" depid="{dep[0]}" deps="{dep[1]}" hasdep="{hasdep}"/>'
    )


def ring_allreduce_xml(n: int, rrc_src: str = "o", s_chunks: int = 0, rrc_hasdep: int = 1) -> str:
    """In-place ring allreduce, research-runtime dialect, as the reference compiler writes a program
    that reduces on threadblock 0 (channel 0) and gathers on threadblock 1 (channel 1): chunk c
    starts at rank c, is reduced along the ring (``s``, ``rrs``...), and its last reduction is an
    ``rrc`` on rank c-1, whose ``srcbuf`` names the sender's chunk (``rrc_src``); the gather
    phase waits for that ``rrc`` and passes the result on (``s``, ``rcs``..., ``r``)."""
    lines = [
        f'<algo name="allreduce_ring_{n}" proto="Simple" nchannels="2" nchunksperloop="{n}" '
        f'ngpus="{n}" coll="allreduce" inplace="1">'
    ]
    for r in range(n):
        nxt, prv = (r + 1) % n, (r - 1) % n
        lines.append(f'  <gpu id="{r}" i_chunks="{n}" o_chunks="0" s_chunks="{s_chunks}">')
        lines.append(f'    <tb id="0" send="{nxt}" recv="{prv}" chan="0">')
        lines.append(_step(0, "s", ("i", r), ("i", r)))
        for k in range(1, n - 1):
            c = (r - k) % n
            lines.append(_step(k, "rrs", ("i", c), ("i", c)))
        c = (r + 1) % n
        lines.append(_step(n - 1, "rrc", (rrc_src, 0 if rrc_src == "s" else c), ("i", c), hasdep=rrc_hasdep))
        lines.append("    </tb>")
        lines.append(f'    <tb id="1" send="{nxt}" recv="{prv}" chan="1">')
        lines.append(_step(0, "s", ("i", c), ("i", c), dep=(0, n - 1)))
        for k in range(1, n):
            c = (r + 1 - k) % n
            lines.append(_step(k, "rcs" if k < n - 1 else "r", ("i", c), ("i", c)))
        lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def allpairs_allgather_xml(n: int, inplace: bool, wrong_rank: int | None = None) -> str:
    """All-pairs allgather, Azure dialect: rank r sends its chunk to every peer on a threadblock
    per peer and receives the peer's chunk into scratch; a local threadblock copies the scratch
    chunks into the output, waiting for every receive (extra dependencies in ``nop`` steps). In
    place, the input is the rank's slot of the output (``i_chunks="0"``). ``wrong_rank`` copies the
    chunks of its higher peers one slot too low, over its own."""
    flags = f'inplace="{int(inplace)}" outofplace="{int(not inplace)}" minBytes="0" maxBytes="0"'
    head = f'name="allgather_allpairs_{n}" proto="Simple" nchannels="1" nchunksperloop="{n}" ngpus="{n}"'
    lines = [f'<algo {head} coll="allgather" {flags}>']
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        lines.append(f'  <gpu id="{r}" i_chunks="{0 if inplace else 1}" o_chunks="{n}" s_chunks="{n - 1}">')
        own = ("o", r) if inplace else ("i", 0)
        for k, p in enumerate(peers):
            lines.append(f'    <tb id="{k}" send="{p}" recv="{p}" chan="0">')
            lines.append(_step(0, "s", own, ("o", r)))
            lines.append(_step(1, "r", ("o", p), ("s", k), hasdep=1))
            lines.append("    </tb>")
        lines.append(f'    <tb id="{n - 1}" send="-1" recv="-1" chan="0">')
        steps = [] if inplace else [("cpy", ("i", 0), ("o", r), 1, (-1, -1))]
        # scratch k holds peer k (peers below r) or peer k + 1 (above): two runs of slots
        for lo, hi, out in ((0, r, 0), (r, n - 1, r + 1)):
            if hi <= lo:
                continue
            for k in range(lo, hi - 1):
                steps.append(("nop", ("i", -1), ("o", -1), 0, (k, 1)))
            dst = out - (1 if r == wrong_rank and lo > 0 else 0)
            steps.append(("cpy", ("s", lo), ("o", dst), hi - lo, (hi - 1, 1)))
        for s, (kind, src, dst, cnt, dep) in enumerate(steps):
            lines.append(_step(s, kind, src, dst, cnt, dep))
        lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def _load(tmp_path, text: str, name: str = "algo.xml"):
    path = tmp_path / name
    path.write_text(text)
    return load_ir(path)


def _run_all(ir) -> int:
    n = 0
    for call in calls(ir):
        result = run(
            ir, call.size_bytes, call.dtype, call.op, inplace=call.inplace, tile_bytes=call.tile_bytes
        )
        assert result.checked
        n += 1
    return n


@pytest.mark.parametrize("n", [3, 4, 8])
def test_a_reference_compiler_ring_allreduce_runs(tmp_path, n):
    ir = _load(tmp_path, ring_allreduce_xml(n))
    assert (ir.inplace, ir.outofplace, ir.max_bytes) == (True, False, 1 << 27)  # research dialect
    assert ir.gpu(0).output_chunks == 0
    rrc = ir.gpu(0).threadblock(0).ops[-1]
    assert rrc.type is OpType.RECV_REDUCE_COPY and rrc.src == rrc.dst  # read as the compiler meant
    assert find_problems(ir, "msccl") == []
    assert _run_all(ir) == 9
    for seed in range(3):  # other interleavings of the threadblocks give the same result
        assert run(ir, n * 40 * 4, inplace=True, tile_bytes=32, schedule_seed=seed).checked


@pytest.mark.parametrize("n", [2, 4, 5])
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_an_allpairs_allgather_with_nops_runs(tmp_path, n, inplace):
    text = allpairs_allgather_xml(n, inplace)
    assert ('i_chunks="0"' in text) == inplace and (' type="nop"' in text) == (n > 2)
    ir = _load(tmp_path, text)
    assert (ir.inplace, ir.outofplace, ir.max_bytes) == (inplace, not inplace, 0)
    assert find_problems(ir, "azure") == []
    assert _run_all(ir) == 9


def test_a_wrong_copy_is_reported_with_rank_buffer_chunk_and_index(tmp_path):
    """Rank 1 of 4 copies rank 2's and 3's chunks into output[1..2]: output[1] holds rank 2's chunk
    and output[3] nothing."""
    ir = _load(tmp_path, allpairs_allgather_xml(4, inplace=False, wrong_rank=1))
    with pytest.raises(ExecutionMismatch) as info:
        run(ir, 4 * 16 * 4)
    err = info.value
    assert (err.rank, err.buffer, err.chunk, err.index) == (1, "output", 1, 0)
    assert "rank 1: output[1] element 0" in str(err) and "\n" not in str(err)


def test_a_dependency_nobody_publishes_deadlocks(tmp_path):
    """Without ``hasdep`` on the final ``rrc`` the gathering threadblock waits forever."""
    ir = _load(tmp_path, ring_allreduce_xml(4, rrc_hasdep=0))
    with pytest.raises(DeadlockError) as info:
        run(ir, 4 * 16 * 4, inplace=True)
    assert "hasdep is not set" in str(find_problems(ir)[0])  # the static checker says so too
    stuck = [b for b in info.value.blocked if b.tb == 1 and b.op == 0]
    assert len(stuck) == 4 and all(
        "waits for tb 0 op 3" in b.reason and "never publishes" in b.reason for b in stuck
    )


def test_a_sender_location_inside_the_scratch_buffer_is_a_read_of_unwritten_memory(tmp_path):
    """Where the reference compiler's ``srcbuf="s"`` lands inside a GPU's scratch, the runtime takes
    it as the local operand: the executor reports the read of scratch nothing wrote."""
    ir = _load(tmp_path, ring_allreduce_xml(4, rrc_src="s", s_chunks=1))
    with pytest.raises(UninitializedRead) as info:
        run(ir, 4 * 16 * 4, inplace=True)
    err = info.value
    assert (err.tb, err.op, err.buffer, err.chunk) == (0, 3, "s", 0)

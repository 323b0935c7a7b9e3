"""The sketch JSON format (docs/sketch-format.md): a reader that checks every field, and a writer.

The reader checks only what a sketch says on its own (known keys, types, ranges); whether it fits a
topology is :func:`sketches.restrict.restrict`'s job. Shipped sketches are found by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.fields import Fields
from common.files import named_file, read_json_file, read_shipped, shipped_names
from common.units import SizeError, parse_size
from sketches.model import (
    CONNECTION_KINDS,
    HYPEREDGE_POLICIES,
    INTRANODE_STRATEGIES,
    InterNode,
    IntraNode,
    Sketch,
    SketchError,
)

__all__ = ["FORMAT", "load_sketch", "shipped_sketches", "sketch_from_dict", "sketch_to_dict"]

FORMAT = "xccl-sketch/1"
_TOP = (
    "format",
    "name",
    "comment",
    "topology",
    "intranode",
    "internode",
    "symmetry_offsets",
    "chunkup",
    "target_size",
)
_INTRA = ("strategy", "switches", "hyperedge")
_INTER = ("strategy", "connections", "senders")


class _Reader(Fields):
    """The sketch's own compound fields: GPU lists and ``{"GPU": [GPUs]}`` maps."""

    def gpus(self, value: Any, field: str) -> tuple[int, ...]:
        gpus = self.array(value, field, of="machine-local GPU indices", nonempty=True)
        out = tuple(self.integer(v, f"{field}[{i}]", minimum=0) for i, v in enumerate(gpus))
        if len(set(out)) != len(out):
            raise self.fail(field, "distinct GPU indices", value)
        return out

    def gpu_map(self, value: Any, field: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """``{"0": [1, 2]}`` -> ``((0, (1, 2)),)``, keys as machine-local GPU indices."""
        if not isinstance(value, dict) or not value:
            raise self.fail(field, 'a non-empty object {"GPU": [GPUs]}', value)
        out = []
        for key, gpus in value.items():
            if not (key.isascii() and key.isdigit()):  # int() also reads "²" and "١"
                raise self.fail(f"{field}.{key}", "a machine-local GPU index as key", key)
            out.append((int(key), self.gpus(gpus, f"{field}.{key}")))
        return tuple(sorted(out))


def _intranode(r: _Reader, data: Any) -> IntraNode:
    data = r.keys(data, "intranode", _INTRA, ("strategy",))
    strategy = r.choice(data["strategy"], "intranode.strategy", INTRANODE_STRATEGIES)
    if strategy == "none":
        for key in ("switches", "hyperedge"):
            if key in data:
                raise r.fail(f"intranode.{key}", 'nothing with strategy "none" (only "switch" has it)')
        return IntraNode("none")
    for key in ("switches", "hyperedge"):
        if key not in data:
            raise r.fail(f"intranode.{key}", 'a value (required with strategy "switch")')
    groups = r.array(data["switches"], "intranode.switches", of="GPU groups", nonempty=True)
    switches = tuple(r.gpus(g, f"intranode.switches[{i}]") for i, g in enumerate(groups))
    for i, group in enumerate(switches):
        if len(group) < 2:
            raise r.fail(f"intranode.switches[{i}]", "at least 2 GPUs in a switch group", list(group))
    policy = r.choice(data["hyperedge"], "intranode.hyperedge", HYPEREDGE_POLICIES)
    return IntraNode("switch", switches, policy)


def _internode(r: _Reader, data: Any) -> InterNode | None:
    if data is None:
        return None
    data = r.keys(data, "internode", _INTER, ("strategy", "connections"))
    if data["strategy"] != "relay":
        raise r.fail("internode.strategy", '"relay" (the only inter-node strategy)', data["strategy"])
    conn = data["connections"]
    if isinstance(conn, str):
        if conn not in CONNECTION_KINDS:
            raise r.fail(
                "internode.connections", f'{" or ".join(CONNECTION_KINDS)} or {{"GPU": [GPUs]}}', conn
            )
        connections: Any = conn
    else:
        connections = r.gpu_map(conn, "internode.connections")
    senders = r.gpu_map(data["senders"], "internode.senders") if "senders" in data else ()
    seen: dict[int, int] = {}
    for sender, gpus in senders:
        for gpu in gpus:
            if gpu in seen:
                raise r.fail(
                    f"internode.senders.{sender}",
                    f"each GPU under one sender (GPU {gpu} is also under {seen[gpu]})",
                )
            seen[gpu] = sender
    return InterNode("relay", connections, senders)


def _symmetry(r: _Reader, data: Any) -> tuple[tuple[int, int], ...]:
    out = []
    for i, pair in enumerate(r.array(data, "symmetry_offsets", of="[offset, group size] pairs")):
        field = f"symmetry_offsets[{i}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise r.fail(field, "an [offset, group size] pair", pair)
        offset = r.integer(pair[0], f"{field}[0]", minimum=1)
        size = r.integer(pair[1], f"{field}[1]", minimum=2)
        if offset % size == 0:
            raise r.fail(
                field, "an offset that is not a multiple of the group size (that is no rotation)", pair
            )
        out.append((offset, size))
    return tuple(out)


def _target_size(r: _Reader, value: Any) -> int:
    """Bytes, written as everywhere else sizes are (:func:`common.units.parse_size`)."""
    try:
        return parse_size(value)
    except SizeError:
        raise r.fail("target_size", "a size in bytes or like 1GiB (B, KiB, MiB, GiB, TiB)", value) from None


def sketch_from_dict(data: Any, where: str = "<sketch>") -> Sketch:
    """Parse a sketch document, checking keys, types and ranges (not the topology)."""
    r = _Reader(where, SketchError)
    data = r.keys(data, "", _TOP, ("format", "name"))
    if data["format"] != FORMAT:
        raise r.fail("format", f'"{FORMAT}"', data["format"])
    name = r.string(data["name"], "name")
    comment = r.string(data.get("comment", ""), "comment", empty=True)
    topology = data.get("topology")
    if topology is not None and (not isinstance(topology, str) or not topology):
        raise r.fail("topology", "a topology name", topology)
    chunkup: int | None = None
    if "chunkup" in data and data["chunkup"] != "auto":
        chunkup = r.integer(data["chunkup"], "chunkup", minimum=1)
    target = _target_size(r, data["target_size"]) if "target_size" in data else None
    return Sketch(
        name=name,
        intranode=_intranode(r, data.get("intranode", {"strategy": "none"})),
        internode=_internode(r, data.get("internode")),
        symmetry_offsets=_symmetry(r, data.get("symmetry_offsets", [])),
        chunkup=chunkup,
        target_size_bytes=target,
        topology=topology,
        comment=comment,
        source=where,
    )


def sketch_to_dict(sketch: Sketch) -> dict[str, Any]:
    """The JSON document of a sketch (the reader's inverse)."""
    out: dict[str, Any] = {"format": FORMAT, "name": sketch.name}
    if sketch.comment:
        out["comment"] = sketch.comment
    if sketch.topology:
        out["topology"] = sketch.topology
    intra: dict[str, Any] = {"strategy": sketch.intranode.strategy}
    if sketch.intranode.strategy == "switch":
        intra["switches"] = [list(g) for g in sketch.intranode.switches]
        intra["hyperedge"] = sketch.intranode.hyperedge
    out["intranode"] = intra
    if sketch.internode is not None:
        conn = sketch.internode.connections
        inter: dict[str, Any] = {
            "strategy": sketch.internode.strategy,
            "connections": conn if isinstance(conn, str) else {str(s): list(r) for s, r in conn},
        }
        if sketch.internode.senders:
            inter["senders"] = {str(s): list(g) for s, g in sketch.internode.senders}
        out["internode"] = inter
    out["symmetry_offsets"] = [list(p) for p in sketch.symmetry_offsets]
    out["chunkup"] = sketch.chunkup if sketch.chunkup is not None else "auto"
    if sketch.target_size_bytes is not None:
        out["target_size"] = sketch.target_size_bytes
    return out


def shipped_sketches() -> list[str]:
    """Names of the sketches shipped in ``sketches/shipped``."""
    return shipped_names("sketches", "shipped")


def load_sketch(name_or_path: str | Path | Sketch) -> Sketch:
    """A shipped sketch by name (``ndv2x2-relay``) or a JSON file; a Sketch passes through."""
    if isinstance(name_or_path, Sketch):
        return name_or_path
    path = named_file(name_or_path, "sketch", SketchError)
    if path is not None:
        return sketch_from_dict(read_json_file(path, SketchError), where=str(path))
    text = str(name_or_path)
    if text in shipped_sketches():
        return sketch_from_dict(*read_shipped("sketches", "shipped", text, SketchError))
    raise SketchError(
        f"unknown sketch {text!r}: expected a shipped sketch ({', '.join(shipped_sketches())}) or a JSON file"
    )

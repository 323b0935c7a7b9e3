"""NCCL's tuning constants, per release, as read in its sources (reference: shared/reference/nccl.md).

Each :class:`Version` holds what ``src/graph/tuning.cc``, ``src/graph/search.cc`` and
``src/graph/topo.h`` of that release say; :mod:`synth.nccl.model` applies them. Two releases are
here: v2.30.7 (NVIDIA/nccl@5067397c, the newest) and v2.12.12 (tag v2.12.12-1 = 7aa1c46f, the base
of microsoft/msccl). Another release is one more entry in :data:`VERSIONS`.

Indexing follows NCCL: protocols ``LL, LL128, Simple``; a GPU generation is an *arch* (``sm70``
Volta, ``sm80`` Ampere, ``sm90`` Hopper, ``sm100`` Blackwell); a node-count column is ``N1`` (one
node), ``N2`` (two) or ``N4`` (more).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ALGORITHMS", "ARCHS", "PROTOCOLS", "VERSIONS", "Version", "resolve_version"]

PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("Tree", "Ring", "NVLS", "PAT")
"""The algorithms modeled (NCCL's CollNet ones need a SHARP plugin and are off by default;
NVLSTree, Hopper's multi-node allreduce, is not modeled)."""
ARCHS = ("sm70", "sm80", "sm90", "sm100")

PerProto = tuple[float, float, float]
"""One value per protocol, in :data:`PROTOCOLS` order."""
PerNodes = tuple[float, float, float]
"""One value per node count: one node, two nodes, more."""


@dataclass(frozen=True)
class Version:
    """One NCCL release's constants (see the module docstring for the sources)."""

    name: str
    source: str
    base_latency_us: dict[str, PerProto]
    """``baseLatencies`` (v2.12: ``baseLat``): per algorithm, paid once per call."""
    hw_latency_us: dict[str, dict[str, PerProto]]
    """``hwLatencies[hw][algo]`` (v2.12: ``hwLat``), hw ``NVLINK``, ``PCI``, ``NET``: per hop."""
    ll_max_bw: dict[str, PerNodes]
    """``llMaxBws``: the LL protocol's bus bandwidth cap, by GPU arch (one node) or CPU vendor."""
    ring_ll128_per_channel: dict[str, PerNodes]
    tree_ll128_per_channel: dict[str, PerNodes]
    tree_per_channel: dict[str, PerNodes]
    nvls_efficiency: dict[str, float]
    nvlink_bw: dict[str, float]
    """GB/s NCCL assumes per NVLink (``SM70_NVLINK_BW`` ...; v2.12 ``..._NVLINK_WIDTH``)."""
    speeds_intra: dict[str, tuple[float, ...]]
    """The channel speeds the search tries on one node (``speedArrayIntra``, ``sm90SpeedArrayIntra`` ...)."""
    speeds_inter: dict[str, tuple[float, ...]]
    max_channels: int
    """``MAXCHANNELS``; a ring search keeps at most half of them."""
    ring_ll_factor: float | None
    """Ring LL bandwidth factor (0.5 since v2.21); None: v2.12's 1/3 on one node for allgather,
    reducescatter and broadcast, 1/4 otherwise."""
    ring_search_climbs: bool
    """Whether the ring search tries higher speeds after doubling its channels (since v2.19)."""
    dup_needs_few_channels: bool
    """Whether doubling channels is skipped for sm > 80 rings under 50 GB/s with more than 4 channels."""
    start_needs_total: bool
    """Whether the first speed tried must also fit ``totalBw`` (``speed * minChannels``)."""
    ampere_cap: float | None
    """v2.12 caps every bus bandwidth of an all-sm80 system at 235 GB/s."""
    tree_correction: tuple[PerProto, ...] = field(default=())
    """``treeCorrectionFactor``, per power of two of ``nBytes / 64``."""
    algorithms: tuple[str, ...] = ALGORITHMS
    ll128_archs: tuple[str, ...] = ARCHS
    """Archs on which LL128 is on by default (v2.12: only Volta and Ampere)."""
    multinode_ll_intra_factor: float = 1.0
    """v2.12 multiplies the intra-node LL hop latency by 1.8 on several nodes."""
    allreduce_inter_steps_2n: bool = False
    """v2.12 counts ``2 * nNodes`` (not ``2 * (nNodes - 1)``) network steps in a ring allreduce."""
    ring_plateau: tuple[float, float] = (1.4, 1.9)
    """Multi-node ring Simple allreduce latency factor (sm80+, older), once the plateau is reached."""
    plateau_per_channel: bool = True
    """Plateau test: ``nBytes / (nChannels * nRanks) >= 64`` (v2.19+), else ``nBytes >= nRanks / 16 * 64 KiB``."""
    net_overhead: bool = True
    """Whether a multi-node ring step costs at least the CPU's network overhead (v2.19+)."""
    ppn1_tree_latency: bool = True
    """Whether one GPU per node uses the Tree's network latency for every algorithm (v2.19+)."""


def _tree_correction(rows: tuple[tuple[float, ...], ...]) -> tuple[PerProto, ...]:
    """NCCL's table is per protocol; the model looks it up per size."""
    return tuple((rows[0][i], rows[1][i], rows[2][i]) for i in range(len(rows[0])))


V2_30_7 = Version(
    name="2.30.7",
    source="NVIDIA/nccl@5067397c (v2.30.7): src/graph/tuning.cc, search.cc, topo.h",
    base_latency_us={"Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4), "NVLS": (0, 0, 0), "PAT": (8, 8, 8)},
    hw_latency_us={
        "NVLINK": {"Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4), "NVLS": (0, 0, 25), "PAT": (0, 0, 4.0)},
        "PCI": {"Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7), "NVLS": (0, 0, 0), "PAT": (0, 0, 4.0)},
        "NET": {"Tree": (5.0, 8.5, 14), "Ring": (2.7, 4.0, 14.0), "NVLS": (0, 0, 18), "PAT": (0, 0, 14)},
    },
    ll_max_bw={
        "sm70": (39.0, 39.0, 20.4),
        "sm80": (87.7, 22.5, 19.0),
        "sm90": (141.0, 45.0, 35.0),
        "sm100": (282.0, 90.0, 70.0),
    },
    ring_ll128_per_channel={
        "sm70": (20, 20, 20),
        "sm80": (20, 20, 20),
        "sm90": (36.7, 36.7, 36.7),
        "sm100": (40, 40, 40),
    },
    tree_ll128_per_channel={
        "sm70": (20, 20, 20),
        "sm80": (20, 20, 20),
        "sm90": (36.7, 36.7, 29.0),
        "sm100": (55.6, 31.67, 20.0),
    },
    tree_per_channel={
        "sm70": (26.5, 18.5, 10.0),
        "sm80": (24.0, 23.6, 17.8),
        "sm90": (38.7, 41.4, 36.0),
        "sm100": (70.0, 42.8, 24.0),
    },
    nvls_efficiency={"sm70": 0.0, "sm80": 0.0, "sm90": 0.85, "sm100": 0.74},
    nvlink_bw={"sm70": 20.0, "sm80": 20.0, "sm90": 20.6, "sm100": 40.1},
    speeds_intra={
        "sm70": (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3),
        "sm80": (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3),
        "sm90": (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3),
        "sm100": (90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18),
    },
    speeds_inter={
        "sm70": (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12),
        "sm80": (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12),
        "sm90": (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12),
        "sm100": (96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12),
    },
    max_channels=64,
    ring_ll_factor=0.5,
    ring_search_climbs=True,
    dup_needs_few_channels=True,
    start_needs_total=True,
    ampere_cap=None,
    tree_correction=_tree_correction(
        (
            (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5,
             0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
            (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6,
             0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
            (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5,
             0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
        )
    ),
)

_V2_12_LL = {"sm70": (39.0, 39.0, 20.4), "sm80": (87.7, 22.5, 19.0)}
_V2_12_SPEEDS_INTRA = (44, 30, 22, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3)
_V2_12_SPEEDS_INTER = (48, 30, 24, 22, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12)

V2_12_12 = Version(
    name="2.12.12",
    source="NVIDIA/nccl tag v2.12.12-1 (7aa1c46f), the base of microsoft/msccl: src/graph/tuning.cc, search.cc, topo.h",
    base_latency_us={"Tree": (4.4, 4.4, 0.0), "Ring": (3.6, 10.0, 8.4)},
    hw_latency_us={
        "NVLINK": {"Tree": (0.52, 1.25, 28), "Ring": (0.47, 1.9, 3.4)},
        "PCI": {"Tree": (1.0, 1.9, 28), "Ring": (1.0, 2.5, 5.7)},
        "NET": {"Tree": (5.0, 8.5, 28), "Ring": (2.7, 4.0, 28)},
    },
    # v2.12 knows two rows, indexed by "all GPUs are sm80": later archs read the Volta row
    ll_max_bw={
        "sm70": _V2_12_LL["sm70"],
        "sm80": _V2_12_LL["sm80"],
        "sm90": _V2_12_LL["sm70"],
        "sm100": _V2_12_LL["sm70"],
    },
    ring_ll128_per_channel={a: (20, 20, 20) for a in ARCHS},
    tree_ll128_per_channel={a: (20, 20, 20) for a in ARCHS},
    tree_per_channel={
        "sm70": (26.5, 18.5, 10.0),
        "sm80": (24.0, 23.6, 17.8),
        "sm90": (26.5, 18.5, 10.0),
        "sm100": (26.5, 18.5, 10.0),
    },
    nvls_efficiency={a: 0.0 for a in ARCHS},
    nvlink_bw={"sm70": 22.0, "sm80": 22.0, "sm90": 22.0, "sm100": 22.0},
    speeds_intra={a: _V2_12_SPEEDS_INTRA for a in ARCHS},
    speeds_inter={a: _V2_12_SPEEDS_INTER for a in ARCHS},
    max_channels=32,
    ring_ll_factor=None,
    ring_search_climbs=False,
    dup_needs_few_channels=False,
    start_needs_total=False,
    ampere_cap=235.0,
    tree_correction=_tree_correction(
        (
            (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6,
             0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0),
            (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6,
             0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0),
            (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6,
             0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9),
        )
    ),
    algorithms=("Tree", "Ring"),
    ll128_archs=("sm70", "sm80"),
    multinode_ll_intra_factor=1.8,
    allreduce_inter_steps_2n=True,
    ring_plateau=(1.9, 1.9),
    plateau_per_channel=False,
    net_overhead=False,
    ppn1_tree_latency=False,
)

VERSIONS: dict[str, Version] = {v.name: v for v in (V2_30_7, V2_12_12)}
"""Releases by name; :func:`resolve_version` also takes ``v2.30.7``, ``2.30`` and ``2.12``."""
DEFAULT_VERSION = V2_30_7.name


def resolve_version(name: str) -> Version | None:
    """The release named ``name`` (``2.30.7``, ``v2.30.7``, or a ``major.minor`` prefix), or None."""
    key = name.strip().lower().removeprefix("v")
    if key in VERSIONS:
        return VERSIONS[key]
    matches = [v for k, v in VERSIONS.items() if k.startswith(key + ".")]
    return matches[0] if len(matches) == 1 else None

"""The named timing models: ``calibrated`` (the default) and ``ideal``, and where each number comes from.

``ideal`` is the model SCCL, TACCL and the papers that follow them use: links at their line rate,
nothing paid per call or per send, only the topology's ``alpha_us`` per transfer. It reproduces
their published numbers and is what the lower bounds assume.

``calibrated`` makes absolute times predictive of a real run (docs/nccl.md, "Calibration"), with
the topology files holding datasheet line rates and every loss stated here:

========================  =======================  ==================================================
parameter                 value                    source
========================  =======================  ==================================================
achievable link rate      0.8 of line rate         NCCL's measured bus bandwidth over NVLink line rate:
                                                   8xA100 allgather 253.6 of 300 GB/s (0.85), 8xH100
                                                   352.7 of 450 (0.78) (shared/reference/nccl.md 3.1);
                                                   NCCL's own per-link figures 20 of 25 GB/s (topo.h)
protocol efficiency       LL 0.5, LL128 120/128,   the protocols' wire formats: an LL line carries 8
                          Simple 1                 data bytes in 16, an LL128 line 120 in 128
                                                   (NCCL src/include/device.h)
per-call launch           4.64 us                  8xH100 NCCL allgather at 1 KiB, 9.54 us measured
                                                   (Azure/msccl performance-nd-h100-v5.md), less its
                                                   seven ring hops of 0.7 us (the topology's alpha)
per-send cost             LL 0, LL128 1.3 us,      NCCL's per-hop NVLink ring latencies (0.6 / 1.9 /
(occupies the connection) Simple 2.8 us            3.4 us, tuning.cc v2.30.7) above LL's, whose 0.6
                                                   us the topology's alpha already covers
========================  =======================  ==================================================

The lower bounds (:mod:`synth.bounds`) stay at line rate in every model: a bound is what no
schedule can beat, whatever the runtime loses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from common.errors import XcclError, quoted
from synth.timing.model import Params

__all__ = [
    "CALIBRATION",
    "DEFAULT",
    "DEFAULT_MODEL",
    "DEFAULT_PROTOCOL",
    "IDEAL",
    "MODELS",
    "PROTOCOLS",
    "Calibration",
    "TimingModelError",
    "model_params",
]

MODELS = ("calibrated", "ideal")
DEFAULT_MODEL = "calibrated"
PROTOCOLS = ("Simple", "LL128", "LL")
"""NCCL's protocols, the default first (what ``xccl compile`` writes unless told otherwise)."""
DEFAULT_PROTOCOL = "Simple"


class TimingModelError(XcclError):
    """An unknown timing model or protocol, or a parameter out of range."""


@dataclass(frozen=True)
class Calibration:
    """The calibrated model's numbers (module docstring has their sources)."""

    link_efficiency: float = 0.8
    protocol_efficiency: dict[str, float] = field(
        default_factory=lambda: {"Simple": 1.0, "LL128": 120 / 128, "LL": 0.5}
    )
    launch_us: float = 4.64
    send_us: dict[str, float] = field(default_factory=lambda: {"Simple": 2.8, "LL128": 1.3, "LL": 0.0})

    def params(self, protocol: str) -> Params:
        return Params(
            model="calibrated",
            protocol=protocol,
            launch_us=self.launch_us,
            send_us=self.send_us[protocol],
            rate_fraction=self.link_efficiency * self.protocol_efficiency[protocol],
        )


CALIBRATION = Calibration()
IDEAL = Params()
"""Line rate, no launch or per-send cost (SCCL's and TACCL's model)."""
DEFAULT = CALIBRATION.params(DEFAULT_PROTOCOL)
"""What every timing uses unless told otherwise: the calibrated model with the Simple protocol."""


def model_params(
    model: str = DEFAULT_MODEL,
    protocol: str | None = None,
    send_us: float | None = None,
    launch_us: float | None = None,
) -> Params:
    """The parameters of a named model (``calibrated``: for ``protocol``, default Simple; ``ideal``
    ignores the protocol), with the per-send or launch cost overridden where given."""
    if model not in MODELS:
        raise TimingModelError(f"timing model {quoted(model)}: expected one of {', '.join(MODELS)}")
    protocol = protocol or DEFAULT_PROTOCOL
    if protocol not in PROTOCOLS:
        raise TimingModelError(f"protocol {quoted(protocol)}: expected one of {', '.join(PROTOCOLS)}")
    params = CALIBRATION.params(protocol) if model == "calibrated" else replace(IDEAL, protocol=protocol)
    for name, value in (("send_us", send_us), ("launch_us", launch_us)):
        if value is not None:
            if not 0.0 <= value < 1e6:
                raise TimingModelError(f"{name} {value!r}: expected a number of microseconds from 0 to 1e6")
            shown = f"{'send' if name == 'send_us' else 'launch'} {value:g} us"
            params = replace(
                params, **{name: float(value)}, changed=", ".join(filter(None, (params.changed, shown)))
            )
    return params

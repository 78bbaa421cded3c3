"""The physically plausible range of each chip number, for chips files and for a trace's own device stats.

A capacity of 5e-324 bytes or a bandwidth of 1e300 B/s passes "finite and > 0" and then breaks arithmetic far
from where it was read (a log of 0, a roofline of 0 s). The ranges are wide: three orders of magnitude or more
past today's chips on both sides (per device, SI units), so only damage or a unit mistake falls outside.
"""

from __future__ import annotations

import math

from ...units import format_si

_FLOPS = (1e6, 1e18)  # FLOP/s: today's chips 2e12 .. 5e15
_LINK = (1e3, 1e15)  # bytes/s: DCN 1.5e9 .. NVLink 4.5e11
RANGES: dict[str, tuple[float, float]] = {
    "peak_bf16_flops_per_s": _FLOPS,
    "peak_f16_flops_per_s": _FLOPS,
    "peak_f32_flops_per_s": _FLOPS,
    "peak_fp8_flops_per_s": _FLOPS,
    "peak_int8_flops_per_s": _FLOPS,
    "hbm_bytes_per_s": (1e6, 1e15),  # today 2e11 .. 8e12
    "hbm_capacity_bytes": (2.0**20, 2.0**50),  # 1 MiB .. 1 PiB; today 8 GiB .. 288 GB
    "ici_link_bytes_per_s_oneway": _LINK,
    "pcie_bytes_per_s": _LINK,
    "dcn_bytes_per_s": _LINK,
    "per_hop_latency_s": (0.0, 1.0),
    "core_count": (1, 10**6),  # SMs / CUs per device
}


def plausible(field: str, value) -> bool:
    """Whether ``value`` is a real number in ``field``'s range (True for a field without one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    low, high = RANGES.get(field, (-math.inf, math.inf))
    return low <= value <= high


def range_text(field: str) -> str:
    low, high = RANGES[field]
    return f"{format_si(low, unit_of(field))} to {format_si(high, unit_of(field))}"


def unit_of(field: str) -> str:
    """The SI unit of a chip number field, for prose ('FLOP/s', 'B/s', 'B', 's'; '' for a count)."""
    for suffix, unit in (("flops_per_s", "FLOP/s"), ("bytes_per_s", "B/s"), ("_bytes", "B"), ("_s", "s")):
        if field.endswith(suffix):
            return unit
    return ""


def format_field(field: str, value) -> str:
    """A chip number in prose with its unit and SI prefix: 2.66 TB/s, 918 TFLOP/s."""
    return format_si(value, unit_of(field))

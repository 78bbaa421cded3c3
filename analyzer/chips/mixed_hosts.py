"""A run whose hosts hold different chips (MI300X on one, MI355X on another): said, never merged silently.

The merged op table has one row per op across every host's devices, so its predictions use one chip (the
first host's, or --chip). The warning names each host's chip and how far the others' peaks are from it, so
a reader knows which predictions to distrust, and points to ``--host`` to analyse each host on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from .catalog import Chip
from .detection import chip_for_device


def host_chips(devices: pd.DataFrame, catalog: Mapping[str, Chip]) -> dict[str, Chip]:
    """Each host's chip, detected from its first device plane (hosts in the devices' order)."""
    out: dict[str, Chip] = {}
    for row in devices.drop_duplicates("host").itertuples():
        stats = row.plane_stats if isinstance(row.plane_stats, dict) else {}
        out[str(row.host)] = chip_for_device(row.device_type, row.vendor, stats, catalog).chip
    return out


def _ratio(other: float, chosen: float) -> str:
    if not (chosen and math.isfinite(other / chosen)):
        return "unknown"
    ratio = other / chosen
    return f"{ratio:.2g}x" if ratio < 99.5 else f"{ratio:,.0f}x"  # 120x, not 1.2e+02x


def mixed_hosts_warning(devices: pd.DataFrame, catalog: Mapping[str, Chip], chosen: Chip) -> str | None:
    """None when every host has the same chip; else one line naming each host's chip."""
    chips = host_chips(devices, catalog)
    if len({c.key for c in chips.values()}) < 2:
        return None
    per_host = "; ".join(f"{host}: {chip.name}" for host, chip in chips.items())
    others = {c.key: c for c in chips.values() if c.key != chosen.key}
    off = ", ".join(f"{c.name} peak FLOP/s {_ratio(c.peak_bf16_flops_per_s, chosen.peak_bf16_flops_per_s)} and "
                    f"HBM bandwidth {_ratio(c.hbm_bytes_per_s, chosen.hbm_bytes_per_s)} of it"
                    for c in others.values())
    return (f"the hosts run different chips ({per_host}): the merged ops are priced as the {chosen.name}, so "
            f"predictions for the other hosts' ops are off by their chips' peaks ({off}); analyse each host "
            "alone with --host NAME")

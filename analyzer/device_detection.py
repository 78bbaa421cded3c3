"""Which catalog chip a trace's device plane is, and which of its numbers the trace's own peaks replace."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .chip_catalog import Chip, find_chip, normalize_name, load_catalog


def _hint_number(hints: Mapping[str, Any], name: str) -> float | None:
    value = hints.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _match_gpu_by_counts(vendor: str, hints: Mapping[str, Any], chips: Mapping[str, Chip]) -> Chip | None:
    """Among a vendor's chips, the one whose SM/CU count matches; ties broken by memory size."""
    cores = _hint_number(hints, "core_count")
    if cores is None:
        return None
    same = [c for c in chips.values() if c.vendor == vendor and c.core_count == int(cores)]
    if len(same) <= 1:
        return same[0] if same else None
    memory = _hint_number(hints, "memory_size")
    if memory is None:
        # H100 and H200 share 132 SMs: without the memory size take the first listed; the note says so.
        return same[0]
    return min(same, key=lambda c: abs((c.hbm_capacity_bytes or 0.0) - memory))


def chip_for_device(
    device_type_string: str | None,
    vendor: str | None,
    model_hints: Mapping[str, Any] | None = None,
    catalog: Mapping[str, Chip] | None = None,
) -> tuple[Chip | None, str]:
    """Identify the chip of a device plane and apply the peaks the trace records.

    ``model_hints`` may simply be the device plane's stats: string values are tried as model names;
    ``core_count`` and ``memory_size`` tell GPUs apart (MI300X: AMD with 304 CUs); trace peaks
    ``peak_teraflops_per_second``, ``peak_hbm_bw_gigabytes_per_second`` (TPU), ``memory_bandwidth`` and
    ``memory_size`` (GPU, bytes) replace the table's. Returns (chip or None, a one-line note saying how the
    chip was chosen and which numbers came from the trace, or why none was).
    """
    chips = load_catalog() if catalog is None else catalog
    hints = dict(model_hints or {})
    vendor_norm = normalize_name(vendor) if vendor else ""
    chip: Chip | None = None
    how = ""

    if device_type_string:
        chip = find_chip(device_type_string, chips)
        how = f"device_type_string {device_type_string!r}"
    if chip is None:
        for name, value in hints.items():
            if isinstance(value, str) and value.strip() and name != "device_vendor":
                chip = find_chip(value, chips)
                if chip is not None:
                    how = f"{name} {value!r}"
                    break
    if chip is None and vendor_norm:
        vendor_key = {"nvidia corporation": "nvidia"}.get(vendor_norm, vendor_norm)
        chip = _match_gpu_by_counts(vendor_key, hints, chips)
        if chip is not None:
            how = f"vendor {vendor!r} with core_count {int(hints['core_count'])}"
            twins = [c.name for c in chips.values() if c is not chip and c.vendor == chip.vendor
                     and c.core_count == chip.core_count]
            if twins and _hint_number(hints, "memory_size") is None:
                how += f"; could also be {', '.join(twins)} (no memory_size to tell)"
    if chip is None:
        # Only call it a CPU when nothing points at an accelerator: an unknown GPU must not get CPU peaks.
        is_cpu = normalize_name(device_type_string or "") == "cpu" or (
            not device_type_string and vendor_norm in ("", "cpu") and "core_count" not in hints)
        if is_cpu and "cpu" in chips:
            chip, how = chips["cpu"], "no accelerator described (CPU host)"
        else:
            described = ", ".join(
                f"{k}={v!r}" for k, v in (("device_type_string", device_type_string), ("vendor", vendor),
                                            *sorted((k, v) for k, v in hints.items() if k in
                                                    ("core_count", "memory_size", "compute_cap_major",
                                                     "compute_cap_minor"))) if v is not None)
            return None, (f"unknown device ({described or 'nothing recorded'}): name the chip (e.g. 'v6e', "
                          "'h100') or add it in a chips file")

    teraflops = _hint_number(hints, "peak_teraflops_per_second")
    hbm_gb = _hint_number(hints, "peak_hbm_bw_gigabytes_per_second")
    hbm_bytes_per_s = hbm_gb * 1e9 if hbm_gb is not None else _hint_number(hints, "memory_bandwidth")
    capacity = _hint_number(hints, "memory_size")
    chip = chip.with_trace_peaks(
        peak_flops_per_s=None if teraflops is None else teraflops * 1e12,
        hbm_bytes_per_s=hbm_bytes_per_s,
        hbm_capacity_bytes=capacity,
    )
    from_trace = sorted(k for k, v in chip.number_sources.items() if v == "trace")
    note = f"{chip.name} (from {how})"
    if from_trace:
        note += "; from the trace: " + ", ".join(from_trace)
    if chip.key == "cpu":
        note += "; CPU numbers are a rough placeholder"
    return chip, note

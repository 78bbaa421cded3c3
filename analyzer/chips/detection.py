"""Which catalog chip a trace's device plane is, and which of its numbers the trace's own peaks replace.

Detection goes by vendor first: a device that names NVIDIA, AMD or a TPU is never taken for the CPU. A
known chip is found by its device string, then (GPUs) by compute capability and SM/CU count, with the
memory size telling apart chips that share both (H100/H200/GH200, MI300X/MI325X). An accelerator that
matches nothing becomes "unknown <vendor> GPU/TPU" priced with the trace's own peaks, and the note says
which numbers are missing.

Trace peaks win for known chips unless they disagree with the table by more than :data:`TRACE_TABLE_LIMIT`
(then the table wins and a warning says so: the MI300 capture's ``memory_bandwidth`` reads half the
datasheet). Numbers are per device: a chip that JAX shows as several devices (TPU7x TensorCores, TPU
v2/v3 cores, MI250X GCDs) is priced per device, which is also what its trace planes report.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .catalog import Chip, ChipCatalogError
from .dump_platform import DumpPlatform, default_chip, mismatch_warning
from .names import find_chip, normalize_name, slice_name_problem
from .plausible import format_field, plausible, range_text

TRACE_TABLE_LIMIT = 1.5
# A chip sold in variants (V100 16/32 GB, A100 40/80 GB, H100 SXM/NVL) takes the trace's memory size and
# bandwidth up to this far from the table: they tell which variant recorded the trace.
VARIANT_LIMIT = 2.5
_VARIANT_FIELDS = ("hbm_capacity_bytes", "hbm_bytes_per_s")
_VENDOR_LABEL = {"nvidia": "NVIDIA GPU", "amd": "AMD GPU", "google": "TPU", "gpu": "GPU"}
# Device-string wording of a GPU plane without a vendor stat (capture.py builds 'GPU (compute capability 7.0),
# 80 cores'; other writers say 'sm_70', 'gfx942', '108 SMs', '304 CUs').
_CC_WORDS = re.compile(r"compute capability\s*(\d+)\.(\d+)|(?<![a-z0-9])sm_?(\d+?)\.?(\d)(?![0-9])", re.IGNORECASE)
_GFX = re.compile(r"(?<![a-z0-9])gfx(\d)([0-9a-f])[0-9a-f](?![0-9a-z])", re.IGNORECASE)
_CORES = re.compile(r"\b(\d+)\s*(?:cores|sms|cus|compute units|multiprocessors)\b", re.IGNORECASE)
_NVIDIA_WORDS = re.compile(r"(?<![a-z0-9])sm_?\d|\bcuda\b|\d\s*sms\b|\bstreaming multiprocessors\b|\bnvlink\b")
_AMD_WORDS = re.compile(r"(?<![a-z0-9])gfx\d|\brocm\b|\bhip\b|\d\s*cus\b|\bcompute units\b|\bradeon\b")
# (field, trace stat, scale to SI, label) — the trace numbers a device plane may carry.
_TRACE_NUMBERS = (
    ("peak_bf16_flops_per_s", "peak_teraflops_per_second", 1e12, "peak FLOP/s"),
    ("hbm_bytes_per_s", "peak_hbm_bw_gigabytes_per_second", 1e9, "HBM bandwidth"),
    ("hbm_bytes_per_s", "memory_bandwidth", 1.0, "HBM bandwidth"),
    ("hbm_capacity_bytes", "memory_size", 1.0, "HBM capacity"),
)


@dataclass(frozen=True)
class Detection:
    chip: Chip
    note: str  # how the chip was chosen and which numbers came from the trace
    warnings: tuple[str, ...] = ()


def _number(stats: Mapping[str, Any], name: str, field: str | None = None, scale: float = 1.0) -> float | None:
    """The stat as a number in SI units, None when absent, not a number, not positive, or (``field`` given)
    outside that field's plausible range (chips/plausible.py)."""
    value = stats.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not (math.isfinite(value) and value > 0):
        return None
    value = float(value) * scale
    return value if field is None or plausible(field, value) else None


def implausible_stats(stats: Mapping[str, Any]) -> list[str]:
    """One warning per device stat present as a number but outside its plausible range (then not used).
    0 is how a capture says "not known": no warning."""
    out = []
    for field, stat, scale, label in _TRACE_NUMBERS + (("core_count", "core_count", 1.0, "core count"),):
        value = stats.get(stat)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and value != 0 and _number(stats, stat, field, scale) is None:  # 0: not known, as xprof writes
            # The stat as the trace wrote it: an implausible value (1e+300) has no readable SI form.
            out.append(f"the trace's {stat} ({value:.4g}) is not a plausible {label} (per device, "
                       f"{range_text(field)}): ignored")
    return out


def vendor_of(device_type: str | None, vendor: str | None, stats: Mapping[str, Any]) -> str:
    """'google' | 'nvidia' | 'amd' | 'gpu' (another GPU vendor) | 'cpu', from whatever the plane says."""
    text = normalize_name(f"{vendor or ''} {device_type or ''} {stats.get('device_vendor') or ''}")
    if "tpu" in text.split() or text.startswith("tpu") or "google" in text or "peak_teraflops_per_second" in stats:
        return "google"
    if "nvidia" in text:
        return "nvidia"
    if "amd" in text.split() or "advanced micro devices" in text or "instinct" in text:
        return "amd"
    if text.strip() in ("", "cpu", "host") and not {"core_count", "compute_cap_major"} & set(stats):
        return "cpu"
    return "gpu"


def _compute_capability(stats: Mapping[str, Any]) -> str | None:
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor", 0)
    if not _small_int(major):
        return None
    return f"{int(major)}.{int(minor) if _small_int(minor) else 0}"


def _small_int(value) -> bool:
    """A version number: a real number from 0 to 1000 (NaN, inf and 1e300 are damage; int() of them fails)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= 1000


def _stats_from_text(device_type: str | None, stats: Mapping[str, Any]) -> dict[str, Any]:
    """The plane stats, completed from the device string where a stat is missing: 'compute capability 7.0' /
    'sm_70' / 'gfx942' give the capability, '80 cores' / '80 SMs' / '304 CUs' the core count."""
    out, text = dict(stats), str(device_type or "")
    if _compute_capability(out) is None:
        m = _CC_WORDS.search(text)
        if m:
            major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            out.update(compute_cap_major=int(major), compute_cap_minor=int(minor))
        elif (g := _GFX.search(text)):
            out.update(compute_cap_major=int(g.group(1)), compute_cap_minor=int(g.group(2), 16))
    if _number(out, "core_count") is None and (m := _CORES.search(text)):
        out["core_count"] = int(m.group(1))
    return out


def gpu_vendor_from_words(text: str, stats: Mapping[str, Any], chips: Mapping[str, Chip]) -> tuple[str, str]:
    """(vendor, why) of a GPU whose plane names no vendor: the catalog chips its compute capability and core
    count match (when all are one vendor's), else CUDA wording (sm_NN, SMs, CUDA) or ROCm wording (gfxNNN,
    CUs, ROCm, HIP), else 'compute capability' (CUDA's term); ('gpu', '') when nothing tells."""
    cc, cores = _compute_capability(stats), _number(stats, "core_count")
    if cc is not None and cores is not None:
        vendors = {c.vendor for c in chips.values() if c.vendor in ("nvidia", "amd") and c.core_count == int(cores)
                   and c.compute_capability == cc}
        if len(vendors) == 1:
            vendor = vendors.pop()
            return vendor, f"{_VENDOR_LABEL[vendor]} by compute capability {cc} and {int(cores)} cores"
    low = text.lower()
    for vendor, words in (("nvidia", _NVIDIA_WORDS), ("amd", _AMD_WORDS)):
        m = words.search(low)
        if m:
            return vendor, f"{_VENDOR_LABEL[vendor]} by the word {m.group(0).lstrip('0123456789 ')!r}"
    if "compute capability" in low or cc is not None:
        return "nvidia", "NVIDIA GPU by its compute capability (CUDA's term)"
    return "gpu", ""


def _by_counts(vendor: str, stats: Mapping[str, Any], chips: Mapping[str, Chip]) -> tuple[Chip | None, str]:
    """Among a vendor's chips, the one whose compute capability and SM/CU count (per device) match; without a
    core count, the compute capability alone, the memory size telling its chips apart."""
    cores, cc = _number(stats, "core_count", "core_count"), _compute_capability(stats)
    if cores is None and cc is None:
        return None, ""
    same = [c for c in chips.values() if c.vendor == vendor and (cores is None or c.core_count == int(cores))
            and (cc is None or c.compute_capability in ((cc,) if cores is None else (None, cc)))]
    if not same:
        return None, ""
    how = f"{vendor}" + (f" with {int(cores)} cores" if cores is not None else "") + \
        (f", compute capability {cc}" if cc else "")
    memory = _number(stats, "memory_size", "hbm_capacity_bytes")
    if len(same) == 1:
        return same[0], how
    if memory is None:
        return same[0], how + f"; could also be {', '.join(c.name for c in same[1:])} (no memory_size to tell)"
    best = min(same, key=lambda c: abs(math.log((c.per_device().hbm_capacity_bytes or 1.0) / memory)))
    return best, how + f", {memory / 2**30:.0f} GiB"


def _known_chip(device_type, vendor: str, stats, chips) -> tuple[Chip | None, str]:
    pool = {k: c for k, c in chips.items() if c.vendor == vendor} if vendor != "gpu" else chips
    if device_type:
        chip = find_chip(device_type, pool)
        if chip is not None:
            return chip, f"device_type_string {device_type!r}"
    for name, value in stats.items():
        if isinstance(value, str) and value.strip() and name not in ("device_vendor", "device_type_string"):
            chip = find_chip(value, pool)
            if chip is not None:
                return chip, f"{name} {value!r}"
    return _by_counts(vendor, stats, chips) if vendor in ("nvidia", "amd") else (None, "")


def _apply_trace_numbers(chip: Chip, stats: Mapping[str, Any], trusted: bool,
                         only: tuple[str, ...] | None = None) -> tuple[Chip, list[str], list[str]]:
    """Trace numbers replace the table's unless (for a known chip) they differ by more than the limit
    (for a chip sold in variants: its memory size and bandwidth up to VARIANT_LIMIT). ``only``: these fields."""
    updates: dict[str, float] = {}
    warnings, used = [], []
    sources = dict(chip.number_sources)
    for field, stat, scale, label in _TRACE_NUMBERS:
        value = _number(stats, stat, field, scale)
        if value is None or field in updates or (only is not None and field not in only):
            continue
        table = getattr(chip, field)
        ratio = max(value / table, table / value) if table and math.isfinite(table) else 1.0
        variant = bool(chip.variants) and field in _VARIANT_FIELDS and ratio <= VARIANT_LIMIT
        if trusted or ratio <= TRACE_TABLE_LIMIT or variant:
            updates[field] = value
            sources[field] = "trace"
            if variant and not trusted and ratio > TRACE_TABLE_LIMIT:  # the variant rule decided: say so
                sources[field] = (f"trace: the {chip.name} comes as {', '.join(chip.variants)}; the trace's "
                                  f"{stat} ({format_field(field, value)}) is this device's own, not the table's "
                                  f"{format_field(field, table)}")
            used.append(field)
        else:
            sources[field] = (f"{sources.get(field, 'chip table')}; "
                              f"the trace's {stat} ({format_field(field, value)}) was {ratio:.1f}x off")
            warnings.append(f"the trace's {stat} ({format_field(field, value)}) differs from the {chip.name} table's "
                            f"{label} ({format_field(field, table)}) by {ratio:.1f}x (more than {TRACE_TABLE_LIMIT}x): "
                            "using the table")
    return dataclasses.replace(chip, number_sources=sources, **updates), used, warnings


def _unknown_chip(vendor: str, device_type: str | None, stats: Mapping[str, Any]) -> Chip:
    label = _VENDOR_LABEL.get(vendor, "accelerator")
    sources = {"peak_bf16_flops_per_s": "missing", "hbm_bytes_per_s": "missing"}
    return Chip(key=f"unknown-{vendor}", name=f"unknown {label}", vendor=vendor, peak_bf16_flops_per_s=math.nan,
                hbm_bytes_per_s=math.nan, interconnect="torus" if vendor == "google" else "switch",
                core_count=int(stats["core_count"]) if _number(stats, "core_count", "core_count") else None,
                compute_capability=_compute_capability(stats), number_sources=sources)


def chip_for_device(device_type: str | None, vendor: str | None, stats: Mapping[str, Any] | None,
                    catalog: Mapping[str, Chip]) -> Detection:
    """The chip of one device plane (``stats`` = its plane stats), priced per device, never None."""
    stats = dict(stats or {})
    kind = vendor_of(device_type, vendor, stats)
    if kind == "cpu":
        return Detection(catalog["cpu"], f"{catalog['cpu'].name} (no accelerator described); "
                                         "CPU numbers are a rough placeholder")
    why_vendor = ""
    if kind == "gpu":  # no vendor stat: the device string's words and the counts tell NVIDIA from AMD
        stats = _stats_from_text(device_type, stats)
        kind, why_vendor = gpu_vendor_from_words(f"{device_type or ''} {vendor or ''}", stats, catalog)
    chip, how = _known_chip(device_type, kind, stats, catalog)
    known = chip is not None
    if chip is None:
        chip = _unknown_chip(kind, device_type, stats)
        how = f"device {device_type or vendor or kind!r} matches no catalog chip"
    if why_vendor:
        how += f"; no device_vendor stat: {why_vendor}"
    chip, used, warnings = _apply_trace_numbers(chip.per_device(), stats, trusted=not known)
    warnings = implausible_stats(stats) + warnings
    note = f"{chip.name} (from {how})"
    if used:
        note += "; from the trace: " + ", ".join(sorted(used))
    if any(chip.number_sources.get(f, "").startswith("trace: ") for f in _VARIANT_FIELDS):
        note += f" (the {chip.name} comes as {', '.join(chip.variants)}: the trace's own size and bandwidth)"
    if not known:
        missing = [label for field, label in (("peak_bf16_flops_per_s", "peak FLOP/s"), ("hbm_bytes_per_s",
                   "HBM bandwidth")) if not math.isfinite(getattr(chip, field))]
        missing += ["interconnect bandwidth", "host-link bandwidth"]
        note += "; missing: " + ", ".join(missing) + " (name the chip with --chip or add it with --chip-file)"
        warnings.append(f"unknown chip ({device_type or vendor}), priced as an unknown "
                        f"{_VENDOR_LABEL.get(kind, 'accelerator')}: {', '.join(missing)} not known; "
                        "pass --chip NAME or a chips file")
    return Detection(chip, note, tuple(warnings))


def _same_model(a: Chip, b: Chip) -> bool:
    """Two catalog entries of one GPU model (A100 40 GB / 80 GB share the token 'A100')."""
    return a.vendor == b.vendor and bool({normalize_name(h) for h in a.model_hints}
                                         & {normalize_name(h) for h in b.model_hints})


def _dump_default(dump: DumpPlatform | None, catalog: Mapping[str, Chip]) -> Detection:
    """Without a trace and --chip: the default chip of the platform the dump was compiled for, else the CPU."""
    chip = default_chip(dump, catalog) if dump is not None else None
    if chip is None:
        cpu = catalog["cpu"]
        why = f"the dump was compiled for the CPU ({dump.evidence})" if dump is not None else "no trace and no --chip"
        return Detection(cpu, f"{cpu.name} ({why})",
                         (f"{why}: predictions use the generic CPU entry; pass --chip (e.g. --chip v6e)",))
    what = {"tpu": "a TPU (generation not in the dump)", "gpu": "a GPU"}[dump.platform]
    if dump.compute_capability:
        what += f" of compute capability {dump.compute_capability}"
    warning = (f"no trace and no --chip: the dump was compiled for {what} ({dump.evidence}), priced as the "
               f"{chip.name}; pass --chip NAME for the chip it runs on")
    return Detection(chip.per_device(), f"{chip.name} (the dump's platform: {dump.evidence}; chip table numbers)",
                     (warning,))


def choose_chip(devices: pd.DataFrame, platform: str, chip_name: str | None,
                catalog: Mapping[str, Chip], dump: DumpPlatform | None = None) -> Detection:
    """The chip an analysis prices with: detected from the first device plane, or named with ``--chip``
    (a name or a slice name such as ``v5p-128``); without a trace, ``dump`` (the platform the HLO dump was
    compiled for) picks the default and warns when ``--chip`` names another platform. Raises
    ChipCatalogError for an unknown ``--chip``."""
    first = devices.iloc[0] if len(devices) else None
    detected = None
    if first is not None and platform not in ("cpu", "hlo"):
        detected = chip_for_device(first.get("device_type"), first.get("vendor"), first.get("plane_stats") or {},
                                   catalog)
    if chip_name:
        named = find_chip(chip_name, catalog)
        if named is None:
            problem = slice_name_problem(chip_name, catalog)
            raise ChipCatalogError(f"--chip {chip_name!r}: {problem}" if problem else
                                   f"--chip {chip_name!r}: unknown chip; known: {', '.join(sorted(catalog))} "
                                   "(or a TPU slice name such as v6e-8)")
        slice_note = f", slice of {named.slice_chips} chips" if named.slice_chips else ""
        # The trace's peaks belong to the chip that recorded it: apply them only if that is the chip named.
        if detected is not None and detected.chip.key == named.key:
            chip = dataclasses.replace(detected.chip, slice_chips=named.slice_chips, slice_shape=named.slice_shape)
            return Detection(chip, f"{chip.name} (from --chip{slice_note}; matches the capture, trace peaks "
                                   "applied)", detected.warnings)
        mismatch = mismatch_warning(dump, named) if dump is not None and platform == "hlo" else None
        warnings, chip, how = ((mismatch,) if mismatch else ()), named.per_device(), "chip table numbers"
        if detected is not None and named.variants and _same_model(detected.chip, named):
            # Another variant of the same model (A100 40 vs 80 GB): the trace's size and bandwidth are the device's.
            chip, used, _ = _apply_trace_numbers(chip, first.get("plane_stats") or {}, False, _VARIANT_FIELDS)
            how = "chip table numbers" + (", the trace's " + ", ".join(used) if used else "")
        if detected is not None:
            warnings = (f"--chip {chip_name!r} overrides the detected {detected.chip.name}: using {how}",)
        return Detection(chip, f"{named.name} (from --chip{slice_note}; {how})", warnings)
    if platform == "hlo":
        return _dump_default(dump, catalog)
    if detected is None:
        return Detection(catalog["cpu"], f"{catalog['cpu'].name} (no accelerator in the capture)")
    return detected

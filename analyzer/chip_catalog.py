"""Chip catalog: peak FLOP/s, HBM and interconnect numbers per accelerator, and which source each came from.

Loading and name lookup only; which chip a trace's device plane is belongs to ``device_detection``.

The built-in table is ``chips.toml`` beside this module (figures and their sources are listed there and in
the shared reference ``hardware.md``). A user TOML file in the same format adds chips or overrides fields.
Peaks recorded in a trace win over both (:meth:`Chip.with_trace_peaks`); every numeric field carries its
provenance in :attr:`Chip.number_sources` so a report can say where each number came from.
"""

from __future__ import annotations

from ..errors import InputError

import dataclasses
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ChipCatalogError(InputError):
    """A chips file that cannot be read; the message is one line naming the file and the problem."""


# Numeric fields: float-valued and integer-valued. Everything else is text or a list of text.
_FLOAT_FIELDS = (
    "peak_bf16_flops_per_s",
    "peak_f32_flops_per_s",
    "peak_fp8_flops_per_s",
    "peak_int8_flops_per_s",
    "hbm_bytes_per_s",
    "hbm_capacity_bytes",
    "ici_link_bytes_per_s_oneway",
    "per_hop_latency_s",
    "pcie_bytes_per_s",
    "dcn_bytes_per_s",
)
_INT_FIELDS = ("core_count", "ici_links", "torus_dims", "wraparound_axis_multiple", "mxu_dim", "vmem_bytes")
_TEXT_FIELDS = ("name", "vendor", "interconnect", "sources")
_LIST_FIELDS = ("aliases", "trace_names", "model_hints")
_REQUIRED_FOR_NEW_CHIP = ("name", "peak_bf16_flops_per_s", "hbm_bytes_per_s")
_INTERCONNECTS = ("torus", "switch", "none")

# HLO element types → the peak column that applies. Anything else (pred, s32, f64…) uses bf16 with a note.
_DTYPE_PEAK = {
    "bf16": "bf16",
    "f16": "bf16",
    "f32": "f32",
    "tf32": "f32",
    "fp8": "fp8",
    "s8": "int8",
    "u8": "int8",
    "int8": "int8",
    "s4": "int8",
    "u4": "int8",
}


@dataclass(frozen=True)
class Chip:
    """One accelerator's roofline numbers, per chip (per GPU), SI units. ``None`` = not known."""

    key: str
    name: str
    vendor: str
    peak_bf16_flops_per_s: float
    hbm_bytes_per_s: float
    peak_f32_flops_per_s: float | None = None
    peak_fp8_flops_per_s: float | None = None
    peak_int8_flops_per_s: float | None = None
    hbm_capacity_bytes: float | None = None
    interconnect: str = "none"
    ici_link_bytes_per_s_oneway: float | None = None
    ici_links: int | None = None
    torus_dims: int | None = None
    wraparound_axis_multiple: int | None = None
    per_hop_latency_s: float | None = None
    pcie_bytes_per_s: float | None = None
    dcn_bytes_per_s: float | None = None
    mxu_dim: int | None = None
    vmem_bytes: int | None = None
    core_count: int | None = None
    aliases: tuple[str, ...] = ()
    trace_names: tuple[str, ...] = ()
    model_hints: tuple[str, ...] = ()
    sources: str = ""
    # field name -> 'chip table (<source>)' | 'trace' | 'user file (<path>)'
    number_sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def peak_for_dtype(self, dtype: str | None = "bf16") -> tuple[float, str]:
        """Peak FLOP/s for an HLO element type, and a note when it falls back to the bf16 peak."""
        kind = _peak_kind(dtype)
        if kind == "bf16":
            note = "" if _is_bf16_like(dtype) else f"no peak for dtype {dtype!r}: used the bf16 peak"
            return self.peak_bf16_flops_per_s, note
        value = getattr(self, f"peak_{kind}_flops_per_s")
        if value is None:
            return self.peak_bf16_flops_per_s, f"{self.name} has no {kind} peak in the table: used the bf16 peak"
        return value, ""

    def peak_flops_per_s(self, dtype: str | None = "bf16") -> float:
        """Peak FLOP/s for ``dtype`` (fp8 types → fp8 peak, s8/u8 → int8, f32 → f32, else bf16)."""
        return self.peak_for_dtype(dtype)[0]

    def ridge_point(self, dtype: str | None = "bf16") -> float:
        """Arithmetic intensity (FLOPs per HBM byte) above which an op is compute-bound: C / B_hbm."""
        return self.peak_flops_per_s(dtype) / self.hbm_bytes_per_s

    def with_trace_peaks(
        self,
        peak_flops_per_s: float | None = None,
        hbm_bytes_per_s: float | None = None,
        hbm_capacity_bytes: float | None = None,
    ) -> Chip:
        """A copy with the trace's own peaks (they win over the table); their sources become 'trace'.

        ``peak_flops_per_s`` is the trace's headline peak (TPU ``peak_teraflops_per_second`` × 1e12),
        which is the bf16 MXU peak; the other dtype peaks keep their table values.
        """
        updates: dict[str, float] = {}
        for name, value in (
            ("peak_bf16_flops_per_s", peak_flops_per_s),
            ("hbm_bytes_per_s", hbm_bytes_per_s),
            ("hbm_capacity_bytes", hbm_capacity_bytes),
        ):
            if value is not None and math.isfinite(value) and value > 0:
                updates[name] = float(value)
        if not updates:
            return self
        sources = dict(self.number_sources)
        sources.update({name: "trace" for name in updates})
        return dataclasses.replace(self, number_sources=sources, **updates)


def _is_bf16_like(dtype: str | None) -> bool:
    return dtype is None or str(dtype).strip().lower() in ("bf16", "f16", "bfloat16", "float16", "")


def _peak_kind(dtype: str | None) -> str:
    d = "" if dtype is None else str(dtype).strip().lower()
    if d.startswith("f8") or d.startswith("float8"):
        return "fp8"  # f8e4m3fn, f8e5m2, f8e4m3fnuz, …
    return _DTYPE_PEAK.get(d, "bf16")


# ---------------------------------------------------------------- loading


def _builtin_toml() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("chips.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _check_entry(key: str, entry: Any, where: str) -> dict[str, Any]:
    """Validate one [chip.<key>] table; returns its fields (field_sources kept aside)."""
    if not isinstance(entry, dict):
        raise ChipCatalogError(f"{where}: [chip.{key}] must be a table")
    known = set(_FLOAT_FIELDS) | set(_INT_FIELDS) | set(_TEXT_FIELDS) | set(_LIST_FIELDS) | {"field_sources"}
    for name, value in entry.items():
        if name not in known:
            raise ChipCatalogError(f"{where}: [chip.{key}] unknown field {name!r}")
        bad = None
        if name in _FLOAT_FIELDS:
            # A rate of 0 would make every prediction for this chip infinite (or NaN) without a word.
            positive = name.endswith("_per_s")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not (value > 0 if positive else value >= 0):
                bad = "a finite number > 0" if positive else "a finite number >= 0"
        elif name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                bad = "an integer >= 0"
        elif name in _TEXT_FIELDS:
            if not isinstance(value, str):
                bad = "a string"
            elif name == "interconnect" and value not in _INTERCONNECTS:
                bad = "one of " + ", ".join(_INTERCONNECTS)
        elif name in _LIST_FIELDS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                bad = "a list of strings"
        elif name == "field_sources":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                bad = "a table of strings"
        if bad:
            raise ChipCatalogError(f"{where}: [chip.{key}] field {name!r} must be {bad}, got {value!r}")
    return entry


def _parse_tables(doc: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    chips = doc.get("chip")
    extra = set(doc) - {"chip"}
    if extra:
        raise ChipCatalogError(f"{where}: unexpected top-level key(s) {sorted(extra)}; chips go in [chip.<name>]")
    if not isinstance(chips, dict) or not chips:
        raise ChipCatalogError(f"{where}: no [chip.<name>] tables found")
    return {str(k).lower(): _check_entry(k, v, where) for k, v in chips.items()}


def _build_chip(key: str, fields: dict[str, Any], sources_by_field: dict[str, str]) -> Chip:
    kwargs: dict[str, Any] = {"key": key, "vendor": fields.get("vendor", "unknown")}
    for name in _FLOAT_FIELDS:
        if name in fields:
            kwargs[name] = float(fields[name])
    for name in _INT_FIELDS + ("name", "interconnect", "sources"):
        if name in fields:
            kwargs[name] = fields[name]
    for name in _LIST_FIELDS:
        kwargs[name] = tuple(fields.get(name, ()))
    number_sources = {n: sources_by_field[n] for n in _FLOAT_FIELDS + _INT_FIELDS if n in fields}
    return Chip(number_sources=number_sources, **kwargs)


def load_catalog(extra_file: Path | str | None = None) -> dict[str, Chip]:
    """The built-in catalog keyed by short name ('v6e', 'h100', 'cpu'…), plus a user file if given.

    A user file uses the same ``[chip.<key>]`` tables. An existing key is updated field by field (those
    fields' sources become 'user file (<path>)'); a new key must give name, peak_bf16_flops_per_s and
    hbm_bytes_per_s. Any problem raises :class:`ChipCatalogError` with a one-line message.
    """
    merged: dict[str, dict[str, Any]] = {}
    field_src: dict[str, dict[str, str]] = {}
    for key, entry in _parse_tables(_builtin_toml(), "built-in chips.toml").items():
        per_field = entry.pop("field_sources", {})
        merged[key] = entry
        default = f"chip table ({entry.get('sources', 'chips.toml')})"
        field_src[key] = {n: f"chip table ({per_field[n]})" if n in per_field else default for n in entry}

    if extra_file is not None:
        path = Path(extra_file)
        where = f"chips file {path}"
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ChipCatalogError(f"{where}: cannot read ({exc.strerror or exc})") from None
        except UnicodeDecodeError:
            raise ChipCatalogError(f"{where}: not UTF-8 text") from None
        except tomllib.TOMLDecodeError as exc:
            raise ChipCatalogError(f"{where}: invalid TOML ({exc})".replace("\n", " ")) from None
        for key, entry in _parse_tables(doc, where).items():
            user_sources = entry.pop("field_sources", {})
            if key not in merged:
                missing = [n for n in _REQUIRED_FOR_NEW_CHIP if n not in entry]
                if missing:
                    raise ChipCatalogError(f"{where}: new chip [chip.{key}] is missing {', '.join(missing)}")
                merged[key], field_src[key] = {}, {}
            merged[key].update(entry)
            for n in entry:
                note = f"; {user_sources[n]}" if n in user_sources else ""
                field_src[key][n] = f"user file ({path}{note})"

    return {key: _build_chip(key, merged[key], field_src[key]) for key in merged}


# ---------------------------------------------------------------- matching names


def normalize_name(text: str) -> str:
    return " ".join(re.sub(r"[_\-]+", " ", str(text)).lower().split())


def find_chip(name_or_trace_string: str | None, catalog: Mapping[str, Chip] | None = None) -> Chip | None:
    """The chip a user name or trace string denotes, or None.

    Exact (case-insensitive, '_'/'-' as spaces) matches on key, name, aliases and trace names first:
    'v6e', 'TPU v6e', 'tpu_v6e', 'TPU v6 Lite'. TPU strings never match by substring ("TPU v5" must not
    find "TPU v5 lite"). Then GPU model tokens inside longer names: 'NVIDIA H100 80GB HBM3' → H100,
    'AMD Instinct MI300X' → MI300X; the longest token wins and a token must not be glued to a preceding
    letter or digit ('GH200' is not an 'H200').
    """
    if not name_or_trace_string:
        return None
    chips = load_catalog() if catalog is None else catalog
    wanted = normalize_name(name_or_trace_string)
    for chip in chips.values():
        names = {chip.key, chip.name, *chip.aliases, *chip.trace_names}
        if wanted in {normalize_name(n) for n in names}:
            return chip
    best: tuple[int, Chip] | None = None
    for chip in chips.values():
        for hint in chip.model_hints:
            if re.search(rf"(?<![a-z0-9]){re.escape(normalize_name(hint))}(?![0-9])", wanted):
                if best is None or len(hint) > best[0]:
                    best = (len(hint), chip)
    return None if best is None else best[1]

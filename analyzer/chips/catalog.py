"""Chip catalog: peak FLOP/s, HBM and interconnect numbers per accelerator, and the public source of each.

Loading, validation and the :class:`Chip` record only. Name lookup (user names, slice names such as
``v6e-8``) lives in ``chip_names``; which chip a trace's device plane is belongs to ``device_detection``.

The built-in table is ``chips.toml`` beside this module: ``[source.<id>]`` tables name the public pages and
``[chip.<key>.cite]`` ties every number of a chip to one of them, so :attr:`Chip.number_sources` can say
where each number came from. A user TOML file in the same format adds chips or overrides fields.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...parsers.input_files import read_input_text
from ...text_safety import check_nesting
from .dtype_peaks import is_bf16_like, peak_kind
from .plausible import plausible, range_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ChipCatalogError(InputError):
    """A chips file that cannot be read; the message is one line naming the file and the problem."""


FLOAT_FIELDS = (
    "peak_bf16_flops_per_s", "peak_f16_flops_per_s", "peak_f32_flops_per_s", "peak_fp8_flops_per_s",
    "peak_int8_flops_per_s", "hbm_bytes_per_s", "hbm_capacity_bytes", "ici_link_bytes_per_s_oneway",
    "per_hop_latency_s", "kernel_launch_floor_s", "pcie_bytes_per_s", "dcn_bytes_per_s",
)
INT_FIELDS = (
    "core_count", "ici_links", "torus_dims", "wraparound_axis_multiple", "mxu_dim", "vmem_bytes",
    "devices_per_node", "scale_up_domain", "devices_per_chip", "tensorcores_per_chip",
)
# Descriptive fields that are facts about the hardware: they need a source like the numbers do.
FACT_FIELDS = ("interconnect", "wraparound", "compute_capability", "slice_name_counts", "link_topology")
_TEXT_FIELDS = ("name", "vendor", "sources") + FACT_FIELDS
_LIST_FIELDS = ("aliases", "trace_names", "model_hints", "variants")
_REQUIRED_FOR_NEW_CHIP = ("name", "peak_bf16_flops_per_s", "hbm_bytes_per_s")
_CHOICES = {
    "interconnect": ("torus", "switch", "none"),
    "wraparound": ("axis", "full_cube", "none"),
    "slice_name_counts": ("tensorcores", "chips"),
    "link_topology": ("all_to_all", "hybrid_cube_mesh"),
}
# What a device's share of a chip is when one chip shows up as several devices (TPU7x TensorCores, MI250X GCDs).
_PER_DEVICE_FIELDS = (
    "peak_bf16_flops_per_s", "peak_f16_flops_per_s", "peak_f32_flops_per_s", "peak_fp8_flops_per_s",
    "peak_int8_flops_per_s", "hbm_bytes_per_s", "hbm_capacity_bytes",
)


@dataclass(frozen=True)
class Chip:
    """One accelerator's roofline numbers, per chip (or per device after :meth:`per_device`), SI units.

    ``None`` = not known. ``slice_chips`` / ``slice_shape`` are set only when the user named a slice
    (``v5p-128``, ``v5p-4x4x4``): the slice size in chips and, where the name gives it, its shape.
    """

    key: str
    name: str
    vendor: str
    peak_bf16_flops_per_s: float
    hbm_bytes_per_s: float
    peak_f16_flops_per_s: float | None = None
    peak_f32_flops_per_s: float | None = None
    peak_fp8_flops_per_s: float | None = None
    peak_int8_flops_per_s: float | None = None
    hbm_capacity_bytes: float | None = None
    interconnect: str = "none"
    ici_link_bytes_per_s_oneway: float | None = None
    ici_links: int | None = None
    torus_dims: int | None = None
    wraparound: str = "none"
    wraparound_axis_multiple: int | None = None
    per_hop_latency_s: float | None = None
    kernel_launch_floor_s: float | None = None  # GPUs: the least time an op that launches a kernel takes
    pcie_bytes_per_s: float | None = None
    dcn_bytes_per_s: float | None = None
    devices_per_node: int | None = None
    scale_up_domain: int | None = None
    devices_per_chip: int = 1
    tensorcores_per_chip: int | None = None
    slice_name_counts: str | None = None
    # GPUs of a node: "all_to_all" (an NVSwitch / full mesh: every pair at the GPU's whole bandwidth) or
    # "hybrid_cube_mesh" (DGX-1 V100: a pair shares 0-2 NVLinks; models/topology.py prices the group's links).
    link_topology: str = "all_to_all"
    compute_capability: str | None = None
    mxu_dim: int | None = None
    vmem_bytes: int | None = None
    core_count: int | None = None
    aliases: tuple[str, ...] = ()
    trace_names: tuple[str, ...] = ()
    model_hints: tuple[str, ...] = ()
    # Models sold under this entry with other HBM sizes / bandwidths (V100 16/32 GB): a trace's own
    # capacity and bandwidth are that model's, so they win over the table's (chips/detection.py).
    variants: tuple[str, ...] = ()
    sources: str = ""
    slice_chips: int | None = None
    slice_shape: tuple[int, ...] | None = None
    per_device_view: bool = False
    # field name -> 'chip table (<source>)' | 'trace' | 'user file (<path>)'
    number_sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def peak_for_dtype(self, dtype: str | None = "bf16") -> tuple[float, str]:
        """Peak FLOP/s for an HLO element type, and a note when it falls back to the bf16 peak."""
        kind = peak_kind(dtype)
        if kind == "bf16":
            note = "" if is_bf16_like(dtype) else f"no peak for dtype {dtype!r}: used the bf16 peak"
            return self.peak_bf16_flops_per_s, note
        value = getattr(self, f"peak_{kind}_flops_per_s")
        if value is None:
            silent = kind == "f16"  # f16 runs at the bf16 rate unless the table says otherwise
            note = "" if silent else f"{self.name} has no {kind} peak in the table: used the bf16 peak"
            return self.peak_bf16_flops_per_s, note
        return value, ""

    def peak_flops_per_s(self, dtype: str | None = "bf16") -> float:
        """Peak FLOP/s for ``dtype`` (fp8 types → fp8 peak, s8/u8 → int8, f32 → f32, f16 → f16, else bf16)."""
        return self.peak_for_dtype(dtype)[0]

    def per_device(self) -> Chip:
        """The numbers of one JAX device: a chip that shows up as N devices gives each 1/N of its compute,
        HBM bandwidth and capacity (TPU7x: one device per TensorCore; MI250X: one per GCD). Interconnect
        numbers stay per chip. Idempotent."""
        n = self.devices_per_chip or 1
        if n <= 1 or self.per_device_view:
            return self
        updates = {f: getattr(self, f) / n for f in _PER_DEVICE_FIELDS if getattr(self, f) is not None}
        sources = dict(self.number_sources)
        for f in updates:
            if sources.get(f, "").startswith(("chip table", "user file")):
                sources[f] = f"{sources[f]} ÷ {n} devices per chip"
        return dataclasses.replace(self, number_sources=sources, per_device_view=True, **updates)

    def has_wraparound(self, axis_size: int, slice_shape: tuple[int, ...] | None = None) -> bool:
        """Whether a mesh axis of ``axis_size`` chips is a full (bidirectional) ring on this chip.

        A switch connects every pair (as good as a ring). TPU v5e/v6e ("axis"): an axis of a multiple of
        16 chips. TPU v4/v5p/7x ("full_cube"): only when the slice is built of whole 4×4×4 cubes, i.e. every
        slice dimension is a multiple of 4 (a 2×2×4 has none); without the slice shape the axis alone must
        be a multiple of 4 (a necessary condition, not a sufficient one).
        """
        if self.interconnect != "torus":
            return True
        multiple = self.wraparound_axis_multiple or 0
        if self.wraparound == "none" or multiple <= 0 or axis_size < multiple or axis_size % multiple:
            return False
        shape = slice_shape if slice_shape is not None else self.slice_shape
        if self.wraparound == "full_cube" and shape is not None:
            return all(d % multiple == 0 for d in shape)
        return True

    def with_trace_peaks(
        self,
        peak_flops_per_s: float | None = None,
        hbm_bytes_per_s: float | None = None,
        hbm_capacity_bytes: float | None = None,
    ) -> Chip:
        """A copy with the given trace numbers, those in their plausible range (chips/plausible.py); how they
        compare with the table is ``detection``'s business."""
        updates: dict[str, float] = {}
        for name, value in (
            ("peak_bf16_flops_per_s", peak_flops_per_s),
            ("hbm_bytes_per_s", hbm_bytes_per_s),
            ("hbm_capacity_bytes", hbm_capacity_bytes),
        ):
            if value is not None and plausible(name, value):
                updates[name] = float(value)
        if not updates:
            return self
        sources = dict(self.number_sources)
        sources.update({name: "trace" for name in updates})
        return dataclasses.replace(self, number_sources=sources, **updates)


# ---------------------------------------------------------------- loading


def _builtin_toml() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("chips.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _field_problem(name: str, value: Any) -> str | None:
    """What is wrong with one field's value, or None."""
    if name in FLOAT_FIELDS:
        # A rate of 0 would make every prediction for this chip infinite (or NaN) without a word.
        positive = name.endswith("_per_s")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not (value > 0 if positive else value >= 0):
            return "a finite number > 0" if positive else "a finite number >= 0"
        if not plausible(name, value):  # 5e-324 bytes of HBM: positive, and a log(0) later
            return f"a plausible value ({range_text(name)})"
    elif name in INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return "an integer >= 0"
    elif name in _TEXT_FIELDS:
        if not isinstance(value, str):
            return "a string"
        if name in _CHOICES and value not in _CHOICES[name]:
            return "one of " + ", ".join(_CHOICES[name])
    elif name in _LIST_FIELDS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "a list of strings"
    elif name in ("field_sources", "cite"):
        if not isinstance(value, dict):
            return "a table"
    return None


def _check_entry(key: str, entry: Any, where: str) -> dict[str, Any]:
    """Validate one [chip.<key>] table; returns its fields (field_sources / cite kept aside by the caller)."""
    if not isinstance(entry, dict):
        raise ChipCatalogError(f"{where}: [chip.{key}] must be a table")
    known = set(FLOAT_FIELDS) | set(INT_FIELDS) | set(_TEXT_FIELDS) | set(_LIST_FIELDS) | {"field_sources", "cite"}
    for name, value in entry.items():
        if name not in known:
            raise ChipCatalogError(f"{where}: [chip.{key}] unknown field {name!r}")
        bad = _field_problem(name, value)
        if bad:
            raise ChipCatalogError(f"{where}: [chip.{key}] field {name!r} must be {bad}, got {value!r}")
    return entry


def _parse_tables(doc: dict[str, Any], where: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict]]:
    chips, sources = doc.get("chip"), doc.get("source", {})
    extra = set(doc) - {"chip", "source"}
    if extra:
        raise ChipCatalogError(f"{where}: unexpected top-level key(s) {sorted(extra)}; chips go in [chip.<name>]")
    if not isinstance(chips, dict) or not chips:
        raise ChipCatalogError(f"{where}: no [chip.<name>] tables found")
    if not isinstance(sources, dict):
        raise ChipCatalogError(f"{where}: [source] must hold [source.<id>] tables")
    return {str(k).lower(): _check_entry(k, v, where) for k, v in chips.items()}, sources


def describe_source(source_id: str, sources: Mapping[str, Mapping[str, Any]]) -> str:
    """'<title>; <address>' for a cited page, 'assumption: <title>' for a stated assumption. The address
    goes without its scheme: reports are self-contained pages and carry no links."""
    src = sources.get(source_id) or {}
    title = str(src.get("title", source_id))
    if src.get("kind") == "assumption":
        return f"assumption: {title}"
    address = str(src.get("url", "")).split("://", 1)[-1]
    return f"{title}; {address}" if address else title


def _cited_sources(key: str, cite: Any, sources: Mapping[str, Any], where: str) -> dict[str, str]:
    """field -> description of its source, from a [chip.<key>.cite] table of <source id> = [fields]."""
    out: dict[str, str] = {}
    for source_id, fields in (cite or {}).items():
        if source_id not in sources:
            raise ChipCatalogError(f"{where}: [chip.{key}.cite] names unknown source {source_id!r}")
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise ChipCatalogError(f"{where}: [chip.{key}.cite] {source_id} must be a list of field names")
        for f in fields:
            out[f] = describe_source(source_id, sources)
    return out


def _build_chip(key: str, fields: dict[str, Any], sources_by_field: dict[str, str]) -> Chip:
    kwargs: dict[str, Any] = {"key": key, "vendor": fields.get("vendor", "unknown")}
    for name in FLOAT_FIELDS:
        if name in fields:
            kwargs[name] = float(fields[name])
    for name in INT_FIELDS + _TEXT_FIELDS:
        if name in fields and name != "vendor":
            kwargs[name] = fields[name]
    for name in _LIST_FIELDS:
        kwargs[name] = tuple(fields.get(name, ()))
    # Facts (interconnect kind, wraparound rule…) are cited in the TOML too, but only numbers travel here.
    number_sources = {n: sources_by_field.get(n, "chip table") for n in FLOAT_FIELDS + INT_FIELDS if n in fields}
    return Chip(number_sources=number_sources, **kwargs)


def _read_user_file(path: Path) -> dict[str, Any]:
    where = f"chips file {path}"
    try:
        text = read_input_text(path)
        check_nesting(text, where, "toml", error=ChipCatalogError)  # tomllib recurses per level
        return tomllib.loads(text)
    except OSError as exc:
        raise ChipCatalogError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ChipCatalogError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ChipCatalogError(f"{where}: invalid TOML ({exc})".replace("\n", " ")) from None


def load_catalog(extra_file: Path | str | None = None) -> dict[str, Chip]:
    """The built-in catalog keyed by short name ('v6e', 'h100', 'cpu'…), plus a user file if given.

    A user file uses the same ``[chip.<key>]`` tables. An existing key is updated field by field (those
    fields' sources become 'user file (<path>)'); a new key must give name, peak_bf16_flops_per_s and
    hbm_bytes_per_s. Any problem raises :class:`ChipCatalogError` with a one-line message.
    """
    where = "built-in chips.toml"
    builtin, sources = _parse_tables(_builtin_toml(), where)
    merged: dict[str, dict[str, Any]] = {}
    field_src: dict[str, dict[str, str]] = {}
    for key, entry in builtin.items():
        cited = _cited_sources(key, entry.pop("cite", None), sources, where)
        entry.pop("field_sources", None)
        merged[key] = entry
        field_src[key] = {n: f"chip table ({text})" for n, text in cited.items()}

    if extra_file is not None:
        path = Path(extra_file)
        user, user_sources_table = _parse_tables(_read_user_file(path), f"chips file {path}")
        for key, entry in user.items():
            user_sources = entry.pop("field_sources", {})
            user_cited = _cited_sources(key, entry.pop("cite", None), {**sources, **user_sources_table},
                                        f"chips file {path}")
            if key not in merged:
                missing = [n for n in _REQUIRED_FOR_NEW_CHIP if n not in entry]
                if missing:
                    raise ChipCatalogError(f"chips file {path}: new chip [chip.{key}] is missing {', '.join(missing)}")
                merged[key], field_src[key] = {}, {}
            merged[key].update(entry)
            for n in entry:
                note = user_sources.get(n) or user_cited.get(n)
                field_src[key][n] = f"user file ({path}{'; ' + str(note) if note else ''})"

    return {key: _build_chip(key, merged[key], field_src[key]) for key in merged}


def builtin_sources() -> dict[str, dict[str, Any]]:
    """The ``[source.<id>]`` tables of the built-in catalog (id -> title, url | kind)."""
    return dict(_builtin_toml().get("source", {}))

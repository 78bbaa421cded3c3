"""Names users and traces give chips: catalog keys, aliases, device strings, GPU model tokens, TPU slice names.

A slice name (``v6e-8``, ``v5litepod-16``, ``v5p-128``, ``tpu7x-128``, or with a shape: ``v5p-4x4x4``)
returns the chip with :attr:`Chip.slice_chips` set. What the number counts depends on the generation
(``slice_name_counts`` in the catalog): TensorCores on v2, v3, v4, v5p and TPU7x (``v5p-128`` and
``tpu7x-128`` are 64 chips), chips on v5e and v6e (``v6e-8`` is 8 chips).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

from .catalog import Chip, load_catalog

_SLICE = re.compile(r"^\s*(?P<prefix>[a-z0-9 ]+?)[-_ ](?P<size>\d+(?:x\d+){0,2})\s*$", re.IGNORECASE)
_GB_TOKEN = re.compile(r"(?<![0-9])(\d+)\s*gb\b")


def normalize_name(text: str) -> str:
    return " ".join(re.sub(r"[_\-]+", " ", str(text)).lower().split())


def _exact(wanted: str, chips: Mapping[str, Chip]) -> Chip | None:
    for chip in chips.values():
        names = {chip.key, chip.name, *chip.aliases, *chip.trace_names}
        if wanted in {normalize_name(n) for n in names}:
            return chip
    return None


def _by_model_token(wanted: str, chips: Mapping[str, Chip]) -> Chip | None:
    """GPU model tokens inside longer names: the longest token wins; a token glued to a preceding letter
    or digit does not count ('GH200' is not an 'H200'). Chips sharing the token (A100 40GB / 80GB) are told
    apart by a 'NNGB' token in the name, else the one whose own alias is the token."""
    best_len, candidates = 0, []
    for chip in chips.values():
        for hint in chip.model_hints:
            h = normalize_name(hint)
            if re.search(rf"(?<![a-z0-9]){re.escape(h)}(?![0-9])", wanted):
                if len(h) > best_len:
                    best_len, candidates = len(h), [(chip, h)]
                elif len(h) == best_len and chip not in [c for c, _ in candidates]:
                    candidates.append((chip, h))
    if len(candidates) <= 1:
        return candidates[0][0] if candidates else None
    gb = _GB_TOKEN.search(wanted)
    if gb and float(gb.group(1)) > 0:  # a '0GB' token tells nothing (and would divide by 0)
        size = float(gb.group(1)) * 1e9
        return min((c for c, _ in candidates), key=lambda c: abs(math.log((c.hbm_capacity_bytes or 1.0) / size)))
    for chip, hint in candidates:
        if hint in {normalize_name(a) for a in chip.aliases}:
            return chip
    return candidates[0][0]


def parse_slice_name(name: str, chips: Mapping[str, Chip]) -> Chip | None:
    """The TPU chip of a slice name with its slice size (chips) and shape where given; None if not one."""
    m = _SLICE.match(str(name))
    if not m:
        return None
    chip = _exact(normalize_name(m.group("prefix")), chips)
    if chip is None or chip.vendor != "google" or not chip.slice_name_counts:
        return None
    size = m.group("size").lower()
    if "x" in size:
        shape = tuple(int(d) for d in size.split("x"))
        if len(shape) != (chip.torus_dims or len(shape)) or 0 in shape:
            return None
        return dataclasses.replace(chip, slice_chips=math.prod(shape), slice_shape=shape)
    count = int(size)
    per_chip = (chip.tensorcores_per_chip or 1) if chip.slice_name_counts == "tensorcores" else 1
    if count <= 0 or count % per_chip:
        return None
    return dataclasses.replace(chip, slice_chips=count // per_chip)


def slice_name_problem(name: str, chips: Mapping[str, Chip]) -> str | None:
    """Why a name that looks like a TPU slice is not one ('v5p-127': TensorCores come in pairs), or None."""
    m = _SLICE.match(str(name))
    chip = _exact(normalize_name(m.group("prefix")), chips) if m else None
    if chip is None or chip.vendor != "google" or parse_slice_name(name, chips) is not None:
        return None
    if chip.slice_name_counts == "tensorcores" and "x" not in m.group("size").lower():
        return (f"{chip.name} slice names count TensorCores ({chip.tensorcores_per_chip} per chip): "
                f"{m.group('size')} is not a whole number of chips")
    return f"{chip.name} slices are {chip.torus_dims}-D: give the shape as " + "x".join(["N"] * (chip.torus_dims or 2))


def find_chip(name_or_trace_string: str | None, catalog: Mapping[str, Chip] | None = None) -> Chip | None:
    """The chip a user name, slice name or trace string denotes, or None.

    Exact (case-insensitive, '_'/'-' as spaces) matches on key, name, aliases and trace names first:
    'v6e', 'TPU v6e', 'tpu_v6e', 'TPU v6 Lite'. TPU strings never match by substring ("TPU v5" must not
    find "TPU v5 lite"). Then TPU slice names ('v5p-128'), then GPU model tokens inside longer names:
    'NVIDIA H100 80GB HBM3' → H100, 'AMD Instinct MI300X' → MI300X.
    """
    if not name_or_trace_string:
        return None
    chips = load_catalog() if catalog is None else catalog
    wanted = normalize_name(name_or_trace_string)
    return (_exact(wanted, chips) or parse_slice_name(name_or_trace_string, chips)
            or _by_model_token(wanted, chips))

"""A finding's ``details`` as a person reads them (the "Rule numbers" section of the HTML and Markdown reports).

Each key's label, unit and explanation come from its rule's docstring *Details* line (``rules/catalog.py``):
``exposed_s_per_step (s): seconds per step the device waits ...`` reads "Seconds per step the device waits
... : 1.68 ms", with the whole line as its explanation. Values are formatted by the documented type (s,
bytes, flops, fraction, count), nested keys (an op list's ``exposed_where_in_flight_measured_s_per_step``)
by their name's unit suffix. No number is written in scientific notation.
"""

from __future__ import annotations

import re
from functools import cache

from ..units import format_bytes, format_number, format_percent, format_seconds, format_si

MAX_ITEMS = 20  # list entries and nested keys shown; the JSON report has them all
_CLAUSE = re.compile(r": |; | \(|, (?:at most|null|or |as )")


@cache
def _documented() -> dict[str, dict[str, tuple[str, str]]]:
    """rule id -> key -> (type, meaning), read from the rule docstrings once."""
    from ..rules.catalog import rule_catalog

    return {row["id"]: {d.name: (d.type, d.meaning) for d in row["details"]} for row in rule_catalog()}


def label_of(meaning: str, key: str) -> str:
    """A short label: the meaning's first clause ('seconds per step the device waits for these transfers'),
    capitalised; the key in words where the docstring lists values (`tpu`, `gpu`...) or says too little."""
    head = _CLAUSE.split(meaning.replace("`", "").replace("_", " "), 1)[0].strip(" ,.") if meaning else ""
    if meaning.startswith("`") or len(head.split()) <= 2:
        head = words_of(key)
    return head[:1].upper() + head[1:]


def words_of(key: str) -> str:
    """A nested key in words, its unit suffix as a unit: 'exposed_where_in_flight_measured_s_per_step' ->
    'exposed where in flight measured (s/step)'."""
    if key == "s_per_step":
        return "time per step"
    for suffix, unit in (("_s_per_step", " (s/step)"), ("_bytes_per_step", " (bytes/step)"),
                         ("_per_step", " per step"), ("_flops_per_byte", " (FLOP/byte)"), ("_fraction", " (share)"),
                         ("_bytes", " (bytes)"), ("_flops", " (FLOP)"), ("_s", " (s)")):
        if key.endswith(suffix) and key != suffix.lstrip("_"):
            return key[: -len(suffix)].replace("_", " ") + unit
    return key.replace("_", " ")


def value_text(value, type_: str = "", key: str = "") -> str:
    """``value`` in words by its documented type, else by the key's unit suffix."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        shown = "; ".join(value_text(v, "", key) for v in value[:MAX_ITEMS])
        return shown + (f"; … {len(value) - MAX_ITEMS} more in the JSON report" if len(value) > MAX_ITEMS else "")
    if isinstance(value, dict):
        return ", ".join(f"{words_of(str(k))}: {value_text(v, '', str(k))}" for k, v in list(value.items())[:MAX_ITEMS])
    if not isinstance(value, (int, float)):
        return str(value)
    if key.endswith("_per_s"):  # a rate, whatever its documented type
        return format_si(value, "B/s" if "bytes" in key.split("_") else "FLOP/s" if "flops" in key else "/s")
    kind = type_.removesuffix(" or null") or _type_by_name(key)
    if kind == "s":
        return format_seconds(value)
    if kind == "bytes":
        return format_bytes(value)
    if kind == "flops":
        return format_si(value, "FLOP")
    if kind == "fraction":
        return format_percent(value)
    return format_number(value)


def _type_by_name(key: str) -> str:
    words = key.split("_")
    if key.endswith("_per_s"):
        return ""
    if key == "s_per_step" or key.endswith(("_s", "_s_per_step")):
        return "s"
    if "bytes" in words and not key.endswith("_per_byte"):
        return "bytes"
    if words[-1] == "flops" or key.endswith("flops_per_step"):
        return "flops"
    if key.endswith(("_fraction", "_share")) or key.startswith("fraction"):
        return "fraction"
    return ""


def detail_rows(rule: str, details: dict) -> list[dict]:
    """One row per key: ``label`` (readable, with no raw key), ``value`` (formatted), ``explain`` (the
    docstring line, for a tooltip), ``key`` (the JSON name, for those who script against it)."""
    documented = _documented().get(rule, {})
    rows = []
    for key, value in details.items():
        type_, meaning = documented.get(key, ("", ""))
        rows.append({"key": key, "label": label_of(meaning, key), "value": value_text(value, type_, key),
                     "explain": f"{meaning} (JSON: details.{key})" if meaning else f"JSON: details.{key}"})
    return rows

"""The scopes icicle chart of the HTML report: one row per depth of the name paths, each scope as wide as its
time per step, its children below it, heaviest first, left to right (what is left of a scope's width past its
children is its own ops' time).

Each cell is a nested ``<svg>`` (which clips its label) carrying its span of the root, ``data-x0`` and
``data-x1`` (0 to 1); the report's script (templates/report.js) zooms on a click by rewriting those spans, so
the chart needs no data injected into the script. Labels come from the profile and are escaped (``_e``).
"""

from __future__ import annotations

import hashlib

from ..units import format_percent, format_seconds, format_si
from .svg_base import _e, _svg_open

ROW_H = 22
MIN_SHARE = 0.001  # of the root: thinner scopes are not drawn (their time still counts in their parent)
MAX_CELLS = 1500
_PALETTE = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7", "#bebada", "#80b1d3",
            "#fccde5", "#d9d9d9", "#ccebc5")


def _colour(name: str, parent: int | None) -> int:
    """A stable palette index per scope name (the same layer reads the same in every report), never its
    parent's (the next one then), so a scope stands out from the one above it."""
    index = int(hashlib.md5(name.encode("utf-8")).hexdigest()[:6], 16) % len(_PALETTE)
    return (index + 1) % len(_PALETTE) if index == parent else index


def layout(scopes: list[dict], key: str) -> list[tuple[dict, float, float]]:
    """(scope, x0, x1) with x as a share of the root's ``key`` time: children side by side inside their parent,
    heaviest first; scopes under :data:`MIN_SHARE` (and their children) left out."""
    if not scopes or not (scopes[0][key] or 0) > 0:
        return []
    total = float(scopes[0][key])
    placed = {scopes[0]["scope"]: [0.0, 0.0]}  # scope -> [x0, next free x for a child]
    out = [(scopes[0], 0.0, 1.0)]
    for s in scopes[1:]:  # depth first: a parent comes before its children
        share = (s[key] or 0.0) / total
        parent = placed.get(s["parent"])
        if parent is None or share < MIN_SHARE or len(out) >= MAX_CELLS:
            continue
        x0 = parent[1]
        parent[1] = x0 + share
        placed[s["scope"]] = [x0, x0]
        out.append((s, x0, x0 + share))
    return out


def _tip(s: dict, key: str, measured: bool, step_s: float | None) -> str:
    word = "measured" if measured else "predicted"
    own = s["self_measured_s_per_step" if measured else "self_predicted_s_per_step"]
    parts = [s["scope"] or "(the whole step)",
             f"{word} {format_seconds(s[key])} per step"
             + (f" ({format_percent(s[key] / step_s)} of the step)" if step_s else ""),
             f"in the scope itself {format_seconds(own)}"]
    if measured:
        parts.append(f"predicted {format_seconds(s['total_predicted_s_per_step'])}")
    parts.append(f"{format_si(s['total_flops_per_step'], 'FLOP')}, {format_si(s['total_bytes_per_step'], 'B')} "
                 f"per step, {s['total_ops']} ops")
    if s["finding_keys"]:
        parts.append("findings: " + ", ".join(s["finding_keys"][:5]) + (" …" if len(s["finding_keys"]) > 5 else ""))
    return "\n".join(parts)


def icicle_chart(scopes: list[dict], *, measured: bool, step_s: float | None = None, width: int = 1100,
                 element_id: str = "scopes-icicle") -> str:
    """The chart's ``<svg>``, or '' when no scope has time (no name paths, nothing measured or predicted)."""
    key = "total_measured_s_per_step" if measured else "total_predicted_s_per_step"
    cells = layout(scopes, key)
    if len(cells) < 2:
        return ""
    depth = max(s["depth"] for s, _, _ in cells) + 1
    parts = [_svg_open(width, depth * ROW_H, "chart icicle", "Time per scope of the name paths", element_id),
             "<title>Time per scope (click to zoom)</title>"]
    colours: dict[str, int] = {}
    for s, x0, x1 in cells:
        colours[s["scope"]] = colour = _colour(s["name"], colours.get(s["parent"]))
        label = f"{s['name']} {format_seconds(s[key])}"
        parts.append(
            f'<svg class="sc" x="{x0 * width:.2f}" y="{s["depth"] * ROW_H}" width="{max((x1 - x0) * width, 0.5):.2f}" '
            f'height="{ROW_H - 1}" data-x0="{x0:.6f}" data-x1="{x1:.6f}" data-depth="{s["depth"]}">'
            f'<title>{_e(_tip(s, key, measured, step_s))}</title>'
            f'<rect width="100%" height="100%" fill="{_PALETTE[colour]}" stroke="#fff"/>'
            f'<text x="4" y="{ROW_H - 7}" font-size="12" fill="#222">{_e(label)}</text></svg>')
    parts.append("</svg>")
    return "".join(parts)

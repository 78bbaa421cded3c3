"""Inline SVG for the compare HTML: a waterfall of the largest op deltas and the two per-step distributions.

Same conventions as :mod:`.svg` (whose helpers, in :mod:`.svg_base`, these reuse): numbers and labels in, one
``<svg>`` out, every label escaped, nothing external.
"""

from __future__ import annotations

from ..units import finite, format_seconds
from .compare_model import signed_seconds
from .svg_base import _e, _svg_open, shorten

SLOWER, FASTER, TOTAL = "#e15759", "#59a14f", "#4e79a7"


def waterfall(base_s: float, new_s: float, deltas: list[tuple[str, float]], *, width: int = 760,
              element_id: str = "op-waterfall") -> str:
    """Base step, then each (label, delta) from the running total, then what the ops do not explain (idle,
    overlap, ops left out), then the new step. The axis starts near the smallest total so small deltas
    show; the two totals are drawn from it (the axis start is labelled)."""
    if not (finite(base_s) and finite(new_s)):
        return ""
    rest = new_s - base_s - sum(d for _, d in deltas)
    steps: list[tuple[str, float, float, str]] = [("base step", 0.0, base_s, TOTAL)]
    run = base_s
    for label, d in [*deltas, ("everything else (other ops, idle, overlap)", rest)]:
        steps.append((label, run, run + d, SLOWER if d > 0 else FASTER))
        run += d
    steps.append(("new step", 0.0, new_s, TOTAL))
    ends = [v for _, a, b, _ in steps[1:-1] for v in (a, b)] + [base_s, new_s]
    lo, hi = min(ends), max(ends)
    pad = max(hi - lo, 1e-12) * 0.15
    lo, hi = max(lo - pad, 0.0), hi + pad
    ml, mr, row, mt = 250, 90, 22, 20
    pw = width - ml - mr
    height = mt + row * len(steps) + 10

    def px(v: float) -> float:
        return ml + pw * (max(v, lo) - lo) / (hi - lo)

    parts = [_svg_open(width, height, "chart waterfall", "step time waterfall: base to new by op", element_id),
             f'<text x="{ml}" y="12" font-size="11" fill="#555">axis from {_e(format_seconds(lo))}</text>']
    for i, (label, a, b, colour) in enumerate(steps):
        y = mt + i * row
        x0, x1 = sorted((px(a), px(b)))
        value = format_seconds(b) if colour == TOTAL else signed_seconds(b - a)
        parts.append(f'<text x="{ml - 6}" y="{y + 14}" font-size="11" text-anchor="end" fill="#333">'
                     f'{_e(shorten(label, 40))}<title>{_e(label)}</title></text>')
        parts.append(f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 1.0):.1f}" '
                     f'height="{row - 7}" fill="{colour}">'
                     f'<title>{_e(f"{label}: {value}")}</title></rect>')
        parts.append(f'<text x="{max(x0, x1) + 4:.1f}" y="{y + 14}" font-size="11" fill="#333">{_e(value)}</text>')
        if 0 < i < len(steps) - 1:  # connector from the running total
            parts.append(f'<line x1="{px(a):.1f}" x2="{px(a):.1f}" y1="{y - 4}" y2="{y + 3}" stroke="#999"/>')
    parts.append("</svg>")
    return "".join(parts)


def step_strip(base: list[float], new: list[float], *, width: int = 760, element_id: str = "step-strip") -> str:
    """Each measured step as a dot, base row over new row, means as bars: the spread the verdict weighs."""
    values = [v for v in (*base, *new) if finite(v)]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    pad = max(hi - lo, abs(hi) * 0.01, 1e-12) * 0.1
    lo, hi = lo - pad, hi + pad
    ml, mr, row = 60, 20, 28
    pw = width - ml - mr
    height = 2 * row + 24

    def px(v: float) -> float:
        return ml + pw * (v - lo) / (hi - lo)

    parts = [_svg_open(width, height, "chart step-strip", "per-step times, base and new", element_id)]
    for r, (label, vals, colour) in enumerate((("base", base, TOTAL), ("new", new, SLOWER))):
        y = 10 + r * row + row / 2
        parts.append(f'<text x="{ml - 8}" y="{y + 4}" font-size="12" text-anchor="end" fill="#333">{label}</text>')
        vals = [v for v in vals if finite(v)]
        for v in vals:
            parts.append(f'<circle cx="{px(v):.1f}" cy="{y}" r="4" fill="{colour}" fill-opacity="0.6">'
                         f'<title>{_e(format_seconds(v))}</title></circle>')
        if vals:
            m = sum(vals) / len(vals)
            parts.append(f'<line x1="{px(m):.1f}" x2="{px(m):.1f}" y1="{y - 10}" y2="{y + 10}" stroke="#222" '
                         f'stroke-width="2"><title>mean {_e(format_seconds(m))}</title></line>')
    yb = 10 + 2 * row + 10
    parts.append(f'<text x="{ml}" y="{yb}" font-size="11" fill="#555">{_e(format_seconds(lo))}</text>')
    parts.append(f'<text x="{width - mr}" y="{yb}" font-size="11" text-anchor="end" fill="#555">'
                 f'{_e(format_seconds(hi))}</text>')
    parts.append("</svg>")
    return "".join(parts)

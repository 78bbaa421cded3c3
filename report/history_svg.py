"""The small multiples of ``diagnose history``'s HTML: one small inline SVG line chart per series (step time,
MFU, each top op, each top finding), all on the same run axis, change points as dashed verticals."""

from __future__ import annotations

from ..units import finite
from .svg_base import _e, _svg_open

LINE = "#4e79a7"
CHANGE = "#e15759"


def small_multiple(title: str, values: list, fmt, changes: list[int], *, width: int = 240, height: int = 110,
                   labels: list[str] | None = None) -> str:
    """``values`` (one per run, None where absent) as a line with a dot per run; ``fmt`` formats a value;
    ``changes``: the run indices where a change point starts."""
    known = [v for v in values if finite(v)]
    parts = [_svg_open(width, height, "chart multiple", title)]
    parts.append(f'<text x="4" y="13" font-size="11" fill="#222">{_e(title[:42])}</text>')
    ml, mr, top, bottom = 6, 6, 22, height - 16
    n = len(values)

    def px(i: int) -> float:
        return ml + (width - ml - mr) * (i / (n - 1) if n > 1 else 0.5)

    for k in changes:  # between run k-1 and run k
        x = (px(k - 1) + px(k)) / 2
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{bottom}" stroke="{CHANGE}" '
                     f'stroke-dasharray="3 2"><title>change point at run {k + 1}</title></line>')
    if known:
        lo, hi = min(known), max(known)
        pad = max(hi - lo, abs(hi) * 0.02, 1e-15) * 0.15
        lo, hi = min(lo - pad, 0.0) if lo - pad < 0 <= lo else lo - pad, hi + pad

        def py(v: float) -> float:
            return bottom - (bottom - top) * (v - lo) / (hi - lo)

        points = [(px(i), py(v)) for i, v in enumerate(values) if finite(v)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{LINE}" stroke-width="1.5"/>')
        for i, v in enumerate(values):
            if finite(v):
                name = f" {labels[i]}" if labels else ""
                parts.append(f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="2.5" fill="{LINE}">'
                             f'<title>run {i + 1}{_e(name)}: {_e(fmt(v))}</title></circle>')
        parts.append(f'<text x="4" y="{height - 3}" font-size="10" fill="#555">{_e(fmt(min(known)))} – '
                     f'{_e(fmt(max(known)))}</text>')
    else:
        parts.append(f'<text x="4" y="{height / 2:.0f}" font-size="10" fill="#555">not measured</text>')
    parts.append("</svg>")
    return "".join(parts)

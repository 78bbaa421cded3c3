"""Inline SVG of what fills device memory at the program's peak (the JSON ``memory_at_peak``): one stacked
bar of the peak by kind, then one bar per largest buffer, coloured by kind. Self-contained like every chart
of the report (no external resource), every label escaped."""

from __future__ import annotations

from ..units import format_bytes, format_percent
from .memory_sections import KIND_COLOURS, KIND_ORDER, SHOWN, headline, scope_of
from .svg_base import _e, _svg_open, shorten

CHART_BUFFERS = 12


def memory_chart(section: dict, *, width: int = 1100, n: int = CHART_BUFFERS) -> str:
    total = max(int(section["peak_bytes"]), 1)
    buffers = section["buffers"][:n]
    bar_h, row_h, label_w = 28, 20, 460
    top = bar_h + 34
    height = top + row_h * len(buffers) + 6
    title = f"Memory at the peak: {format_bytes(total)} by kind and largest buffers"
    parts = [_svg_open(width, height, "chart memory-at-peak", title, "memory-chart"), f"<title>{_e(title)}</title>"]
    x = 0.0
    for kind in KIND_ORDER:
        v = int(section["bytes_by_kind"].get(kind, 0))
        if v <= 0:
            continue
        w = width * v / total
        tip = f"{kind}: {format_bytes(v)} ({format_percent(v / total)})"
        parts.append(f'<rect class="mem-seg mem-{kind}" x="{x:.2f}" y="0" width="{max(w, 0.5):.2f}" height="{bar_h}" '
                     f'fill="{KIND_COLOURS[kind]}"><title>{_e(tip)}</title></rect>')
        label = f"{kind} {format_percent(v / total)}"
        if w > 7 * len(label) + 8:
            fill = "#222" if kind == "unused" else "#fff"
            parts.append(f'<text x="{x + 6:.2f}" y="{bar_h / 2 + 4:.1f}" font-size="12" fill="{fill}" '
                         f'pointer-events="none">{_e(label)}</text>')
        x += w
    lx = 0.0
    for kind in KIND_ORDER:  # legend: every kind, with its bytes
        text = f"{kind}: {format_bytes(int(section['bytes_by_kind'].get(kind, 0)))}"
        parts.append(f'<rect x="{lx:.1f}" y="{bar_h + 8}" width="12" height="12" fill="{KIND_COLOURS[kind]}"/>'
                     f'<text class="legend" x="{lx + 17:.1f}" y="{bar_h + 18.5}" font-size="12" fill="#333">'
                     f'{_e(text)}</text>')
        lx += width / len(KIND_ORDER)
    largest = max((b["size_bytes"] for b in buffers), default=1) or 1
    for i, b in enumerate(buffers):
        y = top + i * row_h
        w = max((width - label_w - 90) * b["size_bytes"] / largest, 1.0)
        label = shorten(f"{b['buffer']} {b['shape']}", 62)
        tip = f"{b['buffer']} {b['shape']} ({b['kind']}): {format_bytes(b['size_bytes'])}; {b['op_name']}"
        parts.append(f'<text x="{label_w - 6}" y="{y + 13}" font-size="12" text-anchor="end" fill="#333">'
                     f'{_e(label)}</text>'
                     f'<rect class="mem-{_e(b["kind"])}" x="{label_w}" y="{y + 2}" width="{w:.2f}" '
                     f'height="{row_h - 5}" '
                     f'fill="{KIND_COLOURS.get(b["kind"], "#999")}"><title>{_e(tip)}</title></rect>'
                     f'<text x="{label_w + w + 6:.2f}" y="{y + 13}" font-size="12" fill="#333">'
                     f'{_e(format_bytes(b["size_bytes"]) + " " + b["kind"])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def html_view(section: dict | None, markup=str) -> dict | None:
    """What the HTML template's memory section reads (``svg``: the chart passed through ``markup``, Jinja's
    Markup to insert it as is; the rest is text the template escapes); None without a section."""
    if not section:
        return None
    rows = [{"buffer": b["buffer"], "kind": b["kind"], "size": format_bytes(b["size_bytes"]), "shape": b["shape"],
             "scope": scope_of(b)} for b in section["buffers"][:SHOWN]]
    return {"headline": headline(section), "svg": markup(memory_chart(section)), "rows": rows,
            "more": len(section["buffers"]) + section["buffers_left_out"] - len(rows)}

"""Inline SVG charts for the HTML report (numbers read as in every renderer: :mod:`xladiag.units`).

Pure functions: numbers and labels in, one ``<svg>`` string out. No external resources (fonts,
images, scripts): the report must open offline. Every label is escaped here, because op names,
categories and source paths come from the profile and may contain markup.
"""

from __future__ import annotations

import math

import pandas as pd

from ..units import finite as _finite
from ..units import format_percent, format_seconds
from .svg_base import (  # noqa: F401  (the charts' shared names, read from here by the renderers)
    BOUND_COLOURS,
    CLASS_COLOURS,
    CLASS_LABELS,
    CLASS_ORDER,
    EXPOSED_CLASSES,
    _e,
    _svg_open,
    short_source,
    shorten,
)
from .svg_roofline import Roof, roofline_chart  # noqa: F401

# ------------------------------------------------------------------ breakdown bar


def breakdown_bar(breakdown: dict, *, width: int = 760, title: str = "Step time breakdown",
                  element_id: str | None = "breakdown-bar") -> str:
    """A stacked bar of seconds per step by class, with a legend giving seconds and % of the total.

    Only the classes with time are drawn and listed, each segment at least 2 px wide (the others share the rest
    in proportion), so every legend swatch (class 'swatch') has a visible segment (class 'bar') of its colour.
    """
    values = {k: float(breakdown.get(k, 0.0) or 0.0) for k in CLASS_ORDER}
    values = {k: (v if math.isfinite(v) and v > 0 else 0.0) for k, v in values.items()}
    total = sum(values.values())
    present = [k for k in CLASS_ORDER if values[k] > 0]
    bar_h, legend_cols = 30, 3
    height = bar_h + 12 + math.ceil(len(present) / legend_cols) * 20
    parts = [_svg_open(width, height, "chart breakdown-bar", title, element_id), f"<title>{_e(title)}</title>"]
    if total <= 0:
        parts.append(f'<rect x="0" y="0" width="{width}" height="{bar_h}" fill="#eee"/>')
        parts.append(f'<text x="8" y="{bar_h / 2 + 4}" font-size="12" fill="#555">no time recorded</text>')
    x = 0.0
    for key, w in _segment_widths(values, present, width, floor=2.0):
        v = values[key]
        tip = f"{CLASS_LABELS[key]}: {format_seconds(v)} per step ({format_percent(v / total)})"
        parts.append(
            f'<rect class="seg seg-{key} bar" x="{x:.2f}" y="0" width="{w:.2f}" height="{bar_h}" '
            f'fill="{CLASS_COLOURS[key]}"><title>{_e(tip)}</title></rect>'
        )
        label = f"{CLASS_LABELS[key]} {format_percent(v / total)}"
        if w > 7 * len(label) + 8:
            fill = "#222" if key == "idle" else "#fff"
            parts.append(f'<text x="{x + 6:.2f}" y="{bar_h / 2 + 4:.1f}" font-size="12" fill="{fill}" '
                         f'pointer-events="none">{_e(label)}</text>')
        x += w
    col_w = width / legend_cols
    for i, key in enumerate(present):
        lx = (i % legend_cols) * col_w
        ly = bar_h + 10 + (i // legend_cols) * 20
        share = format_percent(values[key] / total)
        parts.append(f'<rect class="swatch" x="{lx:.1f}" y="{ly:.1f}" width="12" height="12" '
                     f'fill="{CLASS_COLOURS[key]}"/>')
        parts.append(
            f'<text class="legend" x="{lx + 17:.1f}" y="{ly + 10.5:.1f}" font-size="12" fill="#333">'
            f'{_e(CLASS_LABELS[key])}: {_e(format_seconds(values[key]))} ({_e(share)})</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _segment_widths(values: dict, keys: list, width: float, *, floor: float) -> list[tuple[str, float]]:
    """Each key's share of ``width``, none under ``floor`` px; the floored ones' extra comes from the others."""
    small = [k for k in keys if width * values[k] / sum(values[j] for j in keys) < floor]
    rest = sum(values[k] for k in keys if k not in small)
    room = width - floor * len(small)
    return [(k, floor if k in small else room * values[k] / rest) for k in keys]


# ------------------------------------------------------------------ timeline


def _coalesce(events: pd.DataFrame, min_px: float) -> pd.DataFrame:
    """Merge neighbouring same-class events closer than ``min_px`` so a 10k-op step stays a small SVG."""
    e = events.sort_values(["lane", "x0"], kind="stable").reset_index(drop=True)
    # End of everything drawn so far in the same lane (events may overlap on GPU streams).
    running_end = e.groupby("lane", sort=False)["x1"].cummax()
    prev_end = running_end.groupby(e["lane"], sort=False).shift().fillna(-1e9)
    new_lane = e["lane"].ne(e["lane"].shift())
    new_cls = e["time_class"].ne(e["time_class"].shift())
    gap = e["x0"] - prev_end > min_px
    run = (new_lane | new_cls | gap).cumsum()
    g = e.groupby(run, sort=False)
    out = g.agg(lane=("lane", "first"), time_class=("time_class", "first"), x0=("x0", "min"), x1=("x1", "max"),
                start_s=("start_s", "min"), duration_s=("duration_s", "sum"), count=("label", "size"))
    # A merged run is named after its longest op (the one a reader hovering it is looking for).
    out["label"] = e.loc[g["duration_s"].idxmax().to_numpy(), "label"].to_numpy()
    return out.reset_index(drop=True)


def timeline_chart(events: pd.DataFrame, lanes: list[str], **options) -> str:
    """:func:`timeline_parts` as one string."""
    return "".join(timeline_parts(events, lanes, **options))


def timeline_parts(
    events: pd.DataFrame,
    lanes: list[str],
    *,
    span_s: float,
    width: int = 960,
    element_id: str | None = "timeline",
    caption: str = "",
) -> list[str]:
    """Op events of one step per lane (device / stream), x = time from the step start: the SVG's pieces (a
    page written as it is made never holds its thousands of rectangles as one string).

    ``events`` columns: lane (one of ``lanes``), start_s (from the step start), duration_s,
    time_class (CLASS_ORDER), label. Collective and host-transfer events are drawn full height with
    an outline: on the op line their duration is the time the device waits for them (exposed).
    """
    ml, mr, mt = 150, 12, 26
    lane_h, gap = 16, 4
    n = max(len(lanes), 1)
    ph = n * (lane_h + gap)
    height = mt + ph + 30
    pw = width - ml - mr
    span = span_s if _finite(span_s) and span_s > 0 else 1.0
    parts = [_svg_open(width, height, "chart timeline", "Timeline of one representative step per device", element_id),
             "<title>Timeline of one representative step</title>"]
    present = ({c if c in CLASS_COLOURS else "other" for c in events["time_class"]}
               if events is not None and len(events) else set())
    parts += _timeline_legend(ml, present)
    lane_y = {name: mt + i * (lane_h + gap) for i, name in enumerate(lanes)}
    for name, y in lane_y.items():
        parts.append(f'<rect x="{ml}" y="{y}" width="{pw}" height="{lane_h}" fill="#f3f3f3"/>')
        parts.append(f'<text class="lane" x="{ml - 6}" y="{y + lane_h - 4}" font-size="11" text-anchor="end" '
                     f'fill="#333">{_e(shorten(name, 24))}<title>{_e(name)}</title></text>')
    if events is not None and len(events):
        ev = events[events["lane"].isin(lane_y)].copy()
        ev["x0"] = ml + pw * ev["start_s"].astype(float) / span
        ev["x1"] = ev["x0"] + pw * ev["duration_s"].astype(float) / span
        parts += _event_rects(_coalesce(ev, min_px=0.6), lane_y, lane_h)
    parts += _time_axis(mt + ph + 2, ml, pw, span, caption)
    parts.append("</svg>")
    return parts


def _timeline_legend(x: float, present: set) -> list[str]:
    """The colours of the classes drawn, on top, the exposed ones outlined as their events are."""
    parts = []
    for key in (k for k in CLASS_ORDER[:-1] if k in present):
        parts.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{CLASS_COLOURS[key]}"'
                     + (' stroke="#000" stroke-width="1"' if key in EXPOSED_CLASSES else "") + "/>")
        label = CLASS_LABELS[key] + (" (exposed)" if key in EXPOSED_CLASSES else "")
        parts.append(f'<text x="{x + 16}" y="16" font-size="11" fill="#333">{_e(label)}</text>')
        x += 30 + 7.0 * len(label)
    return parts


def _event_rects(ev: pd.DataFrame, lane_y: dict, lane_h: int) -> list[str]:
    """One rectangle per (coalesced) event, placed at its x0..x1 in its lane; exposed waits full height."""
    parts = []
    # Plain lists, zipped: a row tuple per event from pandas costs more than the rectangle's text.
    columns = [ev[c].tolist() for c in ("time_class", "lane", "x0", "x1", "label", "count", "duration_s", "start_s")]
    for time_class, lane, x0, x1, label, n, duration_s, start_s in zip(*columns):
        cls = time_class if time_class in CLASS_COLOURS else "other"
        y = lane_y[lane]
        exposed = cls in EXPOSED_CLASSES
        top, h = (y, lane_h) if exposed else (y + 2, lane_h - 4)
        w = max(x1 - x0, 0.6)
        what = label if n == 1 else f"{label} (+{n - 1} more ops)"
        tip = (f"{what}\n{CLASS_LABELS.get(cls, cls)}{' (exposed wait)' if exposed else ''}: "
               f"{format_seconds(duration_s)} at +{format_seconds(start_s)}")
        extra = ' stroke="#000" stroke-width="0.8"' if exposed else ""
        parts.append(
            f'<rect class="ev ev-{cls}{" exposed" if exposed else ""}" '
            f'x="{x0:.2f}" y="{top}" width="{w:.2f}" height="{h}" '
            f'fill="{CLASS_COLOURS[cls]}"{extra}><title>{_e(tip)}</title></rect>'
        )
    return parts


def _time_axis(axis_y: float, ml: float, pw: float, span: float, caption: str) -> list[str]:
    """Six ticks from the step start to ``span``, and the caption under the lane names."""
    parts = [f'<line x1="{ml}" y1="{axis_y}" x2="{ml + pw}" y2="{axis_y}" stroke="#999"/>']
    for i in range(6):
        t = span * i / 5
        x = ml + pw * i / 5
        parts.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#999"/>')
        anchor = "start" if i == 0 else "end" if i == 5 else "middle"
        parts.append(f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" font-size="11" text-anchor="{anchor}" '
                     f'fill="#444">{_e(format_seconds(t))}</text>')
    if caption:
        parts.append(f'<text x="4" y="{axis_y + 16}" font-size="11" fill="#666">{_e(shorten(caption, 28))}</text>')
    return parts


# ------------------------------------------------------------------ evidence bars

MEASURED_COLOUR, PREDICTED_COLOUR = "#e15759", "#4e79a7"


def bar_chart(rows: list[tuple[str, float, float | None]], *, width: int = 380, value_label: str = "measured",
              element_id: str | None = None, css_class: str = "evidence-chart") -> str:
    """One bar pair per op: measured over predicted (roofline) seconds per step, on one scale.

    Drawn at the body's font size (14 px at its natural width): the op name on its own line, then the two bars
    with their values. The gap between the bars is what the table's two numbers cannot show at a glance. A bar
    is at least 3 px wide so a near-zero prediction stays visible beside its legend swatch.
    """
    rows = [(str(lbl), float(m) if _finite(m) else 0.0, float(p) if _finite(p) else None) for lbl, m, p in rows]
    has_pred = any(p is not None for _, _, p in rows)
    font, bar_h, mr = 14, 11, 80
    block = font + 6 + bar_h * (2 if has_pred else 1) + 2 + 10
    top = font + 14  # the legend line
    height = top + len(rows) * block
    pw = width - mr
    vmax = max([m for _, m, _ in rows] + [p for _, _, p in rows if p is not None] + [1e-30])
    parts = [_svg_open(width, height, f"chart {css_class}", f"{value_label} and predicted time per step per op",
                       element_id)]
    parts += _bar_legend(font, [(MEASURED_COLOUR, f"{value_label} per step")]
                         + ([(PREDICTED_COLOUR, "predicted (roofline) per step")] if has_pred else []))
    for i, (label, m, p) in enumerate(rows):
        y = top + i * block
        parts.append(f'<text x="0" y="{y + font}" font-size="{font}" fill="#1d1d1f">{_e(shorten(label, 44))}'
                     f'<title>{_e(label)}</title></text>')
        y += font + 6
        for value, colour, word in ((m, MEASURED_COLOUR, value_label), (p, PREDICTED_COLOUR, "predicted")):
            if value is None:
                continue
            w = max(pw * value / vmax, 3.0)
            parts.append(f'<rect class="bar" x="0" y="{y}" width="{w:.1f}" height="{bar_h - 1}" fill="{colour}">'
                         f'<title>{_e(f"{label}: {word} {format_seconds(value)} per step")}</title></rect>')
            parts.append(f'<text x="{w + 5:.1f}" y="{y + bar_h - 1}" font-size="13" fill="#333">'
                         f'{_e(format_seconds(value))}</text>')
            y += bar_h
    parts.append("</svg>")
    return "".join(parts)


def _bar_legend(font: int, series: list[tuple[str, str]]) -> list[str]:
    """One swatch per drawn series (class 'swatch', the fill of its bars)."""
    parts, x = [], 0.0
    for colour, label in series:
        parts.append(f'<rect class="swatch" x="{x:.0f}" y="4" width="12" height="12" fill="{colour}"/>'
                     f'<text x="{x + 17:.0f}" y="15" font-size="13" fill="#333">{_e(label)}</text>')
        x += 30 + 7.6 * len(label)
    return parts

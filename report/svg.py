"""Inline SVG charts for the HTML report (numbers read as in every renderer: :mod:`xladiag.units`).

Pure functions: numbers and labels in, one ``<svg>`` string out. No external resources (fonts,
images, scripts): the report must open offline. Every label is escaped here, because op names,
categories and source paths come from the profile and may contain markup.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np
import pandas as pd

from ..units import finite as _finite
from ..units import format_percent, format_seconds, format_si

# Breakdown classes (analysis.breakdown keys / ops.time_class) and roofline bound-by classes.
CLASS_ORDER = ("compute", "memory", "collective", "host_transfer", "other", "idle")
CLASS_LABELS = {
    "compute": "compute",
    "memory": "memory",
    "collective": "collective",
    "host_transfer": "host transfer",
    "other": "other",
    "idle": "idle",
}
CLASS_COLOURS = {
    "compute": "#4e79a7",
    "memory": "#59a14f",
    "collective": "#e15759",
    "host_transfer": "#f28e2b",
    "other": "#b07aa1",
    "idle": "#d4d4d4",
}
BOUND_COLOURS = {
    "compute": "#4e79a7",
    "hbm": "#59a14f",
    "host": "#f28e2b",
    "ici": "#e15759",
    "latency": "#9c755f",
    "unknown": "#9d9d9d",
}
# Classes whose time on the op line is time the device waits (the exposed part of async work).
EXPOSED_CLASSES = ("collective", "host_transfer")

_FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"


# ------------------------------------------------------------------ labels


def shorten(text, limit: int) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: max(limit - 1, 1)] + "…"


def short_source(text) -> str:
    """A number's provenance without its reference: 'chip table (long reference …)' -> 'chip table'."""
    return str(text).split(" (", 1)[0] if text else ""


def _e(text) -> str:
    return escape("" if text is None else str(text), quote=True)


def _svg_open(width: float, height: float, css_class: str, label: str, element_id: str | None = None) -> str:
    ident = f' id="{_e(element_id)}"' if element_id else ""
    # No xmlns: inline SVG in HTML needs none, and the report then holds no URL at all.
    return (
        f'<svg{ident} class="{_e(css_class)}" role="img" aria-label="{_e(label)}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" style="{_FONT};max-width:100%;height:auto">'
    )


# ------------------------------------------------------------------ breakdown bar


def breakdown_bar(breakdown: dict, *, width: int = 760, title: str = "Step time breakdown",
                  element_id: str | None = "breakdown-bar") -> str:
    """A stacked bar of seconds per step by class, with a legend giving seconds and % of the total."""
    values = {k: float(breakdown.get(k, 0.0) or 0.0) for k in CLASS_ORDER}
    values = {k: (v if math.isfinite(v) and v > 0 else 0.0) for k, v in values.items()}
    total = sum(values.values())
    bar_h, pad = 30, 2
    legend_cols = 3
    legend_rows = math.ceil(len(CLASS_ORDER) / legend_cols)
    height = bar_h + 12 + legend_rows * 20
    parts = [_svg_open(width, height, "chart breakdown-bar", title, element_id), f"<title>{_e(title)}</title>"]
    x = 0.0
    if total <= 0:
        parts.append(f'<rect x="0" y="0" width="{width}" height="{bar_h}" fill="#eee"/>')
        parts.append(f'<text x="8" y="{bar_h / 2 + 4}" font-size="12" fill="#555">no time recorded</text>')
    for key in CLASS_ORDER:
        v = values[key]
        if total <= 0 or v <= 0:
            continue
        w = width * v / total
        tip = f"{CLASS_LABELS[key]}: {format_seconds(v)} per step ({format_percent(v / total)})"
        parts.append(
            f'<rect class="seg seg-{key}" x="{x:.2f}" y="0" width="{max(w, 0.5):.2f}" height="{bar_h}" '
            f'fill="{CLASS_COLOURS[key]}"><title>{_e(tip)}</title></rect>'
        )
        label = f"{CLASS_LABELS[key]} {format_percent(v / total)}"
        if w > 7 * len(label) + 8:
            fill = "#222" if key == "idle" else "#fff"
            parts.append(f'<text x="{x + 6:.2f}" y="{bar_h / 2 + 4:.1f}" font-size="12" fill="{fill}" pointer-events="none">{_e(label)}</text>')
        x += w
    col_w = width / legend_cols
    for i, key in enumerate(CLASS_ORDER):
        lx = (i % legend_cols) * col_w
        ly = bar_h + 10 + (i // legend_cols) * 20
        v = values[key]
        share = format_percent(v / total) if total > 0 else "n/a"
        parts.append(f'<rect x="{lx:.1f}" y="{ly:.1f}" width="12" height="12" fill="{CLASS_COLOURS[key]}"/>')
        parts.append(
            f'<text class="legend" x="{lx + 17:.1f}" y="{ly + 10.5:.1f}" font-size="12" fill="#333">'
            f'{_e(CLASS_LABELS[key])}: {_e(format_seconds(v))} ({_e(share)})</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


# ------------------------------------------------------------------ roofline


def _decade_range(lo: float, hi: float) -> tuple[int, int]:
    # A fifth of a decade of room so no dot sits on the frame.
    a, b = math.floor(math.log10(lo) - 0.2), math.ceil(math.log10(hi) + 0.2)
    return (a, b if b > a else a + 1)


def _decade_label(exp: int, unit: str) -> str:
    return format_si(10.0 ** exp, unit).replace(".0 ", " ")


def roofline_chart(
    points: pd.DataFrame,
    *,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
    peak_label: str = "",
    hbm_label: str = "",
    achieved_label: str = "measured",
    width: int = 680,
    height: int = 420,
    element_id: str | None = "roofline",
    note: str = "",
) -> str:
    """Log-log roofline: x = arithmetic intensity (FLOP/byte), y = achieved FLOP/s.

    ``points`` columns: label, intensity, achieved_flops_per_s, weight_s (dot area ~ time per step),
    bound_by. The roof is min(peak, intensity x HBM bandwidth); the ridge is where the two meet.
    """
    ml, mr, mt, mb = 96, 20, 28, 46
    pw, ph = width - ml - mr, height - mt - mb
    ok = np.zeros(0, dtype=bool)
    if points is not None and len(points):
        ai = pd.to_numeric(points["intensity"], errors="coerce").to_numpy(dtype=float)
        ach = pd.to_numeric(points["achieved_flops_per_s"], errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(ai) & np.isfinite(ach) & (ai > 0) & (ach > 0)
        pts = points[ok].copy()
        pts["p_ai"], pts["p_y"] = ai[ok], ach[ok]
    else:
        pts = pd.DataFrame(columns=["label", "weight_s", "bound_by", "p_ai", "p_y"])
    have_roof = _finite(peak_flops_per_s) and _finite(hbm_bytes_per_s) and peak_flops_per_s > 0 and hbm_bytes_per_s > 0
    ridge = peak_flops_per_s / hbm_bytes_per_s if have_roof else 1.0

    xs = list(pts["p_ai"]) + [ridge / 30, ridge * 30]
    ys = list(pts["p_y"]) + ([peak_flops_per_s * 1.2, peak_flops_per_s / 1e4] if have_roof else [1e9, 1e15])
    x0, x1 = _decade_range(min(xs), max(xs))
    y0, y1 = _decade_range(min(ys), max(ys))

    def px(v):
        return ml + pw * (math.log10(v) - x0) / (x1 - x0)

    def py(v):
        return mt + ph * (1 - (math.log10(v) - y0) / (y1 - y0))

    parts = [_svg_open(width, height, "chart roofline", "Roofline: arithmetic intensity against achieved FLOP/s", element_id),
             "<title>Roofline</title>",
             f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fbfbfb" stroke="#ccc"/>']
    xstep = 1 if x1 - x0 <= 10 else 2
    for e in range(x0, x1 + 1, xstep):
        x = px(10.0 ** e)
        parts.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#e6e6e6"/>')
        parts.append(f'<text class="tick" x="{x:.1f}" y="{mt + ph + 15}" font-size="11" text-anchor="middle" fill="#444">{_e(_decade_label(e, ""))}</text>')
    ystep = 1 if y1 - y0 <= 10 else 2
    for e in range(y0, y1 + 1, ystep):
        y = py(10.0 ** e)
        parts.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text class="tick" x="{ml - 5}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#444">{_e(_decade_label(e, "FLOP/s"))}</text>')
    parts.append(f'<text x="{ml + pw / 2}" y="{height - 8}" font-size="12" text-anchor="middle" fill="#222">arithmetic intensity (FLOP per HBM byte)</text>')
    parts.append(f'<text x="14" y="{mt + ph / 2}" font-size="12" text-anchor="middle" fill="#222" transform="rotate(-90 14 {mt + ph / 2})">{_e(achieved_label)} FLOP/s</text>')

    if have_roof:
        xa, xb = 10.0 ** x0, 10.0 ** x1
        slope_start = max(xa, 10.0 ** y0 / hbm_bytes_per_s)
        roof = [(slope_start, slope_start * hbm_bytes_per_s), (ridge, peak_flops_per_s), (xb, peak_flops_per_s)]
        path = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in roof)
        parts.append(f'<polyline class="roof" points="{path}" fill="none" stroke="#222" stroke-width="2"/>')
        parts.append(f'<line class="ridge" x1="{px(ridge):.1f}" y1="{py(peak_flops_per_s):.1f}" x2="{px(ridge):.1f}" y2="{mt + ph}" stroke="#888" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{px(ridge) + 4:.1f}" y="{mt + ph - 6}" font-size="11" fill="#555">ridge {_e(format_si(ridge, ""))} FLOP/B</text>')
        peak_text = f"compute roof {format_si(peak_flops_per_s, 'FLOP/s')}" + (f" ({peak_label})" if peak_label else "")
        parts.append(f'<text x="{ml + pw - 4}" y="{py(peak_flops_per_s) - 6:.1f}" font-size="11" text-anchor="end" fill="#222">{_e(shorten(peak_text, 70))}</text>')
        hbm_text = f"HBM {format_si(hbm_bytes_per_s, 'B/s')}" + (f" ({hbm_label})" if hbm_label else "")
        # Label the slope a little left of the ridge, rotated along it (45° on a square-decade plot).
        lx = max(slope_start * 3, ridge / 300)
        ang = -math.degrees(math.atan2((ph / (y1 - y0)), (pw / (x1 - x0))))
        parts.append(
            f'<text x="{px(lx):.1f}" y="{py(lx * hbm_bytes_per_s) - 6:.1f}" font-size="11" fill="#222" '
            f'transform="rotate({ang:.1f} {px(lx):.1f} {py(lx * hbm_bytes_per_s) - 6:.1f})">{_e(shorten(hbm_text, 50))}</text>'
        )

    if len(pts):
        w = pd.to_numeric(pts["weight_s"], errors="coerce").fillna(0.0).clip(lower=0.0).to_numpy(dtype=float)
        wmax = w.max() if len(w) and w.max() > 0 else 1.0
        pts["p_r"] = 2.5 + 9.0 * np.sqrt(w / wmax)
        pts = pts.assign(p_w=w).sort_values("p_w", ascending=False)  # big dots first, small ones stay visible
        for row in pts.itertuples(index=False):
            bound = str(getattr(row, "bound_by", "unknown") or "unknown")
            colour = BOUND_COLOURS.get(bound, BOUND_COLOURS["unknown"])
            tip = (f"{row.label}\nintensity {format_si(row.p_ai, 'FLOP/B')}, {achieved_label} {format_si(row.p_y, 'FLOP/s')}\n"
                   f"{format_seconds(row.p_w)} per step, bound by {bound}")
            parts.append(
                f'<circle class="op-dot" cx="{px(row.p_ai):.1f}" cy="{py(min(row.p_y, 10.0 ** y1)):.1f}" r="{row.p_r:.1f}" '
                f'fill="{colour}" fill-opacity="0.7" stroke="#fff" stroke-width="0.8"><title>{_e(tip)}</title></circle>'
            )
        present = [b for b in BOUND_COLOURS if b in set(pts["bound_by"].astype(str))]
        for i, b in enumerate(present):
            lx, ly = ml + 8 + i * 112, mt + 8
            parts.append(f'<circle cx="{lx + 5}" cy="{ly + 5}" r="5" fill="{BOUND_COLOURS[b]}" fill-opacity="0.8"/>')
            parts.append(f'<text x="{lx + 14}" y="{ly + 9}" font-size="11" fill="#333">{_e(b)}-bound</text>')
    else:
        parts.append(
            f'<text x="{ml + pw / 2}" y="{mt + ph / 2}" font-size="13" text-anchor="middle" fill="#666">'
            f'{_e(shorten(note or "no op has both FLOPs and bytes to place on the roofline", 64))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


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


def timeline_chart(
    events: pd.DataFrame,
    lanes: list[str],
    *,
    span_s: float,
    width: int = 960,
    element_id: str | None = "timeline",
    caption: str = "",
) -> str:
    """Op events of one step per lane (device / stream), x = time from the step start.

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
    # Legend on top.
    lx = ml
    for key in CLASS_ORDER[:-1]:
        parts.append(f'<rect x="{lx}" y="6" width="12" height="12" fill="{CLASS_COLOURS[key]}"'
                     + (' stroke="#000" stroke-width="1"' if key in EXPOSED_CLASSES else "") + "/>")
        label = CLASS_LABELS[key] + (" (exposed)" if key in EXPOSED_CLASSES else "")
        parts.append(f'<text x="{lx + 16}" y="16" font-size="11" fill="#333">{_e(label)}</text>')
        lx += 30 + 7.0 * len(label)
    lane_y = {name: mt + i * (lane_h + gap) for i, name in enumerate(lanes)}
    for name, y in lane_y.items():
        parts.append(f'<rect x="{ml}" y="{y}" width="{pw}" height="{lane_h}" fill="#f3f3f3"/>')
        parts.append(f'<text class="lane" x="{ml - 6}" y="{y + lane_h - 4}" font-size="11" text-anchor="end" fill="#333">{_e(shorten(name, 24))}<title>{_e(name)}</title></text>')
    if events is not None and len(events):
        ev = events[events["lane"].isin(lane_y)].copy()
        ev["x0"] = ml + pw * ev["start_s"].astype(float) / span
        ev["x1"] = ev["x0"] + pw * ev["duration_s"].astype(float) / span
        ev = _coalesce(ev, min_px=0.6)
        for row in ev.itertuples(index=False):
            cls = row.time_class if row.time_class in CLASS_COLOURS else "other"
            y = lane_y[row.lane]
            exposed = cls in EXPOSED_CLASSES
            top, h = (y, lane_h) if exposed else (y + 2, lane_h - 4)
            w = max(row.x1 - row.x0, 0.6)
            what = row.label if row.count == 1 else f"{row.label} (+{row.count - 1} more ops)"
            tip = f"{what}\n{CLASS_LABELS.get(cls, cls)}{' (exposed wait)' if exposed else ''}: {format_seconds(row.duration_s)} at +{format_seconds(row.start_s)}"
            extra = ' stroke="#000" stroke-width="0.8"' if exposed else ""
            parts.append(
                f'<rect class="ev ev-{cls}{" exposed" if exposed else ""}" x="{row.x0:.2f}" y="{top}" width="{w:.2f}" height="{h}" '
                f'fill="{CLASS_COLOURS[cls]}"{extra}><title>{_e(tip)}</title></rect>'
            )
    # Time axis.
    axis_y = mt + ph + 2
    parts.append(f'<line x1="{ml}" y1="{axis_y}" x2="{ml + pw}" y2="{axis_y}" stroke="#999"/>')
    for i in range(6):
        t = span * i / 5
        x = ml + pw * i / 5
        parts.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#999"/>')
        anchor = "start" if i == 0 else "end" if i == 5 else "middle"
        parts.append(f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" font-size="11" text-anchor="{anchor}" fill="#444">{_e(format_seconds(t))}</text>')
    if caption:
        parts.append(f'<text x="4" y="{axis_y + 16}" font-size="11" fill="#666">{_e(shorten(caption, 28))}</text>')
    parts.append("</svg>")
    return "".join(parts)


# ------------------------------------------------------------------ evidence bars


def bar_chart(rows: list[tuple[str, float, float | None]], *, width: int = 640, value_label: str = "measured",
              element_id: str | None = None, css_class: str = "evidence-chart") -> str:
    """Horizontal bars of seconds per step per op (``(label, measured_s, predicted_s or None)``).

    The predicted time, when known, is a thin dark bar under the measured one: the gap between
    the two is what the op loses against its roofline.
    """
    rows = [(str(lbl), float(m) if _finite(m) else 0.0, float(p) if _finite(p) else None) for lbl, m, p in rows]
    ml, mr = 210, 90
    bar_h, gap, mt = 14, 8, 6
    height = mt + len(rows) * (bar_h + gap) + 22
    pw = width - ml - mr
    vmax = max([m for _, m, _ in rows] + [p for _, _, p in rows if p is not None] + [1e-30])
    parts = [_svg_open(width, height, f"chart {css_class}", f"{value_label} time per step per op", element_id)]
    for i, (label, m, p) in enumerate(rows):
        y = mt + i * (bar_h + gap)
        w = pw * m / vmax
        parts.append(f'<text x="{ml - 6}" y="{y + bar_h - 3}" font-size="11" text-anchor="end" fill="#333">{_e(shorten(label, 34))}<title>{_e(label)}</title></text>')
        parts.append(f'<rect x="{ml}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar_h - 4}" fill="#e15759"><title>{_e(f"{label}: {value_label} {format_seconds(m)} per step")}</title></rect>')
        if p is not None:
            wp = pw * p / vmax
            parts.append(f'<rect x="{ml}" y="{y + bar_h - 4}" width="{max(wp, 0.5):.1f}" height="3" fill="#222"><title>{_e(f"{label}: predicted {format_seconds(p)} per step")}</title></rect>')
        parts.append(f'<text x="{ml + max(w, 0.5) + 4:.1f}" y="{y + bar_h - 4}" font-size="11" fill="#333">{_e(format_seconds(m))}</text>')
    ly = mt + len(rows) * (bar_h + gap) + 8
    parts.append(f'<rect x="{ml}" y="{ly}" width="10" height="8" fill="#e15759"/><text x="{ml + 14}" y="{ly + 8}" font-size="11" fill="#333">{_e(value_label)} per step</text>')
    parts.append(f'<rect x="{ml + 150}" y="{ly + 3}" width="10" height="3" fill="#222"/><text x="{ml + 164}" y="{ly + 8}" font-size="11" fill="#333">predicted (roofline) per step</text>')
    parts.append("</svg>")
    return "".join(parts)

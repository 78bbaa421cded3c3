"""The roofline chart of the HTML report: each op placed by arithmetic intensity and achieved FLOP/s under the
chip's compute and HBM roofs (conventions of :mod:`.svg`: numbers in, one escaped ``<svg>`` string out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..units import finite as _finite
from ..units import format_seconds, format_si
from .svg_base import BOUND_COLOURS, _e, _svg_open, shorten


@dataclass(frozen=True)
class Roof:
    """The chip's two roofs, and where each number comes from (shown beside it; '' for none)."""

    peak_flops_per_s: float
    hbm_bytes_per_s: float
    peak_label: str = ""
    hbm_label: str = ""

    @property
    def known(self) -> bool:
        return (_finite(self.peak_flops_per_s) and _finite(self.hbm_bytes_per_s)
                and self.peak_flops_per_s > 0 and self.hbm_bytes_per_s > 0)

    @property
    def ridge(self) -> float:
        """The intensity where the slope meets the compute roof (1 when there is no roof, to frame the axes)."""
        return self.peak_flops_per_s / self.hbm_bytes_per_s if self.known else 1.0


def _decade_range(lo: float, hi: float) -> tuple[int, int]:
    # A fifth of a decade of room so no dot sits on the frame.
    a, b = math.floor(math.log10(lo) - 0.2), math.ceil(math.log10(hi) + 0.2)
    return (a, b if b > a else a + 1)


def _decade_label(exp: int, unit: str) -> str:
    return format_si(10.0 ** exp, unit).replace(".0 ", " ")


@dataclass(frozen=True)
class _LogAxes:
    """The plot area (margins left/top, width, height in px) and its decades on x (intensity) and y (FLOP/s)."""

    ml: float
    mt: float
    pw: float
    ph: float
    x0: int
    x1: int
    y0: int
    y1: int

    def px(self, v):
        return self.ml + self.pw * (math.log10(v) - self.x0) / (self.x1 - self.x0)

    def py(self, v):
        return self.mt + self.ph * (1 - (math.log10(v) - self.y0) / (self.y1 - self.y0))


def roofline_chart(
    points: pd.DataFrame,
    roof: Roof,
    *,
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
    pts = _placed_points(points)
    ridge = roof.ridge
    xs = list(pts["p_ai"]) + [ridge / 30, ridge * 30]
    ys = list(pts["p_y"]) + ([roof.peak_flops_per_s * 1.2, roof.peak_flops_per_s / 1e4] if roof.known else [1e9, 1e15])
    axes = _LogAxes(ml, mt, width - ml - mr, height - mt - mb, *_decade_range(min(xs), max(xs)),
                    *_decade_range(min(ys), max(ys)))
    parts = [_svg_open(width, height, "chart roofline", "Roofline: arithmetic intensity against achieved FLOP/s",
                       element_id),
             "<title>Roofline</title>",
             f'<rect x="{ml}" y="{mt}" width="{axes.pw}" height="{axes.ph}" fill="#fbfbfb" stroke="#ccc"/>']
    parts += _grid(axes, achieved_label, height)
    if roof.known:
        parts += _roof_lines(axes, roof)
    if len(pts):
        parts += _op_dots(axes, pts, achieved_label)
    else:
        parts.append(
            f'<text x="{ml + axes.pw / 2}" y="{mt + axes.ph / 2}" font-size="13" text-anchor="middle" fill="#666">'
            f'{_e(shorten(note or "no op has both FLOPs and bytes to place on the roofline", 64))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _placed_points(points: pd.DataFrame | None) -> pd.DataFrame:
    """The points that a log-log plot can place (intensity and FLOP/s finite and > 0), as p_ai and p_y."""
    if points is None or not len(points):
        return pd.DataFrame(columns=["label", "weight_s", "bound_by", "p_ai", "p_y"])
    ai = pd.to_numeric(points["intensity"], errors="coerce").to_numpy(dtype=float)
    ach = pd.to_numeric(points["achieved_flops_per_s"], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(ai) & np.isfinite(ach) & (ai > 0) & (ach > 0)
    pts = points[ok].copy()
    pts["p_ai"], pts["p_y"] = ai[ok], ach[ok]
    return pts


def _grid(axes: _LogAxes, achieved_label: str, height: int) -> list[str]:
    """A grid line and tick label per decade (every other one past ten decades) and the axis titles."""
    ml, mt, pw, ph = axes.ml, axes.mt, axes.pw, axes.ph
    parts = []
    xstep = 1 if axes.x1 - axes.x0 <= 10 else 2
    for e in range(axes.x0, axes.x1 + 1, xstep):
        x = axes.px(10.0 ** e)
        parts.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#e6e6e6"/>')
        parts.append(f'<text class="tick" x="{x:.1f}" y="{mt + ph + 15}" font-size="11" text-anchor="middle" '
                     f'fill="#444">{_e(_decade_label(e, ""))}</text>')
    ystep = 1 if axes.y1 - axes.y0 <= 10 else 2
    for e in range(axes.y0, axes.y1 + 1, ystep):
        y = axes.py(10.0 ** e)
        parts.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text class="tick" x="{ml - 5}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
                     f'fill="#444">{_e(_decade_label(e, "FLOP/s"))}</text>')
    parts.append(f'<text x="{ml + pw / 2}" y="{height - 8}" font-size="12" text-anchor="middle" fill="#222">'
                 'arithmetic intensity (FLOP per HBM byte)</text>')
    parts.append(f'<text x="14" y="{mt + ph / 2}" font-size="12" text-anchor="middle" fill="#222" '
                 f'transform="rotate(-90 14 {mt + ph / 2})">{_e(achieved_label)} FLOP/s</text>')
    return parts


def _roof_lines(axes: _LogAxes, roof: Roof) -> list[str]:
    """The roof (HBM slope then compute ceiling), the ridge, and both roofs labelled with their sources."""
    px, py = axes.px, axes.py
    peak, hbm, ridge = roof.peak_flops_per_s, roof.hbm_bytes_per_s, roof.ridge
    xa, xb = 10.0 ** axes.x0, 10.0 ** axes.x1
    slope_start = max(xa, 10.0 ** axes.y0 / hbm)
    points = [(slope_start, slope_start * hbm), (ridge, peak), (xb, peak)]
    path = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in points)
    parts = [f'<polyline class="roof" points="{path}" fill="none" stroke="#222" stroke-width="2"/>',
             f'<line class="ridge" x1="{px(ridge):.1f}" y1="{py(peak):.1f}" x2="{px(ridge):.1f}" '
             f'y2="{axes.mt + axes.ph}" stroke="#888" stroke-dasharray="4 3"/>',
             f'<text x="{px(ridge) + 4:.1f}" y="{axes.mt + axes.ph - 6}" font-size="11" fill="#555">'
             f'ridge {_e(format_si(ridge, ""))} FLOP/B</text>']
    peak_text = f"compute roof {format_si(peak, 'FLOP/s')}" + (f" ({roof.peak_label})" if roof.peak_label else "")
    parts.append(f'<text x="{axes.ml + axes.pw - 4}" y="{py(peak) - 6:.1f}" font-size="11" text-anchor="end" '
                 f'fill="#222">{_e(shorten(peak_text, 70))}</text>')
    hbm_text = f"HBM {format_si(hbm, 'B/s')}" + (f" ({roof.hbm_label})" if roof.hbm_label else "")
    # Label the slope a little left of the ridge, rotated along it (45° on a square-decade plot).
    lx = max(slope_start * 3, ridge / 300)
    ang = -math.degrees(math.atan2((axes.ph / (axes.y1 - axes.y0)), (axes.pw / (axes.x1 - axes.x0))))
    parts.append(
        f'<text x="{px(lx):.1f}" y="{py(lx * hbm) - 6:.1f}" font-size="11" fill="#222" '
        f'transform="rotate({ang:.1f} {px(lx):.1f} {py(lx * hbm) - 6:.1f})">{_e(shorten(hbm_text, 50))}</text>'
    )
    return parts


def _op_dots(axes: _LogAxes, pts: pd.DataFrame, achieved_label: str) -> list[str]:
    """One dot per op, area by its time per step and colour by its bound, and a legend of the bounds drawn."""
    parts = []
    w = pd.to_numeric(pts["weight_s"], errors="coerce").fillna(0.0).clip(lower=0.0).to_numpy(dtype=float)
    wmax = w.max() if len(w) and w.max() > 0 else 1.0
    pts["p_r"] = 2.5 + 9.0 * np.sqrt(w / wmax)
    pts = pts.assign(p_w=w).sort_values("p_w", ascending=False)  # big dots first, small ones stay visible
    for row in pts.itertuples(index=False):
        bound = str(getattr(row, "bound_by", "unknown") or "unknown")
        colour = BOUND_COLOURS.get(bound, BOUND_COLOURS["unknown"])
        tip = (f"{row.label}\nintensity {format_si(row.p_ai, 'FLOP/B')}, "
               f"{achieved_label} {format_si(row.p_y, 'FLOP/s')}\n"
               f"{format_seconds(row.p_w)} per step, bound by {bound}")
        parts.append(
            f'<circle class="op-dot" cx="{axes.px(row.p_ai):.1f}" '
            f'cy="{axes.py(min(row.p_y, 10.0 ** axes.y1)):.1f}" r="{row.p_r:.1f}" '
            f'fill="{colour}" fill-opacity="0.7" stroke="#fff" stroke-width="0.8"><title>{_e(tip)}</title></circle>'
        )
    present = [b for b in BOUND_COLOURS if b in set(pts["bound_by"].astype(str))]
    for i, b in enumerate(present):
        lx, ly = axes.ml + 8 + i * 112, axes.mt + 8
        parts.append(f'<circle cx="{lx + 5}" cy="{ly + 5}" r="5" fill="{BOUND_COLOURS[b]}" fill-opacity="0.8"/>')
        parts.append(f'<text x="{lx + 14}" y="{ly + 9}" font-size="11" fill="#333">{_e(b)}-bound</text>')
    return parts

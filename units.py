"""How numbers read everywhere: evidence sentences, HTML, Markdown (one place, so they agree)."""

from __future__ import annotations

import math


def finite(value) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def finite_or_none(value) -> float | None:
    """``value`` as a float, or None when it is missing, not a number, NaN or infinite."""
    return float(value) if finite(value) else None


def _scaled(value: float, scales) -> tuple[float, str]:
    """Pick the largest unit that keeps the value >= 1 after rounding to 3 significant digits."""
    a = abs(value)
    for scale, unit in scales:
        # Round first: 0.9995 s must read '1 s', not '1e+03 ms'. Only a value just under 1 can round up to it:
        # the others are decided without the string round trip (the timeline formats thousands of times).
        x = a / scale
        if x >= 1 or (x >= 0.999 and float(f"{x:.3g}") >= 1):
            return value / scale, unit
    scale, unit = scales[-1]
    return value / scale, unit


def format_seconds(seconds) -> str:
    """3 significant digits with a unit that fits (s, ms, µs, ns, ps); 'n/a' when unknown."""
    if not finite(seconds):
        return "n/a"
    s = float(seconds)
    if s == 0:
        return "0 s"
    v, unit = _scaled(s, ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"), (1e-12, "ps")))
    return f"{v:.3g} {unit}"


def format_si(value, unit: str = "") -> str:
    """1.64e12, 'B/s' -> '1.64 TB/s'; 3 significant digits."""
    if not finite(value):
        return "n/a"
    v = float(value)
    if v == 0:
        return f"0 {unit}".strip()
    if abs(v) < 999.5:  # what rounds to 1000 takes the next prefix: '1 kB', not '1e+03 B'
        return f"{v:.3g} {unit}".strip()
    scales = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
    scaled, prefix = _scaled(v, scales)
    return f"{scaled:.3g} {prefix}{unit}"


def format_bytes(value) -> str:
    return format_si(value, "B")


def format_percent(fraction) -> str:
    """0.0312 -> '3.12%'; 'n/a' when unknown; '<0.1%' for tiny non-zero shares."""
    if not finite(fraction):
        return "n/a"
    f = float(fraction) * 100
    if f == 0:
        return "0%"
    if abs(f) < 0.1:
        return "<0.1%"
    return f"{f:.3g}%" if abs(f) < 10 else f"{f:.1f}%"


def format_ratio(value) -> str:
    """Efficiency (predicted / measured): 0.0123 -> '0.012', 1.9 -> '1.9'."""
    if not finite(value):
        return "n/a"
    return f"{float(value):.2g}"


def format_number(value) -> str:
    """A plain number for prose, never in scientific notation: 3 significant digits below 1000
    (0.0123, 1.87, 412), grouped thousands above (12,345); '<0.001' for tiny ones; 'n/a' when unknown."""
    if not finite(value):
        return "n/a"
    v = float(value)
    if abs(v) >= 999.5:
        return f"{v:,.0f}"
    if v != 0 and abs(v) < 0.001:
        return "<0.001" if v > 0 else ">-0.001"
    return f"{v:.3g}"


def count(n, noun: str, plural: str | None = None) -> str:
    """``'1 gate'``, ``'3 gates'``: a number with its noun in the right number (``plural`` when not noun+'s')."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"

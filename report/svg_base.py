"""What every inline SVG chart of the reports shares: the time classes and their colours, label shortening, and
the escaped ``<svg>`` opening tag. Every label is escaped (``_e``): op names, categories and source paths come
from the profile and may contain markup.
"""

from __future__ import annotations

from html import escape

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
    "nvlink": "#e15759",
    "xgmi": "#e15759",
    "pcie": "#ff9da7",
    "network": "#ff9da7",
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
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'style="{_FONT};max-width:100%;height:auto">'
    )

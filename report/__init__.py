"""Renderers: one per output format, all reading the same :class:`Report`."""

from .gates import evaluate_gates
from .model import Report, build_report
from .render import render

__all__ = ["Report", "build_report", "evaluate_gates", "render"]

"""Renderers: one per output format (``render.FORMATS``), all reading the same :class:`Report`.

Nothing here runs rules or reads files: ``xladiag.api`` builds the report.
"""

from .gates import evaluate_gates
from .model import Report
from .render import FORMATS

__all__ = ["FORMATS", "Report", "evaluate_gates"]

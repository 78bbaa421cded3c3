"""Renderers: one per output format (``render.FORMATS``), all reading the same :class:`Report`.

Nothing here runs rules or reads files: ``xladiag.api`` builds the report.
"""

__all__ = ["FORMATS", "Report", "evaluate_gates"]  # noqa: F822 (module __getattr__)

# Loaded on first use: the CLI reads report.render and report.gates for its help; the report model (a large
# dataclass) is only needed once a report is built.
_WHERE = {"FORMATS": "render", "Report": "model", "evaluate_gates": "gates"}


def __getattr__(name):
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

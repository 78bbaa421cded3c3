"""The result of ``diagnose history``: the history data (history/build.py), its headline and renderers."""

from __future__ import annotations

from dataclasses import dataclass

from ..text_safety import terminal_line
from .render import Format, Renderable, lazy

# The choices of `diagnose history --format`.
HISTORY_FORMATS: dict[str, Format] = {
    "html": Format(lazy("history_html", "render_history_html"), "html", "one self-contained page, small multiples"),
    "markdown": Format(lazy("history_markdown", "render_history_markdown"), "md", "for a PR comment"),
    "json": Format(lazy("history_json", "render_history_json"), "json", "the contract history.schema.json"),
}


@dataclass(frozen=True, repr=False)
class History(Renderable):
    """``data``: the history (runs, change_points, top_ops, top_findings, regression, warnings)."""

    data: dict
    formats = HISTORY_FORMATS

    @property
    def headline(self) -> str:
        return self.data["headline"]

    def input_files(self) -> tuple:
        """The inputs as given: ``render(fmt, path)`` never writes over one."""
        return tuple(self.data.get("inputs", ()))

    @property
    def regressed(self) -> bool:
        return bool(self.data["regression"]["regressed"])

    def to_dict(self) -> dict:
        from .history_json import history_to_dict

        return history_to_dict(self)

    def __repr__(self) -> str:
        return f"<xladiag History: {terminal_line(self.headline)}>"

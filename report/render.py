"""The one table of output formats: name -> renderer and file extension.

The CLI builds ``--format``'s choices, its help text and the default output name from it; the API's
``Report.render(fmt)`` and ``Report.to_<fmt>`` read it. A new format is one line here (plus its
``to_<fmt>`` method on :class:`.model.Report`, which a test checks). Renderers are imported on first
use so that ``diagnose --help`` does not load jinja2 or pandas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import ClassVar

from ..errors import UsageError
from ..text_safety import ci_inert, visible_controls


def lazy(module: str, function: str) -> Callable[..., str]:
    """The renderer ``function`` of ``report.<module>``, imported on its first call."""
    def call(obj, **options) -> str:
        return getattr(import_module(f"{__package__}.{module}"), function)(obj, **options)

    return call


@dataclass(frozen=True)
class Format:
    renderer: Callable[..., str]
    extension: str
    description: str
    # For a terminal: written to stdout unless -o says otherwise, coloured (renderer's color=True) on a TTY.
    terminal: bool = False


FORMATS: dict[str, Format] = {
    "html": Format(lazy("html", "render_html"), "html", "one self-contained page with charts"),
    "markdown": Format(lazy("markdown", "render_markdown"), "md", "GitHub-flavoured, for a PR comment or step summary"),
    "json": Format(lazy("json_out", "render_json"), "json", "the versioned contract in docs/json_schema.md"),
    "text": Format(lazy("text", "render_text"), "txt", "for a terminal (stdout by default): verdict, fixes, top ops",
                   terminal=True),
    "csv": Format(lazy("csv_out", "render_csv"), "csv", "the ops table, one row per op, for a spreadsheet"),
}


# A file name's extension -> the format it holds (a report.json holds JSON, not HTML).
FORMAT_BY_EXTENSION = {".json": "json", ".md": "markdown", ".markdown": "markdown", ".txt": "text",
                       ".html": "html", ".htm": "html", ".csv": "csv"}


def format_for(path, formats: dict[str, Format] = FORMATS) -> str | None:
    """The format of ``formats`` that ``path``'s extension names, or None."""
    found = FORMAT_BY_EXTENSION.get(Path(str(path)).suffix.lower())
    return found if found in formats else None


def render(report, fmt: str, formats: dict[str, Format] = FORMATS, *, color: bool = False) -> str:
    """The report (or comparison) as text in ``fmt`` of ``formats``. No control or bidi character from the
    profile survives raw (a last guard for ``-o -`` on a terminal; renderers already escape their own syntax).
    ``color``: ANSI colour for a terminal format (ignored by the others)."""
    try:
        entry = formats[fmt]
    except KeyError:
        raise UsageError(f"unknown report format {fmt!r}; one of: {', '.join(formats)}") from None
    if color and entry.terminal:
        from .text import guard_keeping_sgr

        return ci_inert(guard_keeping_sgr(entry.renderer(report, color=True)))
    text = visible_controls(entry.renderer(report), keep="\n\t")
    # No line a CI runner would run as a workflow command (the report may be printed in a CI log); JSON's
    # \u0023 is the same '#', so its data is unchanged.
    return text.replace("##[", "#\\u0023[") if entry.extension == "json" else ci_inert(text)


class Renderable:
    """``render(fmt, path)`` and ``to_<fmt>`` over the class's ``formats`` table (a class attribute)."""

    formats: ClassVar[dict[str, Format]] = FORMATS

    def render(self, fmt: str, path: str | Path | None = None, *, color: bool = False) -> str:
        """The text in ``fmt`` (a key of ``formats``), also written to ``path``. ``color``: ANSI colour, for a
        terminal format shown on a terminal.

        Raises ``UsageError`` (an ``XladiagError``) for an unknown format or a path that cannot be written.
        """
        text = render(self, fmt, self.formats, color=color)
        if path is not None:
            from ..writer import write_report

            write_report(path, text, self.input_files())
        return text

    def input_files(self) -> tuple:
        """The files this was made from, which ``render(fmt, path)`` refuses to write over."""
        return ()

    def to_html(self, path: str | Path | None = None) -> str:
        return self.render("html", path)

    def to_markdown(self, path: str | Path | None = None) -> str:
        return self.render("markdown", path)

    def to_json(self, path: str | Path | None = None) -> str:
        return self.render("json", path)

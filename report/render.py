"""The one table of output formats: name -> renderer and file extension.

The CLI builds ``--format``'s choices, its help text and the default output name from it; the API's
``Report.render(fmt)`` and ``Report.to_<fmt>`` read it. A new format is one line here (plus its
``to_<fmt>`` method on :class:`.model.Report`, which a test checks). Renderers are imported on first
use so that ``diagnose --help`` does not load jinja2 or pandas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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
    # The same text as pieces, for a file written as it is made (render_pieces): a page of many MB is never
    # one string in memory, nor its UTF-8 bytes.
    pieces: Callable[..., Iterable[str]] | None = None


FORMATS: dict[str, Format] = {
    "html": Format(lazy("html", "render_html"), "html", "one self-contained page with charts",
                   pieces=lazy("html", "html_pieces")),
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


def _entry(fmt: str, formats: dict[str, Format]) -> Format:
    try:
        return formats[fmt]
    except KeyError:
        raise UsageError(f"unknown report format {fmt!r}; one of: {', '.join(formats)}") from None


def _guarded(text: str, json: bool) -> str:
    """No control or bidi character from the profile raw, no line a CI runner would run as a workflow command
    (the report may be printed in a CI log); JSON's \\u0023 is the same '#', so its data is unchanged."""
    text = visible_controls(text, keep="\n\t")
    return text.replace("##[", "#\\u0023[") if json else ci_inert(text)


def render(report, fmt: str, formats: dict[str, Format] = FORMATS, *, color: bool = False) -> str:
    """The report (or comparison) as text in ``fmt`` of ``formats``. No control or bidi character from the
    profile survives raw (a last guard for ``-o -`` on a terminal; renderers already escape their own syntax).
    ``color``: ANSI colour for a terminal format (ignored by the others)."""
    entry = _entry(fmt, formats)
    if color and entry.terminal:
        from .text import guard_keeping_sgr

        return ci_inert(guard_keeping_sgr(entry.renderer(report, color=True)))
    return _guarded(entry.renderer(report), entry.extension == "json")


_BATCH = 1 << 16  # characters gathered before a guarded piece is given out


def render_pieces(report, fmt: str, formats: dict[str, Format] = FORMATS) -> Iterator[str]:
    """:func:`render`'s text (without colour) in pieces that join to it, made as they are read: a format with
    a ``pieces`` renderer is never whole in memory. The guards run on whole lines (what they look at never
    spans a line break), a batch of lines at a time."""
    entry = _entry(fmt, formats)
    if entry.pieces is None:
        yield render(report, fmt, formats)
        return
    json, held, size = entry.extension == "json", [], 0
    for piece in entry.pieces(report):
        held.append(piece)
        size += len(piece)
        if size >= _BATCH:
            text = "".join(held)
            cut = text.rfind("\n") + 1
            if cut:
                yield _guarded(text[:cut], json)
                text = text[cut:]
            held, size = [text], len(text)
    if held:
        yield _guarded("".join(held), json)


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

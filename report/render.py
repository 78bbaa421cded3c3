"""The one table of output formats: name -> renderer and file extension.

The CLI builds ``--format``'s choices, its help text and the default output name from it; the API's
``Report.render(fmt)`` and ``Report.to_<fmt>`` read it. A new format is one line here (plus its
``to_<fmt>`` method on :class:`.model.Report`, which a test checks). Renderers are imported on first
use so that ``diagnose --help`` does not load jinja2 or pandas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import UsageError
from ..text_safety import visible_controls


def _html(report) -> str:
    from .html import render_html

    return render_html(report)


def _markdown(report) -> str:
    from .markdown import render_markdown

    return render_markdown(report)


def _json(report) -> str:
    from .json_out import render_json

    return render_json(report)


@dataclass(frozen=True)
class Format:
    renderer: Callable[[object], str]
    extension: str
    description: str


FORMATS: dict[str, Format] = {
    "html": Format(_html, "html", "one self-contained page with charts"),
    "markdown": Format(_markdown, "md", "GitHub-flavoured, for a PR comment or step summary"),
    "json": Format(_json, "json", "the versioned contract in docs/json_schema.md"),
}


def render(report, fmt: str) -> str:
    """The report as text in ``fmt``. No control or bidi character from the profile survives raw
    (a last guard for ``-o -`` on a terminal; renderers already escape their own syntax)."""
    try:
        entry = FORMATS[fmt]
    except KeyError:
        raise UsageError(f"unknown report format {fmt!r}; one of: {', '.join(FORMATS)}") from None
    return visible_controls(entry.renderer(report), keep="\n\t")

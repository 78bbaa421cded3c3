"""Pick the renderer for a format."""

from __future__ import annotations


def render(report, fmt: str) -> str:
    if fmt == "html":
        from .html import render_html

        return render_html(report)
    if fmt == "markdown":
        from .markdown import render_markdown

        return render_markdown(report)
    if fmt == "json":
        from .json_out import render_json

        return render_json(report)
    raise ValueError(f"unknown format {fmt!r}")

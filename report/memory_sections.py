"""The "Memory at the peak" section of the Markdown, text and HTML reports, from the JSON ``memory_at_peak``.

Each renderer calls one function here (kept apart from the renderers' other sections so that this one can
change alone): a line saying what fills HBM by kind, then the largest buffers with their shape, kind and
the scope (op_name) and source line that made them.
"""

from __future__ import annotations

from pathlib import Path

from ..units import format_bytes, format_percent
from .md_blocks import details, escape_html, escape_text, wrap
from .md_blocks import table as _table

KIND_ORDER = ("parameter", "output", "activation", "temporary", "constant", "unused")
KIND_COLOURS = {"parameter": "#4e79a7", "output": "#59a14f", "activation": "#e15759", "temporary": "#f28e2b",
                "constant": "#b07aa1", "unused": "#d4d4d4"}
SHOWN = 8  # buffers in the Markdown and text sections; the JSON has 100, the HTML chart 12


def by_kind_text(section: dict) -> str:
    """``parameter 142 MB (20%), activation 101 MB (14%), …``: the kinds that hold bytes, largest first."""
    total = section["peak_bytes"] or 1
    kinds = sorted(((k, v) for k, v in section["bytes_by_kind"].items() if v), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {format_bytes(v)} ({format_percent(v / total)})" for k, v in kinds)


def headline(section: dict) -> str:
    at = section["peak_instruction"]
    return (f"{format_bytes(section['peak_bytes'])} at the peak of {section['module']}"
            f" ({'at ' + at if at else 'at the program end'}; {section['peak_source']}): {by_kind_text(section)}.")


def scope_of(buffer: dict) -> str:
    """Where the model's code made a buffer: ``file.py:112 jit(train_step)/jvp()/dot_general``."""
    line = f"{Path(buffer['source_file']).name}:{buffer['source_line']}" if buffer["source_file"] else ""
    return " ".join(p for p in (line, buffer["op_name"]) if p)


def largest(section: dict, n: int = SHOWN) -> list[dict]:
    return section["buffers"][:n]


def markdown_section(section: dict | None, n: int = SHOWN) -> list[str]:
    if not section:
        return []
    rows = [[escape_text(b["buffer"], 60), escape_text(b["kind"]), format_bytes(b["size_bytes"]),
             escape_text(b["shape"], 60), escape_text(scope_of(b), 120)] for b in largest(section, n)]
    body = _table(["Buffer", "Kind", "Size", "Shape", "Source / scope"], rows, ["l", "l", "r", "l", "l"])
    left = len(section["buffers"]) + section["buffers_left_out"] - len(rows)
    if left > 0:
        body += ["", f"_{left} more in the JSON report's `memory_at_peak`._"]
    summary = escape_html(f"The {len(rows)} largest buffers at the memory peak", 120)
    head = ["## Memory at the peak", ""] + wrap(escape_text(headline(section), 600)) + [""]
    return head + details(summary, body) + [""]


def text_section(out, section: dict | None, clean, n: int = SHOWN) -> None:
    """Write the section to a text report's ``_Out`` (``line`` and ``wrap``); ``clean`` makes a name from
    the profile safe for a terminal (text.clean_text)."""
    if not section:
        return
    out.line()
    out.line("Memory at the peak", "bold")
    out.wrap(clean(headline(section)), "  ")
    for b in largest(section, n):
        out.wrap(clean(f"{b['kind']} {b['buffer']} {b['shape']} {scope_of(b)}"), "              ",
                 f"  {format_bytes(b['size_bytes']):>10}  ")

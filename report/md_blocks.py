"""Markdown building blocks for PR comments and step summaries: escaped text, tables, wrapped prose and
code, folded ``<details>`` sections, the gates table.

Shared by the report's Markdown and compare's. GitHub renders a newline inside a comment's paragraph as a
line break, so prose is wrapped at :data:`PROSE_WIDTH` (no line over 200 characters outside tables) and
never before a word that would start a block (``-``, ``>``, ``1.``...) and change what the text means.
"""

from __future__ import annotations

import html
import re
import textwrap

from ..text_safety import break_links, visible_controls
from ..units import count

PROSE_WIDTH = 100
CODE_WIDTH = 100  # aim; a single word longer than this stays whole up to HARD_WIDTH
HARD_WIDTH = 200

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#~|])")
# A word that, at the start of a line, would open a list, quote, heading, table row or setext underline.
_BLOCK_START = re.compile(r"[-+*>=|#]|\d+[.)]|`{3}|~{3}|<")


def escape_text(text, limit: int | None = None) -> str:
    """Plain text safe in a Markdown paragraph or table cell (one line)."""
    s = "" if text is None else str(text)
    s = visible_controls(re.sub(r"\s*[\r\n]+\s*", " ", s).strip())
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 1)] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return break_links(_MD_SPECIAL.sub(r"\\\1", s), "&#8203;")


def escape_html(text, limit: int | None = None) -> str:
    """Plain text inside an HTML element such as ``<summary>`` (Markdown is not parsed there)."""
    s = visible_controls(re.sub(r"\s+", " ", "" if text is None else str(text)).strip())
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 1)] + "…"
    return break_links(html.escape(s, quote=False), "&#8203;")


def wrap(markdown: str, prefix: str = "", indent: str = "", width: int = PROSE_WIDTH) -> list[str]:
    """One paragraph of already-escaped Markdown as lines of at most ``width`` characters where the words
    allow: ``prefix`` starts the first line (``- ``, ``> ``), ``indent`` the others (``  `` in a list item,
    ``> `` in a quote). A word longer than the width stays whole."""
    lines: list[str] = []
    current = prefix
    fresh = True  # nothing but the prefix on the current line yet
    for word in markdown.split():
        if not fresh and len(current) + 1 + len(word) > width and not _BLOCK_START.match(word):
            lines.append(current)
            current, fresh = indent + word, False
        else:
            current = current + word if fresh else f"{current} {word}"
            fresh = False
    lines.append(current)
    return lines


def table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["l"] * len(header)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def code_block(text: str, limit: int, width: int = CODE_WIDTH) -> list[str]:
    """A fenced block for a fix (code, flags): lines wrapped at spaces to ``width`` (a longer word is cut at
    :data:`HARD_WIDTH`), the fence longer than any backtick run inside."""
    s = str(text or "")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    body: list[str] = []
    for line in s.split("\n"):
        if len(line) <= width:
            body.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        for part in textwrap.wrap(line, width, subsequent_indent=lead, break_long_words=False, break_on_hyphens=False):
            body += [part[i:i + HARD_WIDTH] for i in range(0, len(part), HARD_WIDTH)]
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", *body, fence]


def details(summary_html: str, body: list[str], *, open_: bool = False) -> list[str]:
    """``body`` folded under a one-line ``summary_html`` (escaped with :func:`escape_html`). The blank line
    after ``<summary>`` lets GitHub parse the body as Markdown (tables, code) again."""
    return [f"<details{' open' if open_ else ''}>", f"<summary>{summary_html}</summary>", "", *body, "", "</details>"]


def gates_section(gates) -> list[str]:
    """``## Gates``: every gate evaluated (the JSON's ``gates`` records), tripped or not; empty when none was."""
    from .gates import shown

    gates = list(gates)
    if not gates:
        return []
    tripped = [g for g in gates if g["tripped"]]
    verdict = (f"**{len(tripped)} of {count(len(gates), 'gate')} tripped** (the command exits 3)." if tripped
               else "**The gate holds.**" if len(gates) == 1 else f"**All {len(gates)} gates hold.**")
    rows = [[f"`{g['option']}`", escape_text(shown(g["threshold"], g["unit"])),
             escape_text(shown(g["value"], g["unit"])), "❌ tripped" if g["tripped"] else "✅ holds",
             escape_text(g["message"], 300)] for g in gates]
    return ["## Gates", "", verdict, "",
            *table(["Gate", "Threshold", "Measured", "Result", "Detail"], rows, ["l", "r", "r", "l", "l"]), ""]



# GitHub refuses a comment over 65,536 characters ("Body is too long (maximum is 65536 characters)"); bytes
# are counted so that text outside the BMP cannot push a report over it. A step summary may take 1 MiB.
MAX_BYTES = 60_000

CUT_NOTE = ("_Shortened to stay under GitHub's 65,536-character comment limit: fewer rows and shorter texts "
            "than the full report; `--format json` has everything._")


def fit_under_cap(render, budgets) -> str:
    """``render(budget, cut)`` with each budget in turn until the text is under :data:`MAX_BYTES`; the last
    budget is taken whatever its size (it must bound every row count and cell). ``cut`` is true from the
    second budget on: the text then says so (:data:`CUT_NOTE`)."""
    for i, budget in enumerate(budgets[:-1]):
        text = render(budget, i > 0)
        if len(text.encode("utf-8")) < MAX_BYTES:
            return text
    return render(budgets[-1], True)

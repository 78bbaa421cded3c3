"""The rule catalogue, read from the rule docstrings (the README table, ``docs/rules.md``, report help).

Every rule module's docstring has a one-line summary and four titled parts, in this order::

    What it finds:
        ...
    Why it costs time:
        ...
    How the cost is estimated:
        ...
    Fix:
        ...

``python -m xladiag.rules.catalog`` prints the Markdown table; ``--write PATH`` writes it to a file.
"""

from __future__ import annotations

from ..errors import InputError

import argparse
import re
import sys
from pathlib import Path

from .registry import RULES

SECTIONS = (
    ("what", "What it finds"),
    ("why", "Why it costs time"),
    ("cost", "How the cost is estimated"),
    ("fix", "Fix"),
)
_HEADING = re.compile(r"^(%s):\s*$" % "|".join(re.escape(title) for _, title in SECTIONS), re.M)


class CatalogError(InputError):
    """A rule docstring without the four parts."""


def _flatten(text: str) -> str:
    """Re-wrap an indented docstring paragraph into one line (the table cell)."""
    return " ".join(text.split())


def parse_rule_docstring(doc: str, rule_id: str = "?") -> dict[str, str]:
    """{'summary', 'what', 'why', 'cost', 'fix'} from one rule docstring; CatalogError if a part is missing."""
    doc = doc or ""
    marks = list(_HEADING.finditer(doc))
    found = [m.group(1) for m in marks]
    wanted = [title for _, title in SECTIONS]
    if found != wanted:
        raise CatalogError(f"rule {rule_id}: docstring parts are {found}, expected {wanted} in that order")
    out = {"summary": _flatten(doc[: marks[0].start()])}
    for (key, _), mark, nxt in zip(SECTIONS, marks, marks[1:] + [None]):
        out[key] = _flatten(doc[mark.end(): nxt.start() if nxt else len(doc)])
    return out


def rule_catalog() -> list[dict[str, str]]:
    """One dict per registered rule: id, summary, what, why, cost, fix (registry order)."""
    rows = []
    for module in RULES:
        parts = parse_rule_docstring(module.__doc__, module.RULE_ID)
        rows.append({"id": module.RULE_ID, **parts})
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(rows: list[dict[str, str]] | None = None) -> str:
    """The table for README / docs: one row per rule, one column per docstring part."""
    rows = rule_catalog() if rows is None else rows
    lines = [
        "# Rules",
        "",
        "Generated from the rule docstrings by `python -m xladiag.rules.catalog --write docs/rules.md`;",
        "edit the docstrings in `rules/`, not this file.",
        "",
        "| rule | what it finds | why it costs time | how the cost is estimated | fix |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [f"`{row['id']}`"] + [_cell(row[key]) for key, _ in SECTIONS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print or write the rule table generated from rule docstrings.")
    parser.add_argument("--write", metavar="PATH", help="write the Markdown table to PATH instead of stdout")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

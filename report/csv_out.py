"""The ops table as CSV (``--format csv``), for a spreadsheet: one row per op, the JSON report's op fields as
columns (docs/json_schema.md), the op name first. Profile text that a spreadsheet would run as a formula
(a cell starting ``=``, ``+``, ``-``, ``@``) is written with a leading ``'``, which shows it as text.
"""

from __future__ import annotations

import csv
import io
import json

from .json_out import _OP_FIELDS, ops_records

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str | float | int:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "'" + text if text.startswith(_FORMULA_START) else text


def render_csv(report) -> str:
    columns = ["name", *(c for c in _OP_FIELDS if c != "name")]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in ops_records(report.analysis.ops):
        writer.writerow([_cell(record.get(c)) for c in columns])
    return out.getvalue()

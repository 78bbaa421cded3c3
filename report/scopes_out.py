"""Scopes in the reports: the JSON ``scopes`` table, the short "Where in the model" section of the Markdown and
text reports, and what the HTML icicle chart reads (:mod:`.svg_icicle`).

The numbers are :func:`xladiag.analyzer.scopes.scope_table`'s, with each finding's key on the scopes of the ops
it names. :func:`scopes_records` is the plain entry for other tools (an MCP server, a notebook): a report in,
the JSON records out.
"""

from __future__ import annotations

import pandas as pd

from ..analyzer.scopes import SCOPES, scopes_of, split_path
from ..units import count, format_percent, format_seconds, format_si

N_ROWS = 12  # scopes listed in the Markdown and text reports
MIN_SHARE = 0.01  # of the step's op time: smaller scopes are left out of those lists


def scopes_frame(report) -> pd.DataFrame:
    """The scopes table of a report's analysis with its findings' keys (``Report.scopes``)."""
    return scopes_of(report.analysis, [(f.key, [op.name for op in f.ops]) for f in report.findings])


def records(frame: pd.DataFrame) -> list[dict]:
    """A scopes table as JSON records: NaN -> None, the root's parent None, finding keys a list."""
    out = []
    for row in frame[SCOPES.names].to_dict("records"):
        rec = {}
        for c in SCOPES.public():
            value = row[c.name]
            if c.name == "finding_keys":
                value = str(value).split()
            elif c.dtype == "float64":
                value = float(value) if pd.notna(value) else None
            elif c.dtype == "int64":
                value = int(value)
            elif c.name == "parent":
                value = str(value) if isinstance(value, str) else None
            rec[c.json] = value
        out.append(rec)
    return out


def scopes_records(report) -> list[dict]:
    """The ``scopes`` of the JSON report: one record per scope, depth first, parent links by path."""
    return records(scopes_frame(report))


def time_key(measured: bool) -> str:
    return "total_measured_s_per_step" if measured else "total_predicted_s_per_step"


def top_scopes(scopes: list[dict], measured: bool, n_rows: int = N_ROWS) -> list[tuple[str, dict]]:
    """(label, scope) of the scopes worth listing, depth first (the root left out): each holding at least
    :data:`MIN_SHARE` of the step's op time, at most ``n_rows``. A scope with no ops of its own and one child is
    folded into the child (``while`` + ``body`` reads ``while/body``); a label is the path below the nearest
    listed scope, indented by ``· `` per listed scope above it."""
    if not scopes:
        return []
    key = time_key(measured)
    total = scopes[0][key] or 0.0
    if total <= 0:
        return []
    children: dict[str | None, int] = {}
    for s in scopes:
        children[s["parent"]] = children.get(s["parent"], 0) + 1
    listed: dict[str, int] = {}  # listed scope -> how many listed scopes are above it
    shown = []
    for s in scopes[1:]:
        if (s[key] or 0.0) < MIN_SHARE * total or (s["ops"] == 0 and children.get(s["scope"], 0) == 1):
            continue
        parts = split_path(s["scope"])
        above = next((depth for depth in range(len(parts) - 1, 0, -1) if "/".join(parts[:depth]) in listed), 0)
        indent = listed["/".join(parts[:above])] + 1 if above else 0
        listed[s["scope"]] = indent
        shown.append(("· " * indent + "/".join(parts[above:]), s))
    return shown[:n_rows]


def scope_row(s: dict, measured: bool, step_s: float | None) -> list[str]:
    """Cells after the name: total time, its share of the step, own time, predicted, FLOPs, ops, findings."""
    key = time_key(measured)
    cells = [format_seconds(s[key]), format_percent(s[key] / step_s) if step_s and s[key] is not None else "n/a",
             format_seconds(s["self_measured_s_per_step" if measured else "self_predicted_s_per_step"])
             if s["ops"] else "—"]
    if measured:
        cells.append(format_seconds(s["total_predicted_s_per_step"]))
    return cells + [format_si(s["total_flops_per_step"], "FLOP"), str(s["total_ops"]), str(len(s["finding_keys"]))]


def scope_header(measured: bool) -> list[str]:
    word = "measured" if measured else "predicted"
    return (["Scope", f"{word} / step", "% of step", "in the scope itself"] + (["predicted / step"] if measured else [])
            + ["FLOPs / step", "ops", "findings on its own ops"])


def unnamed_note(data: dict) -> str:
    """'' or the share of the ops' time in ops without a name path (in no scope), when it is worth saying."""
    scopes = data.get("scopes") or []
    key = "self_measured_s_per_step" if data["measured"] else "self_predicted_s_per_step"
    total = scopes[0][time_key(data["measured"])] if scopes else None
    share = (scopes[0][key] or 0.0) / total if total else 0.0
    return f"{format_percent(share)} of the ops' time is in ops without a name path" if share >= MIN_SHARE else ""


def markdown_section(data: dict, n_rows: int = N_ROWS) -> list[str]:
    """'Where in the model': the heaviest scopes of the framework name paths, folded (nothing without any)."""
    from .md_blocks import details, escape_text, table, wrap

    measured = data["measured"]
    shown = top_scopes(data.get("scopes") or [], measured, n_rows)
    if not shown:
        return []
    rows = [[escape_text(name, 100)] + scope_row(s, measured, data["step_s"]) for name, s in shown]
    header = scope_header(measured)
    body = table(header, rows, ["l"] + ["r"] * (len(header) - 1))
    unnamed = unnamed_note(data)
    body += [""] + wrap("_Scopes are the ops' JAX name paths with `jvp`/`transpose`/`checkpoint` stripped, so a "
                        f"layer's forward and backward add up together{'; ' + unnamed if unnamed else ''}; "
                        "`--format json` has every scope (`scopes`)._")
    summary = f"The heaviest {count(len(shown), 'scope')} of the program, by its ops' name paths"
    return ["## Where in the model", ""] + details(summary, body) + [""]

"""``diagnose history --format markdown``: the headline, change points, a table of the runs and the top ops and
findings across them (for a PR comment or a step summary)."""

from __future__ import annotations

from ..units import format_percent, format_seconds
from .md_blocks import escape_text, table, wrap

# A comment stays readable: the runs table and the per-run columns show the last runs only (the JSON and the
# HTML keep them all); the first run stays as the reference it started from.
SHOWN_RUNS = 12


def _cells(values: list) -> list[str]:
    return ["–" if v is None else format_seconds(v) for v in values]


def render_history_markdown(history) -> str:
    data = history.data
    runs = data["runs"]
    out = ["## xladiag history", "", escape_text(data["headline"]), ""]
    regression = data["regression"]
    if regression["threshold"] is not None:
        out += [f"**{'Regressed' if regression['regressed'] else 'Gate ok'}:** {escape_text(regression['reason'])}", ""]
    out += [f"> warning: {escape_text(w)}" for w in data["warnings"]] + ([""] if data["warnings"] else [])
    out += ["### Change points", ""]
    if data["change_points"]:
        out += table(["run", "label", "change", "before", "after", "steps' test"],
                     [[str(c["index"] + 1), escape_text(c["label"], 60),
                       f"{format_percent(abs(c['change'] or 0.0))} {c['direction']}",
                       format_seconds(c["mean_before_s"]), format_seconds(c["mean_after_s"]),
                       escape_text(c["noise_test"]["reason"])] for c in data["change_points"]],
                     ["r", "l", "l", "r", "r", "l"])
    else:
        out.append("No change point beyond noise.")
    test = data["test"]
    out += ["", *wrap(escape_text(f"A change point: {test['rule']}, {test['run_rule']}. {test['method']}."))]
    shown = list(range(len(runs))) if len(runs) <= SHOWN_RUNS else [0, *range(len(runs) - SHOWN_RUNS + 1, len(runs))]
    out += ["", "### Runs", ""]
    if len(shown) < len(runs):
        out += [f"The first run and the last {len(shown) - 1} of {len(runs)} (all of them in the JSON and HTML).", ""]
    out += table(["run", "label", "step", "MFU", "steps"],
                 [[str(r["index"] + 1), escape_text(r["label"], 60), format_seconds(r["step_s"]),
                   format_percent(r["mfu"]), str(r["steps"])] for r in (runs[i] for i in shown)],
                 ["r", "l", "r", "r", "r"])
    header = ["", *[str(i + 1) for i in shown]]
    for title, rows, name in (("Top ops (time per step, by run)", data["top_ops"], "key"),
                              ("Top findings (time per step, by run)", data["top_findings"], "title")):
        if rows:
            out += ["", f"### {title}", ""]
            out += table(header, [[escape_text(row[name], 60), *_cells([row["s_per_step"][i] for i in shown])]
                                  for row in rows], ["l", *["r"] * len(shown)])
    return "\n".join(out) + "\n"

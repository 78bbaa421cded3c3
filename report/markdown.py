"""The Markdown report: GitHub-flavoured, for a PR comment or ``$GITHUB_STEP_SUMMARY``.

Always under :data:`MAX_BYTES` (GitHub caps a step summary at 1 MiB and comments at 65,536
characters): long tables are cut with a note saying how many rows were left out, and the JSON
report has everything. Table cells escape ``|`` and flatten newlines so a name from the profile
can never break a table; ``<``/``>``/``&`` are escaped so it can never inject HTML either; control and
bidi characters are written visibly and URLs, ``@mentions`` and ``#123`` references are broken with a
zero-width space (:mod:`xladiag.text_safety`) so a crafted op name cannot ping people from a PR comment.
"""

from __future__ import annotations

import re
from pathlib import Path

from .json_out import report_to_dict
from ..text_safety import break_links, visible_controls
from ..units import format_percent, format_ratio, format_seconds, format_si
from .svg import CLASS_LABELS, CLASS_ORDER, short_source

MAX_BYTES = 60_000

# (ops rows, findings written out in full, characters per free-text cell, rows of the findings table):
# tried in order until the text fits. The last one is bounded whatever the input (~25 kB at most).
_BUDGETS = ((25, 20, 600, 200), (15, 10, 300, 100), (8, 5, 160, 60), (5, 3, 100, 40), (3, 2, 60, 25))

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#~|])")


def escape_text(text, limit: int | None = None) -> str:
    """Plain text safe in a Markdown paragraph or table cell (one line)."""
    s = "" if text is None else str(text)
    s = visible_controls(re.sub(r"\s*[\r\n]+\s*", " ", s).strip())
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 1)] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return break_links(_MD_SPECIAL.sub(r"\\\1", s), "&#8203;")


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["l"] * len(header)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _code_block(text: str, limit: int) -> list[str]:
    """A fenced block for a fix (code, flags): the fence is longer than any backtick run inside."""
    s = str(text or "")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", s, fence]


def _render(data: dict, n_ops: int, n_findings: int, cell_limit: int, n_table: int) -> str:
    measured = data["measured"]
    time_word = "measured" if measured else "predicted"
    chip, steps, run = data["chip"], data["steps"], data["run"]
    out: list[str] = []
    hlo_files = [Path(p).name for p in run["hlo_files"]]
    title = run["name"] or (hlo_files[0] if hlo_files else chip["name"])
    out.append(f"# xladiag report: {escape_text(title, 120)}")
    out.append("")
    out.append(f"**{escape_text(data['headline'], 4 * cell_limit)}**")
    out.append("")
    if not measured:
        out.append("> **No trace was given: every time below is predicted** from the HLO and the chip table "
                   "(roofline), not measured.")
        out.append("")
    if data.get("capture_scope"):
        out.append(f"> **What this capture can tell:** {escape_text(data['capture_scope'], 2 * cell_limit)}")
        out.append("")
    for w in data["warnings"][:10]:
        out.append(f"> ⚠ {escape_text(w, 2 * cell_limit)}")
    if data["warnings"]:
        out.append("")

    # Verdict.
    mfu = format_percent(data["mfu"]) if data["mfu"] is not None else "n/a"
    step_note = (f"{time_word}, mean of {steps['count']} steps" if measured else "predicted: sum of per-op rooflines")
    out.append("## Verdict")
    out.append("")
    out.append(f"- **Step time:** {format_seconds(data['step_s'])} ({step_note})")
    out.append(f"- **MFU:** {mfu} (model FLOPs ÷ (step × {format_si(chip['peak_flops_per_s'], 'FLOP/s')} peak, "
               f"{escape_text(short_source(chip['source']['peak_flops_per_s']), 80)})"
               + (f"; {format_percent(data['unknown_flops_share'])} of the step is in ops of unknown FLOPs, not counted)"
                  if data.get("unknown_flops_share") else ")"))
    rec = data["recoverable"]
    rec_share = f"{format_percent(rec['fraction_of_step'])} of the step; " if rec["fraction_of_step"] is not None else ""
    out.append(f"- **Recoverable per step:** {format_seconds(rec['s_per_step'])} ({rec_share}{time_word}: the "
               "findings' savings, each op counted by one finding)")
    if data["ideal_step_s"] is not None:
        out.append(f"- **Roofline ideal step:** {format_seconds(data['ideal_step_s'])} (predicted: every op at its roofline)")
    else:
        out.append("- **Roofline ideal step:** n/a (no op has FLOPs or bytes: pass --hlo-dir)")
    out.append("")
    total = sum(v or 0.0 for v in data["breakdown"].values())
    rows = [
        [CLASS_LABELS[k], format_seconds(data["breakdown"].get(k, 0.0)),
         format_percent((data["breakdown"].get(k, 0.0) or 0.0) / total) if total > 0 else "n/a"]
        for k in CLASS_ORDER
    ]
    out += _table(["Where the step goes", f"{time_word} / step", "share"], rows, ["l", "r", "r"])
    out.append("")

    # Ranked fixes.
    findings = data["findings"]
    out.append("## Ranked fixes")
    out.append("")
    if not findings:
        out.append("No finding beyond those left out below." if data["selection"]["ignored_findings"]
                   else "No rule fired on this capture.")
        out.append("")
    else:
        rows = [
            [str(i), escape_text(f["severity"]), escape_text(f["title"], cell_limit),
             format_seconds(f["est_savings_s_per_step"]), format_percent(f["fraction_of_step"]),
             escape_text(f["confidence"]), escape_text(f["fix"], cell_limit)]
            for i, f in enumerate(findings[:n_table], 1)
        ]
        out += _table(["#", "Severity", "Finding", "Saves / step", "Costs (% of step)", "Confidence", "Fix"],
                      rows, ["r", "l", "l", "r", "r", "l", "l"])
        if len(findings) > n_table:
            out.append("")
            out.append(f"_{len(findings) - n_table} smaller findings left out; the JSON report lists them all._")
        out.append("")
        for i, f in enumerate(findings[:n_findings], 1):
            out.append(f"### {i}. {escape_text(f['title'], cell_limit)}")
            out.append("")
            rule = f"`{f['rule']}`" if re.fullmatch(r"[A-Za-z0-9_.-]+", str(f["rule"])) else escape_text(f["rule"], 60)
            out.append(f"{rule} · costs {format_seconds(f['time_s_per_step'])} per step "
                       f"({format_percent(f['fraction_of_step'])}) · saves ~{format_seconds(f['est_savings_s_per_step'])} "
                       f"· confidence {escape_text(f['confidence'])}")
            out.append("")
            out.append(f"**Evidence:** {escape_text(f['evidence'], 2 * cell_limit)}")
            out.append("")
            out.append("**Change to make:**")
            out.append("")
            out += _code_block(f["fix"], 4 * cell_limit)
            out.append("")
            if f["ops"]:
                shown = f["ops"][:8]
                rows = [[escape_text(o["name"], 80)] + ([format_seconds(o["measured_s_per_step"])] if measured else [])
                        + [format_seconds(o["predicted_s_per_step"]), escape_text(o["detail"], cell_limit)] for o in shown]
                header = ["Op"] + (["measured / step"] if measured else []) + ["predicted / step", "Detail"]
                out += _table(header, rows, ["l"] + ["r"] * (len(header) - 2) + ["l"])
                if len(f["ops"]) > len(shown):
                    out.append("")
                    out.append(f"_{len(f['ops']) - len(shown)} more ops in the JSON report._")
                out.append("")
        if len(findings) > n_findings:
            out.append(f"_{len(findings) - n_findings} more findings are in the table above; details in the JSON/HTML report._")
            out.append("")

    out += _left_out(data["selection"], n_table, cell_limit)

    # Top ops.
    ops = [o for o in data["ops"] if o["in_step"]]
    key = "measured_s_per_step" if measured else "predicted_s_per_step"
    ops.sort(key=lambda o: -(o[key] or 0.0))
    shown = ops[:n_ops]
    out.append(f"## Top ops by {time_word} time per step")
    out.append("")
    rows = []
    for o in shown:
        measured_cells = [format_seconds(o["measured_s_per_step"]), format_percent(o["share_of_step"])] if measured else []
        rows.append(
            [escape_text(o["name"], 80), escape_text(o["category"], 40), escape_text(o["bound_by"])]
            + measured_cells
            + [format_seconds(o["predicted_s_per_step"]), format_ratio(o["efficiency"]) if measured else
               format_percent((o["predicted_s_per_step"] or 0.0) / data["step_s"]) if data["step_s"] else "n/a",
               escape_text(o["source"], 80)]
        )
    header = ["Op", "Category", "Bound by"] + (["measured / step", "% of step"] if measured else []) + [
        "predicted / step", "efficiency" if measured else "% of step", "Source"]
    out += _table(header, rows, ["l", "l", "l"] + ["r"] * (len(header) - 4) + ["l"])
    if len(ops) > len(shown):
        out.append("")
        out.append(f"_Showing {len(shown)} of {len(ops)} ops; the JSON report (`--format json`) lists them all._")
    out.append("")

    # Capture.
    out.append("## Capture")
    out.append("")
    out.append(f"- **Chip:** {escape_text(chip['name'])}: peak {format_si(chip['peak_flops_per_s'], 'FLOP/s')} "
               f"({escape_text(chip['source']['peak_flops_per_s'], 120)}), HBM {format_si(chip['hbm_bytes_per_s'], 'B/s')} "
               f"({escape_text(chip['source']['hbm_bytes_per_s'], 120)})")
    out.append(f"- **Platform:** {escape_text(data['platform'])}; **devices:** {data['devices']}; "
               f"**hosts:** {escape_text(', '.join(data['hosts']) or '—', 200)}")
    out.append(f"- **Run:** {escape_text(run['name'] or '—')}"
               + (f" (other runs present: {escape_text(', '.join(run['other_runs']), 200)})" if run["other_runs"] else ""))
    if measured:
        warm = "warm-up excluded" if steps["warmup_excluded"] else "no warm-up excluded"
        out.append(f"- **Steps:** {steps['count']} ({escape_text(steps['source'], 120)}; {warm}); mean "
                   f"{format_seconds(steps['mean_s'])}, busy {format_seconds(steps['busy_s'])} / idle "
                   f"{format_seconds(steps['idle_s'])} per step")
    out.append("")
    out.append(f"<sub>xladiag {escape_text(data['tool']['version'])} · schema {data['schema_version']}</sub>")
    return "\n".join(out) + "\n"


def _left_out(selection: dict, n_rows: int, cell_limit: int) -> list[str]:
    """What --select/--ignore/--baseline left out, one row each (nothing when nothing was)."""
    rows = [[escape_text(d['key'], 120), escape_text(d["severity"]), escape_text(d["title"], cell_limit),
             escape_text(d["why"], 200)] for d in selection["ignored_findings"]]
    rows += [[escape_text(r['rule']), "", "(rule left out)", escape_text(r["why"], 200)]
             for r in selection["rules_left_out"]]
    if not rows:
        return []
    out = ["## Left out", ""] + _table(["Finding key / rule", "Severity", "Finding", "Why"], rows[:n_rows])
    if len(rows) > n_rows:
        out += ["", f"_{len(rows) - n_rows} more in the JSON report._"]
    return out + [""]


def render_markdown(report) -> str:
    data = report_to_dict(report)
    for budget in _BUDGETS[:-1]:
        text = _render(data, *budget)
        if len(text.encode("utf-8")) < MAX_BYTES:
            return text
    return _render(data, *_BUDGETS[-1])  # every cell and row count bounded: ~25 kB at most

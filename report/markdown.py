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

from ..units import count, format_percent, format_ratio, format_seconds, format_si
from .choices import choice_rows, program_share_text
from .detail_labels import detail_rows
from .glossary import used_terms
from .json_out import report_to_dict
from .md_blocks import (
    CUT_NOTE,
    MAX_BYTES,
    code_block,
    details,
    escape_html,
    escape_text,
    fit_under_cap,
    gates_section,
    wrap,
)
from .md_blocks import table as _table
from .memory_sections import markdown_section
from .model import category_name, memory_name, mfu_value, on_cpu, overlap_counted, unpriced_line
from .scopes_out import markdown_section as _scopes
from .svg import CLASS_LABELS, CLASS_ORDER, short_source
from .trace_links import occurrence_label

__all__ = ["MAX_BYTES", "escape_text", "render_markdown"]

# (ops rows, findings written out in full, characters per free-text cell, rows of the findings table):
# tried in order until the text fits. The last one is bounded whatever the input (~25 kB at most).
_BUDGETS = ((25, 20, 600, 200), (15, 10, 300, 100), (8, 5, 160, 60), (5, 3, 100, 40), (3, 2, 60, 25))
_SHOWN_WARNINGS = 3  # more are folded
_NUMBERED_FINDINGS = 5  # findings whose rule numbers are listed (the HTML and JSON have every one's)


def _render(data: dict, n_ops: int, n_findings: int, cell_limit: int, n_table: int, cut: bool = False) -> str:
    out = _title_and_notes(data, cell_limit, cut)
    out += gates_section(data.get("gates", ()))
    out += _verdict(data)
    out += _breakdown(data)
    out += _findings(data, n_findings, cell_limit, n_table)
    out += _left_out(data["selection"], n_table, cell_limit)
    out += _top_ops(data, n_ops)
    out += _scopes(data, min(n_ops, 12))
    out += markdown_section(data.get("memory_at_peak"), min(n_ops, 8))
    out += _hosts(data.get("host_steps"), n_table)
    out += _capture(data)
    out += glossary_section("\n".join(out))
    out.append(f"<sub>xladiag {escape_text(data['tool']['version'])} · schema {data['schema_version']}</sub>")
    return "\n".join(out) + "\n"


def glossary_section(body: str) -> list[str]:
    """'## Glossary': a line for each term the report uses that a reader may not know (report/glossary.py)."""
    terms = used_terms(body)
    if not terms:
        return []
    out = ["## Glossary", ""]
    for term, meaning in terms:
        out += wrap(f"**{escape_text(term)}**: {escape_text(meaning)}", "- ", "  ")
    return out + [""]


def _title_and_notes(data: dict, cell_limit: int, cut: bool) -> list[str]:
    """Title and headline, then what the reader must know first: cut, predicted only, capture scope, warnings."""
    run = data["run"]
    hlo_files = [Path(p).name for p in run["hlo_files"]]
    title = run["name"] or (hlo_files[0] if hlo_files else data["chip"]["name"])
    out = [f"# xladiag report: {escape_text(title, 120)}", ""]
    out += wrap(f"**{escape_text(data['headline'], 4 * cell_limit)}**")
    out.append("")
    if cut:
        out += wrap(CUT_NOTE)
        out.append("")
    if not data["measured"]:
        out.append("> **No trace was given: every time below is predicted** from the HLO and the chip table "
                   "(roofline), not measured.")
        out.append("")
    if data.get("capture_scope"):
        out += wrap(f"**What this capture can tell:** {escape_text(data['capture_scope'], 2 * cell_limit)}", "> ", "> ")
        out.append("")
    warnings = [wrap(f"⚠ {escape_text(w, 2 * cell_limit)}", "> ", "> ") for w in data["warnings"][:10]]
    shown = [line for i, w in enumerate(warnings[:_SHOWN_WARNINGS]) for line in ([">"] if i else []) + w]
    if shown:
        out += shown + [""]
    if len(warnings) > _SHOWN_WARNINGS:
        more = [line for w in warnings[_SHOWN_WARNINGS:] for line in w + [""]]
        out += details(f"{count(len(data['warnings']) - _SHOWN_WARNINGS, 'more warning')}", more[:-1]) + [""]
    return out


def _verdict(data: dict) -> list[str]:
    """Step time, MFU, recoverable time and the roofline ideal step, each with where it comes from."""
    measured, chip, steps = data["measured"], data["chip"], data["steps"]
    time_word = "measured" if measured else "predicted"
    mfu = mfu_value(data)
    step_note = (f"{time_word}, mean of {count(steps['count'], 'step')}{program_share_text(steps)}" if measured
                 else "predicted: sum of per-op rooflines")
    out = ["## Verdict", ""]
    out.append(f"- **Step time:** {format_seconds(data['step_s'])} ({step_note})")
    out += wrap(f"- **MFU:** {mfu} (model FLOPs ÷ (step × {format_si(chip['peak_flops_per_s'], 'FLOP/s')} peak, "
                f"{escape_text(short_source(chip['source']['peak_flops_per_s']), 80)})"
                + (f"; {format_percent(data['unknown_flops_share'])} of the step is in ops of unknown FLOPs, "
                   "not counted)"
                   if data.get("unknown_flops_share") else ")"), indent="  ")
    if unpriced := unpriced_line(data):
        out += wrap(f"- **Unpriced:** {unpriced}", indent="  ")
    rec = data["recoverable"]
    rec_share = (f"{format_percent(rec['fraction_of_step'])} of the step; "
                 if rec["fraction_of_step"] is not None else "")
    out += wrap(f"- **Recoverable per step:** {format_seconds(rec['s_per_step'])} ({rec_share}{time_word}: the "
                "findings' savings, each op counted by one finding)", indent="  ")
    if data["ideal_step_s"] is not None:
        out.append(f"- **Roofline ideal step:** {format_seconds(data['ideal_step_s'])} "
                   "(predicted: every op at its roofline)")
    else:
        out.append("- **Roofline ideal step:** n/a (no op has FLOPs or bytes: pass --hlo-dir)")
    out.append("")
    return out


def _breakdown(data: dict) -> list[str]:
    time_word = "measured" if data["measured"] else "predicted"
    total = sum(v or 0.0 for v in data["breakdown"].values())
    rows = [
        [CLASS_LABELS[k], format_seconds(data["breakdown"].get(k, 0.0)),
         format_percent((data["breakdown"].get(k, 0.0) or 0.0) / total) if total > 0 else "n/a"]
        for k in CLASS_ORDER
    ]
    return _table(["Where the step goes", f"{time_word} / step", "share"], rows, ["l", "r", "r"]) + [""]


def _rule_numbers(f: dict, cell_limit: int) -> list[str]:
    """The finding's details, labelled and in units from its rule's docstring (report/detail_labels.py)."""
    rows = [[escape_text(r["label"], 80), escape_text(r["value"], cell_limit)]
            for r in detail_rows(str(f["rule"]), f.get("details") or {})]
    return ["", "**Rule numbers:**", ""] + _table(["Number", "Value"], rows) if rows else []


def _findings(data: dict, n_findings: int, cell_limit: int, n_table: int) -> list[str]:
    """The ranked table, then each finding's evidence, fix and ops folded (the first one open)."""
    measured = data["measured"]
    findings = [f for f in data["findings"] if f["severity"] != "info"]
    notes = _notes([f for f in data["findings"] if f["severity"] == "info"], cell_limit)
    out = ["## Ranked fixes", ""]
    if not findings:
        none = ("No fix that saves step time on this capture." if notes else
                "No finding beyond those left out below." if data["selection"]["ignored_findings"]
                else "No rule fired on this capture.")
        return out + [none, ""] + notes
    rows = [
        [str(i), escape_text(f["severity"]), escape_text(f["title"], cell_limit),
         _saves(f, data.get("step_s")), format_percent(f["fraction_of_step"]),
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
        rule = f"`{f['rule']}`" if re.fullmatch(r"[A-Za-z0-9_.-]+", str(f["rule"])) else escape_text(f["rule"], 60)
        body = wrap(f"{rule} · costs {format_seconds(f['time_s_per_step'])} per step "
                    f"({format_percent(f['fraction_of_step'])}) · saves ~{_saves(f, data.get('step_s'))} "
                    f"· confidence {escape_text(f['confidence'])}")
        body += [""] + wrap(f"**Evidence:** {escape_text(f['evidence'], 2 * cell_limit)}")
        body += ["", "**Change to make:**", ""] + code_block(f["fix"], 4 * cell_limit)
        if f["ops"]:
            shown = f["ops"][:8]
            rows = [[escape_text(o["name"], 80)] + ([format_seconds(o["measured_s_per_step"])] if measured else [])
                    + [format_seconds(o["predicted_s_per_step"]), escape_text(o["detail"], cell_limit)]
                    + ([escape_text(occurrence_label(o.get("occurrence")), 160)] if measured else []) for o in shown]
            header = (["Op"] + (["measured / step"] if measured else []) + ["predicted / step", "Detail"]
                      + (["In the trace (one occurrence)"] if measured else []))
            body += [""] + _table(header, rows, ["l"] + ["r"] * (2 if measured else 1) + ["l"] * (2 if measured else 1))
            if len(f["ops"]) > len(shown):
                body += ["", f"_{count(len(f['ops']) - len(shown), 'more op')} in the JSON report._"]
        body += _rule_numbers(f, min(cell_limit, 120)) if i <= _NUMBERED_FINDINGS else []
        summary = (f"{i}. [{escape_html(f['severity'])}] {escape_html(f['title'], 150)}: saves "
                   f"~{format_seconds(f['est_savings_s_per_step'])} per step")
        out += details(summary, body, open_=i == 1) + [""]
    if len(findings) > n_findings:
        out.append(f"_{count(len(findings) - n_findings, 'more finding')} "
                   f"{'is' if len(findings) - n_findings == 1 else 'are'} in the table above; "
                   "details in the JSON/HTML report._")
        out.append("")
    return out + notes


def _saves(f: dict, step_s: float | None) -> str:
    """The saving alone (and its share of the step), and the share counted in the total when other findings
    overlap it."""
    counted, alone = overlap_counted(f), format_seconds(f["est_savings_s_per_step"])
    if step_s:
        alone += f" ({format_percent(f['est_savings_s_per_step'] / step_s)})"
    return alone if counted is None else f"{alone} alone, {format_seconds(counted)} in the total"


def _notes(notes: list[dict], cell_limit: int) -> list[str]:
    """Findings that save nothing on this capture (severity info), apart from the fixes."""
    if not notes:
        return []
    out = ["### Notes (nothing to save on this capture)", ""]
    for f in notes:
        out += wrap(f"{escape_text(f['title'], cell_limit)} (`{escape_text(f['rule'], 60)}`): "
                    f"{escape_text(f['evidence'], cell_limit)}", prefix="- ", indent="  ")
    return out + [""]


def _top_ops(data: dict, n_ops: int) -> list[str]:
    measured = data["measured"]
    time_word = "measured" if measured else "predicted"
    ops = [o for o in data["ops"] if o["in_step"]]
    key = "measured_s_per_step" if measured else "predicted_s_per_step"
    ops.sort(key=lambda o: -(o[key] or 0.0))
    shown = ops[:n_ops]
    rows = []
    for o in shown:
        measured_cells = ([format_seconds(o["measured_s_per_step"]), format_percent(o["share_of_step"])]
                          if measured else [])
        rows.append(
            [escape_text(o["name"], 80), escape_text(category_name(o["category"], on_cpu(data)), 40),
             escape_text(o["bound_by"])]
            + measured_cells
            + [format_seconds(o["predicted_s_per_step"]), format_ratio(o["efficiency"]) if measured else
               format_percent((o["predicted_s_per_step"] or 0.0) / data["step_s"]) if data["step_s"] else "n/a",
               escape_text(o["source"], 80)]
        )
    header = ["Op", "Category", "Bound by"] + (["measured / step", "% of step"] if measured else []) + [
        "predicted / step", "efficiency" if measured else "% of step", "Source"]
    body = _table(header, rows, ["l", "l", "l"] + ["r"] * (len(header) - 4) + ["l"])
    if len(ops) > len(shown):
        body += ["", f"_Showing {len(shown)} of {count(len(ops), 'op')}; "
                 "the JSON report (`--format json`) lists them all._"]
    summary = (f"The {count(len(shown), 'op')} with the most {time_word} time per step"
               + (f" (of {len(ops)})" if len(ops) > len(shown) else ""))
    return [f"## Top ops by {time_word} time per step", ""] + details(summary, body) + [""]


def _capture(data: dict) -> list[str]:
    chip, steps, run = data["chip"], data["steps"], data["run"]
    body = wrap(f"- **Chip:** {escape_text(chip['name'])}: peak {format_si(chip['peak_flops_per_s'], 'FLOP/s')} "
                f"({escape_text(chip['source']['peak_flops_per_s'], 120)}), "
                f"{memory_name(data)} {format_si(chip['hbm_bytes_per_s'], 'B/s')} "
                f"({escape_text(chip['source']['hbm_bytes_per_s'], 120)})", indent="  ")
    body += wrap(f"- **Platform:** {escape_text(data['platform'])}; **devices:** {data['devices']}; "
                 f"**hosts:** {escape_text(', '.join(data['hosts']) or '—', 200)}", indent="  ")
    body += wrap(f"- **Run:** {escape_text(run['name'] or '—')}"
                 + (f" ({escape_text(run['note'], 200)}; others: {escape_text(', '.join(run['other_runs']), 200)})"
                    if run.get("note") else
                    f" (other runs present: {escape_text(', '.join(run['other_runs']), 200)})"
                    if run["other_runs"] else ""),
                 indent="  ")
    if data["measured"]:
        warm = "warm-up excluded" if steps["warmup_excluded"] else "no warm-up excluded"
        body += wrap(f"- **Steps:** {steps['count']} ({escape_text(steps['source'], 120)}; {warm}); mean "
                     f"{format_seconds(steps['mean_s'])}, busy {format_seconds(steps['busy_s'])} / idle "
                     f"{format_seconds(steps['idle_s'])} per step", indent="  ")
    chosen = [f"{what.lower()} {escape_text(value, 200)} ({source.split(' (')[0]})"
              for what, value, source in choice_rows(data.get("choices") or {})]
    if chosen:
        body += wrap("- **Analysed:** " + "; ".join(chosen), indent="  ")
    summary = (f"{escape_html(chip['name'], 80)}, {count(data['devices'], 'device')}, "
               f"{escape_html(run['name'] or 'no run', 80)}")
    return ["## Capture", ""] + details(summary, body) + [""]


def _hosts(host_steps: dict | None, n_rows: int) -> list[str]:
    """Step time per host, slowest first, with its lag behind the other hosts' median (two hosts or more)."""
    if not host_steps or len(host_steps["hosts"]) < 2:
        return []
    rows = [[escape_text(h["host"], 80), str(h["devices"]), format_seconds(h["step_s"]), format_seconds(h["busy_s"]),
             format_seconds(h["idle_s"]), format_seconds(h["lag_s"])] for h in host_steps["hosts"][:n_rows]]
    lead = (f"Slowest host: **{escape_text(host_steps['slowest_host'], 80)}**, {format_seconds(host_steps['lag_s'])} "
            f"({format_percent(host_steps['lag_fraction'])}) behind the other hosts' median "
            f"{format_seconds(host_steps['median_step_s'])} step.")
    out = ["## Hosts", "", lead, ""] + _table(["Host", "Devices", "Step", "Busy", "Idle", "vs others' median"], rows,
                                             ["l", "r", "r", "r", "r", "r"])
    if len(host_steps["hosts"]) > n_rows:
        out += ["", f"_{count(len(host_steps['hosts']) - n_rows, 'more host')} in the JSON report._"]
    return out + [""]


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
    # the last budget bounds every cell and row count: ~25 kB at most
    return fit_under_cap(lambda budget, cut: _render(data, *budget, cut=cut), _BUDGETS)

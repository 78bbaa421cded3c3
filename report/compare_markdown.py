"""The compare Markdown, for a PR comment: verdict first, then tables; long lists folded in ``<details>``.

Built from the shared blocks of :mod:`.md_blocks` (escaped cells, prose wrapped under 200 characters,
``<details>``, the gates table), so profile text can neither break a table nor inject HTML or mentions.
The JSON keeps every row.
"""

from __future__ import annotations

from ..units import count, format_percent, format_seconds
from .compare_json import COMPARE_SCHEMA_VERSION
from .compare_model import VERDICT_WORDS, mfu_ratio_text, ratio_text, share_text, signed_seconds, step_sentence
from .md_blocks import (
    CUT_NOTE,
    HARD_WIDTH,
    details,
    escape_html,
    escape_text,
    fit_under_cap,
    gates_section,
    table,
    wrap,
)
from .svg import CLASS_LABELS

MAX_LINE = HARD_WIDTH  # no line outside a table is longer
TOP_OPS = 10  # op rows shown open; the rest (up to the budget's op rows) in <details>
# (changed op rows, finding rows, characters of an op name, characters of a title or warning): tried in order
# until the text is under the diagnose Markdown's cap (md_blocks.MAX_BYTES); the last is bounded whatever the input.
_BUDGETS = ((60, 40, 70, 400), (30, 20, 70, 200), (15, 10, 50, 120), (TOP_OPS, 5, 30, 80))
_STATUS_ORDER = ("slower", "faster", "new", "removed")


def _table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    return table(header, rows, list(align))


def _op_rows(ops: list[dict], base_step, name_chars: int) -> list[list[str]]:
    rows = []
    for o in ops:
        name = escape_text(o["name"], name_chars)
        if o.get("base_name"):
            name = f"{escape_text(o['base_name'], name_chars * 5 // 7)} → {name}"
        rows.append([escape_text(o["status"]), name, escape_text(o["time_class"] or "", 16),
                     format_seconds(o["base_s_per_step"]), format_seconds(o["new_s_per_step"]),
                     signed_seconds(o["delta_s_per_step"]), share_text(o["delta_s_per_step"], base_step),
                     escape_text(o["matched_by"] or "—", 14), escape_text(o["source"] or "", name_chars * 6 // 7)])
    return rows


_OP_HEADER = ["Status", "Op (base → new)", "Class", "Base / step", "New / step", "Change", "% of base step",
              "Matched by", "Source"]
_OP_ALIGN = "lllrrrrll"


def _details(summary: str, lines: list[str]) -> list[str]:
    return details(escape_html(summary), lines) + [""]


def render_compare_markdown(comparison) -> str:
    return fit_under_cap(lambda budget, cut: _render(comparison, *budget, cut=cut), _BUDGETS)


def _render(comparison, more_ops: int, max_findings: int, name_chars: int, text_chars: int, cut: bool) -> str:
    data = comparison.data
    out = _verdict_section(comparison, text_chars, cut)
    out += _step_table(data)
    out += _breakdown_section(data)
    out += _ops_section(data, more_ops, name_chars)
    out += _findings_section(data, max_findings, text_chars)
    out += _inputs_section(data)
    out.append(f"<sub>xladiag compare · compare schema {COMPARE_SCHEMA_VERSION}</sub>")
    return "\n".join(out) + "\n"


def _verdict_section(comparison, text_chars: int, cut: bool) -> list[str]:
    """The verdict and its sentence, the noise test, the gates and the warnings."""
    data = comparison.data
    step = data["step"]
    out = [f"## xladiag compare: {VERDICT_WORDS[step['verdict']]}", ""]
    out += wrap(f"**{escape_text(step_sentence(data), 300)}**")
    out.append("")
    if cut:
        out += wrap(CUT_NOTE) + [""]
    test = step["noise_test"]
    out += wrap(f"Noise: {escape_text(test['reason'], 300)}. Rule: {escape_text(test['rule'])}.")
    out.append("")
    out += gates_section([g.to_dict() for g in comparison.gates])
    for w in data["warnings"][:8]:
        out += wrap(f"⚠ {escape_text(w, text_chars)}", "> ", "> ")
    if data["warnings"]:
        out.append("")
    return out


def _step_table(data: dict) -> list[str]:
    """Step time, MFU, steps, spread and the change's confidence interval, base against new."""
    step, test = data["step"], data["step"]["noise_test"]
    spread = test["spread_s"]
    rows = [["Step time (mean)", format_seconds(step["base_s"]), format_seconds(step["new_s"]),
             f"{signed_seconds(step['delta_s'])} ({ratio_text(step['ratio'])})"],
            ["MFU", format_percent(data["mfu"]["base"]), format_percent(data["mfu"]["new"]),
             mfu_ratio_text(data["mfu"])],
            ["Steps measured", str(data["base"]["steps"] or 0), str(data["new"]["steps"] or 0), ""],
            ["Step-to-step spread (larger std)", "", "", format_seconds(spread) if spread is not None else "n/a"]]
    if test["ci_low_s"] is not None:
        rows.append([f"{1 - test['alpha']:.0%} CI of the change", "", "",
                     f"{signed_seconds(test['ci_low_s'])} … {signed_seconds(test['ci_high_s'])}"])
    return _table(["", "Base", "New", "Change"], rows, "lrrr") + [""]


def _breakdown_section(data: dict) -> list[str]:
    time_word = "measured" if data["measured"] else "predicted"
    base_step = data["step"]["base_s"]
    out = [f"### Where the step goes ({time_word}, per step)", ""]
    rows = [[escape_text(CLASS_LABELS.get(r["class"], r["class"])), format_seconds(r["base_s"]),
             format_seconds(r["new_s"]), signed_seconds(r["delta_s"]), share_text(r["delta_s"], base_step)]
            for r in data["breakdown"]]
    return out + _table(["Class", "Base", "New", "Change", "% of base step"], rows, "lrrrr") + [""]


def _ops_section(data: dict, more_ops: int, name_chars: int) -> list[str]:
    """The counts by status, the largest changes open, up to ``more_ops`` folded, and how many were left out."""
    base_step = data["step"]["base_s"]
    counts = data["ops_summary"]["counts"]
    tol, step_tol = data["ops_summary"]["rel_tol"], data["ops_summary"]["step_tol"]
    out = ["### Ops that changed", ""]
    out += wrap(", ".join(f"{counts[s]} {s}" for s in (*_STATUS_ORDER, "unchanged"))
                 + " (matched by program and op name, then by framework op and source line; "
                   f"a change under {format_percent(tol)} of the op or {format_percent(step_tol)} of the step is "
                   "unchanged; "
                   "per-op changes are not tested against noise and gate nothing).")
    out.append("")
    moved = [o for o in data["ops"] if o["status"] != "unchanged"]
    if not moved:
        return out + ["No op changed beyond the tolerance.", ""]
    out += _table(_OP_HEADER, _op_rows(moved[:TOP_OPS], base_step, name_chars), _OP_ALIGN) + [""]
    more = moved[TOP_OPS:more_ops]
    if more:
        out += _details(f"{count(len(more), 'more changed op')}",
                        _table(_OP_HEADER, _op_rows(more, base_step, name_chars), _OP_ALIGN))
    if len(moved) > max(more_ops, TOP_OPS):
        out += [f"_{count(len(moved) - max(more_ops, TOP_OPS), 'smaller change')} left out; "
                "the JSON (`--format json`) lists every op._", ""]
    return out


def _findings_section(data: dict, max_findings: int, text_chars: int) -> list[str]:
    """Findings by status, what both sides left out, and up to ``max_findings`` rows (folded past TOP_OPS)."""
    fs = data["findings_summary"]
    out = ["### Findings", ""]
    out += wrap(", ".join(f"{fs[s]} {s}" for s in fs) + " (matched by the key rule:kind:main_op).")
    out.append("")
    chosen = data.get("selection") or {}
    if chosen.get("rules_left_out") or chosen.get("baseline_keys"):
        left = ([f"rules {', '.join(chosen['rules_left_out'])}"] if chosen["rules_left_out"] else []) + \
            ([count(chosen["baseline_keys"], "accepted finding") + " (baseline)"] if chosen["baseline_keys"] else [])
        out += wrap(escape_text(f"Left out of both sides: {' and '.join(left)}.", text_chars * 2)) + [""]
    findings = data["findings"]
    if not findings:
        return out
    rows = [[escape_text(f["status"]), escape_text(f["title"], text_chars), f"`{escape_text(f['key'], 60)}`",
             f"{escape_text(f['base_severity'] or '—')} → {escape_text(f['new_severity'] or '—')}",
             format_seconds(f["base_s_per_step"]), format_seconds(f["new_s_per_step"]),
             signed_seconds(f["delta_s_per_step"])] for f in findings[:max_findings]]
    finding_table = _table(["Status", "Finding", "Key", "Severity", "Costs before", "Costs after", "Change"],
                           rows, "lllrrrr")
    shown = f"All {count(len(rows), 'finding')}" if len(rows) == len(findings) else \
        f"{len(rows)} of {count(len(findings), 'finding')} (the JSON lists every one)"
    out += (_details(shown, finding_table) if len(rows) > TOP_OPS else finding_table + [""])
    if len(findings) > len(rows) <= TOP_OPS:
        out += [f"_{count(len(findings) - len(rows), 'more finding')} in the JSON (`--format json`)._", ""]
    return out + _closed_loop_lines(findings, text_chars)


def _closed_loop_lines(findings: list[dict], text_chars: int) -> list[str]:
    """Claimed against realized, for the base findings the new side fixed (disappeared or shrank)."""
    fixed = [f for f in findings if f.get("claimed_s_per_step") is not None]
    if not fixed:
        return []
    out = wrap("**Did the claimed savings hold?** Each finding the change removed or shrank: the saving it claimed, "
               "what the whole step saved (other changes count there too) and what the finding's own cost fell by:")
    out.append("")
    for f in fixed[:TOP_OPS]:
        step = f["realized_step_s_per_step"]
        step_text = ("the step: unknown" if step is None else f"the step saved {format_seconds(step)}" if step >= 0
                     else f"the step got {format_seconds(-step)} slower")
        share = f" ({format_percent(f['realized_share'])} of the claim)" if f.get("realized_share") is not None else ""
        counted = f.get("claimed_counted_s_per_step")
        alone = (f" alone ({format_seconds(counted)} counted in the base's total, the rest overlapping other "
                 "findings)" if counted is not None and abs(counted - f["claimed_s_per_step"]) > 1e-3 * max(
                     f["claimed_s_per_step"], 1e-12) else "")
        out += wrap(f"{escape_text(f['title'], text_chars)} ({escape_text(f['status'])}): claimed "
                    f"{format_seconds(f['claimed_s_per_step'])}{alone}; {step_text}{share}; its own cost fell "
                    f"{format_seconds(f['realized_own_s_per_step'])}", prefix="- ", indent="  ")
    return out + [""]


def _inputs_section(data: dict) -> list[str]:
    base, new = data["base"], data["new"]
    rows = [[label, escape_text(base[k], 80) if base[k] is not None else "—",
             escape_text(new[k], 80) if new[k] is not None else "—"]
            for label, k in (("Input", "label"), ("Read from", "input_kind"), ("Chip", "chip"),
                             ("Platform", "platform"), ("Devices", "devices"), ("Run", "run"),
                             ("Steps from", "step_source"), ("xladiag", "tool_version"))]
    return _details("Inputs", _table(["", "Base", "New"], rows, "lll"))

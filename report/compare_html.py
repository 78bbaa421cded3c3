"""The compare HTML: one self-contained page (inline CSS and SVG, no script, no URL).

Side-by-side breakdown bars, the per-step distributions, a waterfall of the largest op deltas, and the
op and finding tables. Numbers come from the comparison dict (the same as the JSON and Markdown).
"""

from __future__ import annotations

import re

from markupsafe import Markup

from ..units import format_percent, format_seconds
from . import compare_svg, svg
from .compare_model import VERDICT_WORDS, mfu_ratio_text, ratio_text, share_text, signed_seconds
from .html import _environment, _load_template

WATERFALL_OPS = 12
MAX_HTML_OPS = 500
GROUPED = ("removed", "new")  # ops on one side only: shown by kind, with counts


def compare_context(comparison) -> dict:
    data = comparison.to_dict()
    step, base, new = data["step"], data["base"], data["new"]
    test = step["noise_test"]
    groups = op_groups(data["ops"], step["base_s"])
    labels = waterfall_items(data["ops"], groups)
    cards = [
        {"label": "Step time", "value": f"{format_seconds(step['base_s'])} → {format_seconds(step['new_s'])}",
         "sub": f"{signed_seconds(step['delta_s'])} ({ratio_text(step['ratio'])})"},
        {"label": "Verdict", "value": VERDICT_WORDS[step["verdict"]], "sub": test["reason"]},
        {"label": "MFU", "value": f"{format_percent(data['mfu']['base'])} → {format_percent(data['mfu']['new'])}",
         "sub": mfu_ratio_text(data["mfu"])},
    ]
    reg = data["regression"]
    if reg["threshold"] is not None:
        cards.append({"label": f"Regression gate ({format_percent(reg['threshold'])})",
                      "value": "tripped" if reg["tripped"] else "passed", "sub": reg["reason"]})
    op_rows = [{**o, "base": format_seconds(o["base_s_per_step"]), "new": format_seconds(o["new_s_per_step"]),
                "delta": signed_seconds(o["delta_s_per_step"]),
                "share": share_text(o["delta_s_per_step"], step["base_s"]),
                "ratio_text": ratio_text(o["ratio"])}
               for o in [o for o in data["ops"] if o["status"] not in GROUPED][:MAX_HTML_OPS]]
    finding_rows = [{**f, "base": format_seconds(f["base_s_per_step"]), "new": format_seconds(f["new_s_per_step"]),
                     "delta": signed_seconds(f["delta_s_per_step"])} for f in data["findings"]]
    breakdown_rows = [{"label": svg.CLASS_LABELS.get(r["class"], r["class"]), "base": format_seconds(r["base_s"]),
                       "new": format_seconds(r["new_s"]), "delta": signed_seconds(r["delta_s"]),
                       "share": share_text(r["delta_s"], step["base_s"])} for r in data["breakdown"]]
    input_rows = [(label, base[k], new[k]) for label, k in (
        ("Input", "label"), ("Read from", "input_kind"), ("Chip", "chip"), ("Platform", "platform"),
        ("Devices", "devices"), ("Run", "run"), ("Steps", "steps"), ("Steps from", "step_source"),
        ("xladiag", "tool_version"))]
    as_dict = {b["class"]: b["base_s"] for b in data["breakdown"]}, {b["class"]: b["new_s"] for b in data["breakdown"]}
    return {
        "title": f"xladiag compare: {base['label']} → {new['label']}", "groups": groups,
        "headline": data["headline"], "warnings": data["warnings"], "cards": cards,
        "test": test, "time_word": "measured" if data["measured"] else "predicted",
        "base_bar": Markup(svg.breakdown_bar(as_dict[0], title="Base: step time breakdown",
                                             element_id="breakdown-base", width=620)),
        "new_bar": Markup(svg.breakdown_bar(as_dict[1], title="New: step time breakdown", element_id="breakdown-new",
                                            width=620)),
        "breakdown_rows": breakdown_rows,
        "strip": Markup(compare_svg.step_strip(base["per_step_s"], new["per_step_s"])),
        "waterfall": (Markup(compare_svg.waterfall(step["base_s"], step["new_s"], labels))
                      if step["delta_s"] is not None else ""),
        "op_rows": op_rows, "ops_total": sum(o["status"] not in GROUPED for o in data["ops"]),
        "counts": data["ops_summary"]["counts"],
        "finding_rows": finding_rows, "findings_summary": data["findings_summary"], "input_rows": input_rows,
        "version": data["tool"]["version"], "schema": data["compare_schema_version"],
        "css": Markup(_load_template("report.css")),
    }


def _kind(name: str) -> str:
    """An op's kind from its HLO name: 'all_gather.73' -> 'all_gather', 'fusion' -> 'fusion'."""
    return re.sub(r"(\.\d+)+$", "", name or "") or "(unnamed)"


def op_groups(ops: list[dict], base_s) -> list[dict]:
    """Removed and added ops grouped by status and kind, largest total change first, with counts: 71 removed
    ops read as three lines, not 71."""
    members: dict[tuple[str, str], list[dict]] = {}
    for o in ops:
        if o["status"] in GROUPED:
            members.setdefault((o["status"], _kind(o["name"])), []).append(o)
    out = []
    for (status, kind), group in members.items():
        base, new, delta = (sum(o[c] or 0.0 for o in group)
                            for c in ("base_s_per_step", "new_s_per_step", "delta_s_per_step"))
        out.append({"status": status, "kind": kind, "count": len(group), "delta_s": delta,
                    "members": [(o["name"], o["source"] or "") for o in group],
                    "time_class": ", ".join(sorted({o["time_class"] or "other" for o in group})),
                    "base": format_seconds(base), "new": format_seconds(new), "delta": signed_seconds(delta),
                    "share": share_text(delta, base_s)})
    return sorted(out, key=lambda g: -abs(g["delta_s"]))


def waterfall_items(ops: list[dict], groups: list[dict]) -> list[tuple[str, float]]:
    """The waterfall's named bars: matched ops that changed, one bar per group of removed or added ops, the
    largest first (the chart puts what they leave, "everything else", last)."""
    items = [(f"{o['base_name']} → {o['name']}" if o["base_name"] else o["name"], o["delta_s_per_step"] or 0.0)
             for o in ops if o["status"] not in GROUPED and o["status"] != "unchanged"]
    items += [(f"{g['count']} {g['kind']} op{'s' if g['count'] != 1 else ''} {g['status']}"
               if g["status"] == "removed" else f"{g['count']} new {g['kind']} op{'s' if g['count'] != 1 else ''}",
               g["delta_s"]) for g in groups]
    return sorted(items, key=lambda item: -abs(item[1]))[:WATERFALL_OPS]


def render_compare_html(comparison) -> str:
    return _environment().get_template("compare.html.j2").render(**compare_context(comparison))

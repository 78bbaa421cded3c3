"""The compare report as plain text (``diagnose compare --format text``): for a terminal or a log, no markup.

The same data as the Markdown (verdict, step table, breakdown, changed ops, findings), in aligned columns; the
JSON keeps every row. Profile text (op names, titles) is made visible before it is printed.
"""

from __future__ import annotations

from ..text_safety import clean_text, visible_controls
from ..units import format_percent, format_seconds
from .compare_model import VERDICT_WORDS, ratio_text, share_text, signed_seconds, step_sentence
from .svg import CLASS_LABELS

TOP = 15  # changed ops and findings listed; the JSON has the rest
NAME_CHARS = 48


def _shown(text, width: int = NAME_CHARS) -> str:
    text = visible_controls(clean_text(str(text or "")))
    return text if len(text) <= width else text[: width - 1] + "…"


def _columns(rows: list[list[str]], right: str) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, right)).rstrip()
            for r in rows]


def render_compare_text(comparison) -> str:
    data = comparison.data
    step = data["step"]
    out = [f"xladiag compare: {VERDICT_WORDS[step['verdict']]}", _shown(step_sentence(data), 300),
           f"  noise: {_shown(step['noise_test']['reason'], 300)}"]
    if data["regression"]["tripped"]:
        out.append(f"! regression: {_shown(data['regression']['reason'], 300)}")
    out += [f"! {_shown(w, 300)}" for w in data["warnings"][:8]]
    out += ["", "Step"] + _columns([
        ["", "base", "new", "change"],
        ["step time (mean)", format_seconds(step["base_s"]), format_seconds(step["new_s"]),
         f"{signed_seconds(step['delta_s'])} ({ratio_text(step['ratio'])})"],
        ["MFU", format_percent(data["mfu"]["base"]), format_percent(data["mfu"]["new"]),
         ratio_text(data["mfu"]["ratio"])],
        ["steps measured", str(data["base"]["steps"] or 0), str(data["new"]["steps"] or 0), ""]], "lrrr")
    out += ["", "Where the step goes (per step)"] + _columns(
        [["class", "base", "new", "change", "% of base step"]]
        + [[CLASS_LABELS.get(r["class"], r["class"]), format_seconds(r["base_s"]), format_seconds(r["new_s"]),
            signed_seconds(r["delta_s"]), share_text(r["delta_s"], step["base_s"])]
           for r in data["breakdown"]], "lrrrr")
    moved = [o for o in data["ops"] if o["status"] != "unchanged"]
    out += ["", f"Ops that changed ({len(moved)})"]
    out += _columns([["status", "op", "base / step", "new / step", "change"]]
                    + [[o["status"], _shown(o["name"]), format_seconds(o["base_s_per_step"]),
                        format_seconds(o["new_s_per_step"]), signed_seconds(o["delta_s_per_step"])]
                       for o in moved[:TOP]], "llrrr") if moved else ["  none beyond the tolerance"]
    findings = data["findings"]
    out += ["", f"Findings ({len(findings)})"]
    out += _columns([["status", "finding", "before", "after"]]
                    + [[f["status"], _shown(f["title"], 60), format_seconds(f["base_s_per_step"]),
                        format_seconds(f["new_s_per_step"])] for f in findings[:TOP]], "llrr") \
        if findings else ["  none"]
    if len(moved) > TOP or len(findings) > TOP:
        out += ["", "(--format json lists every op and finding)"]
    return "\n".join(out) + "\n"

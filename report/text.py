"""The terminal report (``--format text``): the verdict, the ranked fixes and the top ops.

Every line fits the terminal's width (:func:`terminal_width`: ``COLUMNS``, else the TTY's, else :data:`WIDTH`
when piped; clamped to :data:`MIN_WIDTH`..:data:`MAX_WIDTH`; wide characters count two): prose, fixes
included, is wrapped whole, names in tables are cut with an ellipsis. Text from the profile goes through
:func:`.text_safety.visible_controls` before layout, so it cannot move the cursor or recolour the terminal.
Colour (ANSI SGR) is added only when asked (the CLI asks on a TTY without ``NO_COLOR``);
:func:`guard_keeping_sgr` is the last guard that keeps exactly those codes. Reads the same dict as the JSON
report, so the numbers agree.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import unicodedata

from ..text_safety import visible_controls
from ..units import count, format_percent, format_ratio, format_seconds, format_si
from . import scopes_out
from .choices import program_share_text
from .glossary import used_terms
from .json_out import report_to_dict
from .memory_sections import text_section
from .model import category_name, mfu_value, on_cpu, overlap_counted, unpriced_line
from .svg import CLASS_LABELS, CLASS_ORDER
from .trace_links import occurrence_label

WIDTH = 100  # piped, or no terminal size known
_COLUMNS_VAR = "COLUMNS"  # the shell's terminal width, when exported
MIN_WIDTH, MAX_WIDTH = 60, 200  # narrower squeezes the op table to nothing; wider is hard to read
N_OPS = 10  # top ops listed
N_FINDING_OPS = 3  # ops named under each fix

_SGR = {"bold": "1", "dim": "2", "red": "31", "yellow": "33", "cyan": "36", "green": "32"}
_SEVERITY_STYLE = {"high": "red", "medium": "yellow", "low": "cyan"}
_SGR_RE = re.compile(r"\x1b\[[0-9;]*m")


def terminal_width(environ=None, stream=None) -> int:
    """Columns to lay the report out in: ``COLUMNS`` when it is a number, else the terminal's when ``stream``
    (stdout) is one, else :data:`WIDTH`; clamped to MIN_WIDTH..MAX_WIDTH."""
    environ, stream = os.environ if environ is None else environ, sys.stdout if stream is None else stream
    width, given = WIDTH, str(environ.get(_COLUMNS_VAR) or "").strip()
    if given.isdigit():
        width = int(given)
    else:
        try:
            if stream.isatty():
                width = os.get_terminal_size(stream.fileno()).columns or WIDTH
        except (AttributeError, OSError, ValueError):  # no real file behind it (a test runner's capture)
            pass
    return max(MIN_WIDTH, min(MAX_WIDTH, width))


def columns(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide/full-width characters 2, combining marks 0."""
    n = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, ending in an ellipsis when cut."""
    if columns(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = columns(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def clean_text(value) -> str:
    """Profile text as one visible line: controls written as \\uXXXX, newlines and runs of space folded."""
    s = "" if value is None else str(value)
    return visible_controls(re.sub(r"\s+", " ", s).strip())


class _Out:
    def __init__(self, color: bool, width: int):
        self.color, self.width, self.lines = color, width, []

    def style(self, text: str, *styles: str) -> str:
        if not self.color or not styles or not text:
            return text
        return f"\x1b[{';'.join(_SGR[s] for s in styles)}m{text}\x1b[0m"

    def line(self, text: str = "", *styles: str) -> None:
        self.lines.append(self.style(fit(text, self.width), *styles))

    def wrap(self, text: str, indent: str = "", first: str | None = None, max_lines: int | None = None) -> None:
        """Wrapped prose, all of it; long unbreakable words (op names, paths) are broken across lines."""
        first = indent if first is None else first
        width = self.width - max(columns(indent), columns(first))
        lines = textwrap.wrap(text, width=max(width, 20), break_long_words=True, break_on_hyphens=False) or [""]
        if max_lines is not None and len(lines) > max_lines:
            lines = lines[:max_lines]
            last = lines[-1]
            lines[-1] = fit(last + " …", width) if columns(last) + 2 <= width else fit(last, width - 1) + "…"
        for i, chunk in enumerate(lines):
            self.line((first if i == 0 else indent) + chunk)

    def row(self, cells: list[str], widths: list[int], align: str) -> str:
        parts = []
        for cell, w, a in zip(cells, widths, align):
            cell = fit(cell, w)
            pad = " " * (w - columns(cell))
            parts.append(pad + cell if a == "r" else cell + pad)
        return "  ".join(parts).rstrip()


def _verdict(out: _Out, data: dict) -> None:
    measured = data["measured"]
    steps, rec, chip = data["steps"], data["recoverable"], data["chip"]
    out.line("Verdict", "bold")
    step_note = (f"measured, mean of {steps['count']} steps{program_share_text(steps)}" if measured
                 else "predicted: sum of per-op rooflines")
    mfu = mfu_value(data)
    share = f", {format_percent(rec['fraction_of_step'])} of the step" if rec["fraction_of_step"] is not None else ""
    rows = [
        ("Step time", f"{format_seconds(data['step_s'])} ({step_note})"),
        ("MFU", f"{mfu} (peak {format_si(chip['peak_flops_per_s'], 'FLOP/s')}, {clean_text(chip['name'])})"),
        ("Recoverable", f"{format_seconds(rec['s_per_step'])} per step{share} (each op counted by one finding)"),
        ("Roofline ideal", format_seconds(data["ideal_step_s"]) if data["ideal_step_s"] is not None
         else "n/a (no op has FLOPs or bytes: pass --hlo-dir)"),
    ] + ([("Unpriced", unpriced)] if (unpriced := unpriced_line(data)) else [])
    for label, value in rows:
        out.wrap(value, indent=" " * 18, first=f"  {label:<16}")
    total = sum(v or 0.0 for v in data["breakdown"].values())
    if total > 0:
        parts = [f"{CLASS_LABELS[k]} {format_percent((data['breakdown'].get(k) or 0.0) / total)}"
                 for k in CLASS_ORDER if (data["breakdown"].get(k) or 0.0) > 0]
        out.wrap(" · ".join(parts), indent=" " * 18, first=f"  {'Step goes to':<16}")
    out.line()


def _saves(f: dict, step_s: float | None) -> str:
    """'saves ~X/step (Y% of the step)', and the share counted in the total when other findings overlap it."""
    counted = overlap_counted(f)
    share = f" ({format_percent(f['est_savings_s_per_step'] / step_s)})" if step_s else ""
    text = f"saves ~{format_seconds(f['est_savings_s_per_step'])}/step{share}"
    return text if counted is None else f"{text} alone, {format_seconds(counted)} in the total"


def _notes(out: _Out, notes: list[dict]) -> None:
    """Findings that save nothing on this capture (severity info): what they say, apart from the fixes."""
    if not notes:
        return
    out.line("Notes (nothing to save on this capture)", "bold")
    for f in notes:
        out.wrap(f"{clean_text(f['title'])} ({clean_text(f['rule'])})", indent="    ", first="  - ", max_lines=3)
    out.line()


def _fixes(out: _Out, data: dict) -> None:
    findings = [f for f in data["findings"] if f["severity"] != "info"]
    out.line("Ranked fixes", "bold")
    if not findings:
        out.line("  No rule fired on this capture." if not data["findings"] else
                 "  No fix that saves step time on this capture (notes below).")
        out.line()
        _notes(out, data["findings"])
        return
    measured = data["measured"]
    for i, f in enumerate(findings, 1):
        sev = f["severity"]
        head = f"{i:>2}. {sev.upper():<6} "
        title = textwrap.wrap(clean_text(f["title"]), width=out.width - len(head)) or [""]
        out.lines.append(out.style(f"{i:>2}. ", "bold")
                         + out.style(f"{sev.upper():<6}", _SEVERITY_STYLE.get(sev, "bold"))
                         + " " + out.style(fit(title[0], out.width - len(head)), "bold"))
        if len(title) > 1:
            out.line(" " * len(head) + " ".join(title[1:]), "bold")
        out.line(" " * len(head) + f"{_saves(f, data.get('step_s'))} · costs "
                 f"{format_percent(f['fraction_of_step'])} of step · confidence {f['confidence']} · "
                 f"{clean_text(f['rule'])}", "dim")
        out.wrap(clean_text(f["fix"]), indent=" " * len(head), first=" " * (len(head) - 5) + "Fix: ")
        for j, op in enumerate(f["ops"][:N_FINDING_OPS]):
            when = op["measured_s_per_step"] if measured else op["predicted_s_per_step"]
            detail = f" · {clean_text(op['detail'])}" if op.get("detail") else ""
            out.line(f"{'Ops: ' if j == 0 else '':>11}{clean_text(op['name'])}: {format_seconds(when)}/step{detail}")
            if op.get("occurrence"):
                out.line(f"{'':13}at {clean_text(occurrence_label(op['occurrence']))}", "dim")
        if len(f["ops"]) > N_FINDING_OPS:
            out.line(f"{'':11}… {len(f['ops']) - N_FINDING_OPS} more ops (--format json lists them)", "dim")
    out.line()
    _notes(out, [f for f in data["findings"] if f["severity"] == "info"])


def _left_out(out: _Out, selection: dict | None) -> None:
    """Findings --select/--ignore/--baseline (or [tool.xladiag]) left out: counted, so none is silently gone."""
    dropped = (selection or {}).get("ignored_findings") or []
    if not dropped:
        return
    whys = sorted({clean_text(d["why"]) for d in dropped})
    out.wrap(f"{count(len(dropped), 'finding')} left out: " + "; ".join(whys),
             indent="  ", first="  ", max_lines=3)
    out.line()


def _gates(out: _Out, gates: list[dict]) -> None:
    """The CI thresholds given, tripped ones first."""
    if not gates:
        return
    out.line("Gates", "bold")
    for g in sorted(gates, key=lambda g: not g["tripped"]):
        mark = out.style("TRIPPED", "red", "bold") if g["tripped"] else out.style("passed ", "green")
        out.lines.append(f"  {mark} " + fit(clean_text(g["message"]), out.width - 10))
    out.line()


def _top_ops(out: _Out, data: dict) -> None:
    measured = data["measured"]
    key = "measured_s_per_step" if measured else "predicted_s_per_step"
    ops = sorted((o for o in data["ops"] if o["in_step"]), key=lambda o: -(o[key] or 0.0))
    out.line(f"Top ops by {'measured' if measured else 'predicted'} time per step", "bold")
    if not ops:
        out.line("  No op ran inside the measured steps.")
        return
    header = ["time/step", "% step", "efficiency" if measured else "FLOPs", "bound", "category"]
    widths = [10, 7, 10, 8, 18]
    shown = len(widths)  # a narrow terminal drops the last columns first, keeping op names readable
    while shown > 3 and out.width - 2 - sum(widths[:shown]) - 2 * shown < 24:
        shown -= 1
    widths = widths[:shown]
    name_w = out.width - 2 - sum(widths) - 2 * len(widths)
    out.line("  " + out.row(["op", *header[:shown]], [name_w, *widths], "lrrrll"), "dim")
    step = data["step_s"] or 0.0
    for o in ops[:N_OPS]:
        share = o["share_of_step"] if measured else ((o[key] or 0.0) / step if step > 0 else None)
        third = format_ratio(o["efficiency"]) if measured else format_si(o["flops"], "")
        cells = [clean_text(o["name"]), format_seconds(o[key]), format_percent(share), third,
                 clean_text(o["bound_by"]) or "n/a", clean_text(category_name(o["category"], on_cpu(data))) or "—"]
        out.line("  " + out.row(cells[:shown + 1], [name_w, *widths], "lrrrll"))
    if len(ops) > N_OPS:
        out.line(f"  … {len(ops) - N_OPS} more ops (--format json or html lists them all)", "dim")


def _scopes(out: _Out, data: dict) -> None:
    """The heaviest scopes of the ops' name paths (JAX wrappers stripped), indented by depth."""
    measured = data["measured"]
    shown = scopes_out.top_scopes(data.get("scopes") or [], measured, N_OPS)
    if not shown:
        return
    key, step = scopes_out.time_key(measured), data["step_s"] or 0.0
    out.line()
    out.line(f"Where in the model (scopes by {'measured' if measured else 'predicted'} time per step)", "bold")
    widths = [10, 7, 6]
    name_w = out.width - 2 - sum(widths) - 2 * len(widths)
    out.line("  " + out.row(["scope", "time/step", "% step", "ops"], [name_w, *widths], "lrrr"), "dim")
    for name, s in shown:
        share = format_percent(s[key] / step if step > 0 else None)
        cells = [clean_text(name), format_seconds(s[key]), share, str(s["total_ops"])]
        out.line("  " + out.row(cells, [name_w, *widths], "lrrr"))
    if scopes_out.unnamed_note(data):
        out.line(f"  ({scopes_out.unnamed_note(data)})", "dim")


def render_text(report, *, color: bool = False, width: int | None = None) -> str:
    """The terminal report; ``width`` None: :func:`terminal_width`."""
    data = report_to_dict(report)
    out = _Out(color, max(MIN_WIDTH, min(MAX_WIDTH, width)) if width else terminal_width())
    title = data["run"]["name"] or data["chip"]["name"]
    out.line(f"xladiag · {clean_text(title)}", "bold")
    out.wrap(clean_text(data["headline"]))
    if data["run"].get("note"):
        out.wrap(clean_text(data["run"]["note"]), indent="  ", first="· ")
    if data.get("capture_scope"):
        out.wrap(clean_text(data["capture_scope"]), indent="  ", first="! ")
    for w in data["warnings"][:10]:
        out.wrap(clean_text(w), indent="  ", first="! ", max_lines=3)
    if len(data["warnings"]) > 10:
        out.line(f"! … {len(data['warnings']) - 10} more warnings in the JSON report")
    out.line()
    _verdict(out, data)
    _fixes(out, data)
    _left_out(out, data.get("selection"))
    _gates(out, data.get("gates") or [])
    _top_ops(out, data)
    _scopes(out, data)
    text_section(out, data.get("memory_at_peak"), clean_text)
    _glossary(out)
    return "\n".join(out.lines) + "\n"


def _glossary(out: _Out) -> None:
    """A line for each term the report uses that a reader may not know (report/glossary.py)."""
    terms = used_terms(_SGR_RE.sub("", "\n".join(out.lines)))
    if not terms:
        return
    out.line()
    out.line("Glossary", "bold")
    for term, meaning in terms:
        out.wrap(f"{term}: {meaning}", indent="    ", first="  ")


def guard_keeping_sgr(text: str) -> str:
    """Every control character written visibly except newlines, tabs and the SGR colour codes themselves
    (profile text was made visible before it was coloured, so no SGR here came from the capture)."""
    pieces = _SGR_RE.split(text)
    codes = _SGR_RE.findall(text) + [""]
    return "".join(visible_controls(p, keep="\n\t") + c for p, c in zip(pieces, codes))

"""The HTML report: one self-contained file (inline CSS, SVG and a small script; no URLs).

The numbers come from :func:`.json_out.report_to_dict` (the same as the JSON and Markdown
reports); this module only formats them and draws the pictures (:mod:`.svg`). Everything that
comes from the profile goes through Jinja autoescaping or the escaping in :mod:`.svg`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import jinja2
import jinja2.bccache
from markupsafe import Markup

from ..units import finite_or_none as _num
from ..units import format_number, format_percent, format_ratio, format_seconds, format_si
from . import svg, svg_memory
from .chart_data import representative_step_events, roofline_points
from .detail_labels import detail_rows
from .glossary import explain, term_in, used_terms
from .html_summary import SRC_MEASURED, SRC_PREDICTED, capture_rows, host_rows, summary_cards
from .json_out import report_to_dict
from .model import category_name, on_cpu, overlap_counted
from .svg import short_source
from .svg_icicle import icicle_chart
from .trace_links import occurrence_label

MAX_HTML_OPS = 1000  # rows in the ops table; the JSON report keeps them all
MAX_HLO_CHARS = 4000  # per op in the <details>: a fusion's text can be huge
MAX_EVIDENCE_BARS = 12

_TEMPLATE_PACKAGE = __package__.rsplit(".", 1)[0] + ".templates"

SRC_FLOPS = {"trace": "trace metadata", "hlo": "HLO dump"}


def _load_template(name: str) -> str:
    return resources.files(_TEMPLATE_PACKAGE).joinpath(name).read_text(encoding="utf-8")


class _QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs, so a report does not compile its template every time (50 to 80 ms
    of a run). Jinja keeps them in a folder of this user's under the system temp dir, made 0700 and checked
    before use; an entry is used only while its template's source is unchanged, and written whole or not at
    all. A cache that cannot be read or written is no cache, never an error."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 (a damaged entry: compile the template again)
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except Exception:  # noqa: BLE001 (full disk, no permission: the next run compiles again)
            pass


def bytecode_cache(directory: str | None = None) -> jinja2.BytecodeCache | None:
    """The compiled-template cache in ``directory`` (default: Jinja's per-user folder); None where there is none."""
    try:
        return _QuietBytecodeCache(directory)
    except (OSError, RuntimeError):  # no temp dir, or one another user owns (Jinja refuses it)
        return None


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment per process: its templates compiled once (a second report renders with them)."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        autoescape=True,  # every {{ }} is escaped: op names and HLO text come from the profile
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=bytecode_cache(),
    )
    env.filters["seconds"] = format_seconds
    env.filters["percent"] = format_percent
    return env


def _sort_key(value) -> str:
    v = _num(value)
    return "" if v is None else repr(v)


# ------------------------------------------------------------------ pictures


def _evidence_chart(finding, index: int) -> Markup | None:
    """Measured against predicted, one bar pair per op; no chart when no op has both (the table says it all)."""
    rows = [(op.name, op.measured_s_per_step, op.predicted_s_per_step) for op in finding.ops[:MAX_EVIDENCE_BARS]]
    if not any((_num(m) or 0) > 0 and (_num(p) or 0) > 0 for _, m, p in rows):
        return None
    return Markup(svg.bar_chart(rows, element_id=f"evidence-{index}"))


# ------------------------------------------------------------------ tables


def _counted_text(f: dict) -> str:
    """'' or how much of the saving counts in the total, when other findings overlap it."""
    counted = overlap_counted(f)
    return "" if counted is None else (f"alone; {format_seconds(counted)} of it counts in the total, the rest "
                                       "overlaps a finding above")


def _finding_view(f: dict, finding, index: int, measured: bool, step_s: float | None) -> dict:
    """One finding as the template shows it; ``step_s`` (None when unknown or 0) for the saving's share."""
    return {
        "rank": index,
        "rule": f["rule"],
        "severity": f["severity"],
        "title": f["title"],
        "saves": format_seconds(f["est_savings_s_per_step"]),
        "saves_share": format_percent((f["est_savings_s_per_step"] or 0.0) / step_s) if step_s else "n/a",
        "counted": _counted_text(f),
        "counted_explain": explain("counted"),
        "cost": format_seconds(f["time_s_per_step"]),
        "cost_share": format_percent(f["fraction_of_step"]),
        "confidence": f["confidence"],
        "evidence": f["evidence"],
        # the terms its words use that a reader may not know, as the evidence's tooltip (report/glossary.py)
        "terms": "\n".join(f"{t}: {m}" for t, m in used_terms(f"{f['title']} {f['evidence']} {f['fix']}")),
        "fix": f["fix"],
        "ops": [
            {
                "name": op["name"],
                "measured": format_seconds(op["measured_s_per_step"]) if measured else "—",
                "predicted": format_seconds(op["predicted_s_per_step"]),
                "detail": op["detail"],
                "trace": occurrence_label(op["occurrence"]),
                "trace_ps": (f"{op['occurrence']['start_ps']} to {op['occurrence']['end_ps']} ps on the capture's clock"
                             if op["occurrence"] else ""),
            }
            for op in f["ops"]
        ],
        "chart": _evidence_chart(finding, index) if measured else None,
        "details": detail_rows(f["rule"], f["details"]),
    }


def _src(source) -> str:
    return SRC_FLOPS.get(str(source), "unknown") if source else "unknown"


def _costs_src(op: dict) -> str:
    """Where an op's FLOPs and bytes came from: 'HLO dump', 'trace metadata', or both when they differ."""
    srcs = [_src(op[k + "_source"]) for k in ("flops", "bytes") if op[k] is not None]
    return " / ".join(dict.fromkeys(srcs))


def _op_rows(ops: list[dict], measured: bool, cpu: bool = False) -> list[SimpleNamespace]:
    """The ops table's rows, formatted. Attributes, not dict keys: Jinja looks ``r.name`` up as an attribute
    first, and a dict's failed lookup costs an exception per cell (30,000 cells: half the page's rendering)."""
    per_step_key = "measured_s_per_step" if measured else "predicted_s_per_step"
    rows = []
    for op in ops:
        hlo = op["hlo_text"] or ""
        rows.append(SimpleNamespace(**{
            "name": op["name"] or "",
            "module": op["module"] or "",
            "in_step": op["in_step"],
            "category": category_name(op["category"], cpu),
            "bound_by": op["bound_by"] or "unknown",
            "time_class": op["time_class"] or "other",
            "occ": "—" if _num(op["occurrences_per_step"]) is None else format_number(op["occurrences_per_step"]),
            "occ_v": _sort_key(op["occurrences_per_step"]),
            # The '<time_word> / step' column: the prediction when nothing was measured.
            "per_step": format_seconds(op[per_step_key]) if op["in_step"] else "—",
            "per_step_v": _sort_key(op[per_step_key]),
            "share": format_percent(op["share_of_step"]) if measured and op["in_step"] else "",
            "mean": format_seconds(op["mean_s"]),  # shown only when measured
            "mean_v": _sort_key(op["mean_s"]),
            "predicted": format_seconds(op["predicted_s"]),
            "predicted_v": _sort_key(op["predicted_s"]),
            "model": op.get("collective_model") or "",  # how a collective was priced (topology, axes, links)
            "efficiency": format_ratio(op["efficiency"]),
            "efficiency_v": _sort_key(op["efficiency"]),
            "flops": format_si(op["flops"], "FLOP") if op["flops"] is not None else "—",
            "flops_v": _sort_key(op["flops"]),
            "costs_src": _costs_src(op),
            "bytes": format_si(op["bytes"], "B") if op["bytes"] is not None else "—",
            "bytes_v": _sort_key(op["bytes"]),
            "intensity": (format_si(op["arithmetic_intensity"], "")
                          if op["arithmetic_intensity"] is not None else "—"),
            "intensity_v": _sort_key(op["arithmetic_intensity"]),
            "source": op["source"] or "",
            "source_short": _tail(op["source"] or "", 1),
            "hlo": (hlo if len(hlo) <= MAX_HLO_CHARS
                    else hlo[:MAX_HLO_CHARS] + f" … ({len(hlo) - MAX_HLO_CHARS:,} more characters)"),
            "tf_op": op["tf_op"] or "",
        }))
    return rows


def _tail(path: str, parts: int) -> str:
    """'/a/b/c/model.py:12' -> 'c/model.py:12' (the full path stays in the cell's title)."""
    pieces = path.replace("\\", "/").split("/")
    return "/".join(pieces[-parts:]) if len(pieces) > parts else path


# ------------------------------------------------------------------ entry


def report_context(report) -> dict:
    """Everything the template reads, already formatted (the template does layout only)."""
    a = report.analysis
    data = report_to_dict(report)
    measured = data["measured"]
    time_word = SRC_MEASURED if measured else SRC_PREDICTED
    share_of = data["step_s"] if data["step_s"] and data["step_s"] > 0 else None
    views = [_finding_view(fd, finding, i, measured, share_of)
             for i, (fd, finding) in enumerate(zip(data["findings"], report.findings), 1)]
    findings = [v for v in views if v["severity"] != "info"]
    notes = [v for v in views if v["severity"] == "info"]
    breakdown = {k: v or 0.0 for k, v in data["breakdown"].items()}
    roofline_svg, roofline_note = _roofline_svg(a, data["chip"], measured)
    events, lanes, span_s, timeline_note = representative_step_events(a)
    timeline_svg = (svg.timeline_parts(events, lanes, span_s=span_s, caption="from step start", width=1100)
                    if lanes else [])  # our own escaped SVG, in pieces: the template writes them one by one

    all_ops = data["ops"]
    rows = _op_rows(all_ops[:MAX_HTML_OPS], measured, on_cpu(data))
    return {
        "title": page_title(data),
        "data": data,
        "headline": data["headline"],
        "capture_scope": data["capture_scope"],
        "measured": measured,
        "time_word": time_word,
        "cards": [dict(card, explain=term_in(card["label"])) for card in summary_cards(data, time_word)],
        "breakdown_svg": Markup(svg.breakdown_bar(breakdown, width=1100)),
        "breakdown_rows": _breakdown_rows(breakdown),
        "breakdown_source": (
            "measured: each op's time per step by what its roofline says it is bound by; idle = gaps between ops"
            if measured else "predicted: per-op roofline times, nothing measured"
        ),
        "findings": findings,
        "notes": notes,
        "capture_rows": capture_rows(data, a),
        "hosts": host_rows(data.get("host_steps")),
        "memory": svg_memory.html_view(data.get("memory_at_peak"), Markup),
        "left_out": {"findings": data["selection"]["ignored_findings"],
                     "rules": [(r["rule"], r["why"]) for r in data["selection"]["rules_left_out"]]},
        "roofline_svg": Markup(roofline_svg),
        "roofline_note": roofline_note,
        "timeline_svg": timeline_svg,
        "timeline_note": timeline_note,
        "scopes_svg": Markup(icicle_chart(data["scopes"], measured=measured, step_s=share_of)),
        "op_rows": rows,
        "ops_total": len(all_ops),
        "ops_truncated": max(len(all_ops) - MAX_HTML_OPS, 0),
        "bound_kinds": sorted({r.bound_by for r in rows}),
        "warnings": data["warnings"],
        "version": data["tool"]["version"],
        # Our own files, inserted verbatim (not rendered as templates: CSS braces are not Jinja).
        "css": Markup(_load_template("report.css")),
        "js": Markup(_load_template("report.js")),
    }


def _breakdown_rows(breakdown: dict) -> list[dict]:
    """The breakdown bar's legend as a table: seconds and share of each class."""
    total = sum(breakdown.values())
    return [
        {"key": k, "label": svg.CLASS_LABELS.get(k, k), "seconds": format_seconds(breakdown.get(k, 0.0)),
         "share": format_percent(breakdown.get(k, 0.0) / total) if total > 0 else "n/a",
         "colour": svg.CLASS_COLOURS.get(k, "#999")}
        for k in svg.CLASS_ORDER
    ]


def _roofline_svg(analysis, chip: dict, measured: bool) -> tuple[str, str]:
    """The roofline chart under the chip's roofs, and the note on what it leaves out."""
    points, roofline_note = roofline_points(analysis)
    return svg.roofline_chart(
        points,
        svg.Roof(chip["peak_flops_per_s"] or float("nan"), chip["hbm_bytes_per_s"] or float("nan"),
                 peak_label=short_source(chip["source"]["peak_flops_per_s"]),
                 hbm_label=short_source(chip["source"]["hbm_bytes_per_s"])),
        achieved_label="measured" if measured else "predicted",
        note=roofline_note,
    ), roofline_note


def page_title(data: dict) -> str:
    """'xladiag: <program> @ <logdir>': what a browser tab or a bookmark needs to tell two reports apart."""
    choice = (data.get("choices") or {}).get("program") or {}
    program = (data["steps"].get("program") or choice.get("value")
               or next((op["module"] for op in data["ops"] if op.get("module")), None)
               or _hlo_title(data) or data["chip"]["name"])
    run_dir = data["run"]["dir"] or ""
    where = run_dir.replace("\\", "/").split("/plugins/profile/", 1)[0] if run_dir else ""
    if not where and data["run"]["hlo_files"]:
        where = str(Path(data["run"]["hlo_files"][0]).parent)
    return f"xladiag: {program}" + (f" @ {where}" if where else "")


def _hlo_title(data: dict) -> str:
    """An HLO-only report is named after its dump file(s)."""
    files = [Path(p).name for p in data["run"]["hlo_files"]]
    return files[0] + (f" (+{len(files) - 1} more)" if len(files) > 1 else "") if files else ""


def html_pieces(report) -> Iterator[str]:
    """The page in the pieces the template makes, as they are made (a file written as they come never holds
    the page whole: render.render_pieces)."""
    return _environment().get_template("report.html.j2").generate(**report_context(report))


def render_html(report) -> str:
    return "".join(html_pieces(report))

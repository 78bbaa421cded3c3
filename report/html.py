"""The HTML report: one self-contained file (inline CSS, SVG and a small script; no URLs).

The numbers come from :func:`.json_out.report_to_dict` (the same as the JSON and Markdown
reports); this module only formats them and draws the pictures (:mod:`.svg`). Everything that
comes from the profile goes through Jinja autoescaping or the escaping in :mod:`.svg`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup

from ..units import finite_or_none as _num
from ..units import count, format_bytes, format_percent, format_ratio, format_seconds, format_si
from . import svg
from .chart_data import representative_step_events, roofline_points
from .choices import choice_rows
from .json_out import report_to_dict
from .svg import short_source
from .trace_links import occurrence_label

MAX_HTML_OPS = 1000  # rows in the ops table; the JSON report keeps them all
MAX_HLO_CHARS = 4000  # per op in the <details>: a fusion's text can be huge
MAX_EVIDENCE_BARS = 12

_TEMPLATE_PACKAGE = __package__.rsplit(".", 1)[0] + ".templates"

# How each number's origin is written in the report (one legend, used everywhere).
SRC_MEASURED = "measured"
SRC_PREDICTED = "predicted"
SRC_FLOPS = {"trace": "trace metadata", "hlo": "HLO dump"}


def _load_template(name: str) -> str:
    return resources.files(_TEMPLATE_PACKAGE).joinpath(name).read_text(encoding="utf-8")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        autoescape=True,  # every {{ }} is escaped: op names and HLO text come from the profile
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["seconds"] = format_seconds
    env.filters["percent"] = format_percent
    return env


def _sort_key(value) -> str:
    v = _num(value)
    return "" if v is None else repr(v)


# ------------------------------------------------------------------ pictures


def _evidence_chart(finding, index: int) -> Markup | None:
    rows = [(op.name, op.measured_s_per_step, op.predicted_s_per_step) for op in finding.ops[:MAX_EVIDENCE_BARS]]
    if not rows or not any(_num(m) for _, m, _ in rows):
        return None
    return Markup(svg.bar_chart(rows, element_id=f"evidence-{index}"))


# ------------------------------------------------------------------ tables


def _detail_text(key: str, value) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)):
        words = key.split("_")
        if key.endswith("_per_s"):  # a rate, before the '_s' test below
            return format_si(value, "B/s" if "bytes" in words else "/s")
        if key.endswith("_s") or key.endswith("_s_per_step") or key == "s_per_step":
            return format_seconds(value)
        if "bytes" in words:  # 'bytes', 'hbm_bytes', 'bytes_per_step': 3.22e10 reads '32.2 GB'
            return format_bytes(value)
        if key.startswith("fraction") or key.endswith("_fraction") or key.endswith("_share"):
            return format_percent(value)
        return f"{value:.4g}" if isinstance(value, float) else str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_detail_text(key, v) for v in value[:20]) + (" …" if len(value) > 20 else "")
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_detail_text(str(k), v)}" for k, v in list(value.items())[:20])
    return str(value)


def _finding_view(f: dict, finding, index: int, measured: bool, step_s: float | None) -> dict:
    """One finding as the template shows it; ``step_s`` (None when unknown or 0) for the saving's share."""
    return {
        "rank": index,
        "rule": f["rule"],
        "severity": f["severity"],
        "title": f["title"],
        "saves": format_seconds(f["est_savings_s_per_step"]),
        "saves_share": format_percent((f["est_savings_s_per_step"] or 0.0) / step_s) if step_s else "n/a",
        "cost": format_seconds(f["time_s_per_step"]),
        "cost_share": format_percent(f["fraction_of_step"]),
        "confidence": f["confidence"],
        "evidence": f["evidence"],
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
        "details": [(k, _detail_text(k, v)) for k, v in f["details"].items()],
    }


def _src(source) -> str:
    return SRC_FLOPS.get(str(source), "unknown") if source else "unknown"


def _costs_src(op: dict) -> str:
    """Where an op's FLOPs and bytes came from: 'HLO dump', 'trace metadata', or both when they differ."""
    srcs = [_src(op[k + "_source"]) for k in ("flops", "bytes") if op[k] is not None]
    return " / ".join(dict.fromkeys(srcs))


def _op_rows(ops: list[dict], measured: bool) -> list[dict]:
    per_step_key = "measured_s_per_step" if measured else "predicted_s_per_step"
    rows = []
    for op in ops:
        hlo = op["hlo_text"] or ""
        rows.append(
            {
                "name": op["name"] or "",
                "module": op["module"] or "",
                "in_step": op["in_step"],
                "category": op["category"] or "",
                "bound_by": op["bound_by"] or "unknown",
                "time_class": op["time_class"] or "other",
                "occ": f"{op['occurrences_per_step']:.3g}" if _num(op["occurrences_per_step"]) is not None else "—",
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
                "intensity": format_si(op["arithmetic_intensity"], "") if op["arithmetic_intensity"] is not None else "—",
                "intensity_v": _sort_key(op["arithmetic_intensity"]),
                "source": op["source"] or "",
                "source_short": _tail(op["source"] or "", 1),
                "hlo": hlo if len(hlo) <= MAX_HLO_CHARS else hlo[:MAX_HLO_CHARS] + f" … ({len(hlo) - MAX_HLO_CHARS:,} more characters)",
                "tf_op": op["tf_op"] or "",
            }
        )
    return rows


def _tail(path: str, parts: int) -> str:
    """'/a/b/c/model.py:12' -> 'c/model.py:12' (the full path stays in the cell's title)."""
    pieces = path.replace("\\", "/").split("/")
    return "/".join(pieces[-parts:]) if len(pieces) > parts else path


def _capture_rows(data: dict, analysis) -> list[tuple[str, str, str]]:
    """(what, value, where it came from) for the capture summary."""
    chip, steps, run = data["chip"], data["steps"], data["run"]
    src = chip["source"]
    rows = [
        ("Chip", chip["name"], chip["detected_as"]),
        ("Peak compute", format_si(chip["peak_flops_per_s"], "FLOP/s") + " (bf16)", src["peak_flops_per_s"]),
        ("HBM bandwidth", format_si(chip["hbm_bytes_per_s"], "B/s"), src["hbm_bytes_per_s"]),
        ("Ridge point", format_si(chip["ridge_flops_per_byte"], "FLOP/B"), "peak ÷ HBM bandwidth"),
    ]
    for key, label, unit in (("ici_link_bytes_per_s_oneway", "Interconnect link (one way)", "B/s"),
                             ("pcie_bytes_per_s", "Host link (PCIe)", "B/s"),
                             ("per_hop_latency_s", "Collective per-hop latency", "s")):
        if chip["other_numbers"].get(key) is not None:
            value = chip["other_numbers"][key]
            rows.append((label, format_seconds(value) if unit == "s" else format_si(value, unit), src.get(key, "")))
    types = sorted({str(d.get("device_type") or "") for d in data["device_list"]} - {""})
    rows += [
        ("Platform", data["platform"] + ("" if data["measured"] else " (HLO dump only: nothing measured)"), ""),
        ("Devices", f"{data['devices']}" + (f" × {', '.join(types)}" if types else ""), "trace" if data["measured"] else ""),
        ("Hosts", ", ".join(data["hosts"]) or "—", "trace" if data["measured"] else ""),
        ("Run", run["name"] or "—", str(run["dir"] or "")),
    ]
    if run["other_runs"]:
        rows.append(("Other runs present", ", ".join(run["other_runs"]), "pick one with --run NAME"))
    rows += choice_rows(data.get("choices") or {})
    if data["measured"]:
        warm = "first execution excluded as warm-up" if steps["warmup_excluded"] else "no warm-up excluded"
        rows += [
            ("Steps", f"{steps['count']} measured ({warm})", steps["source"]),
            ("Mean step time", f"{format_seconds(steps['mean_s'])} (min {format_seconds(steps['min_s'])}, "
                               f"max {format_seconds(steps['max_s'])})", SRC_MEASURED),
            ("Busy / idle per step", f"{format_seconds(steps['busy_s'])} / {format_seconds(steps['idle_s'])}",
             SRC_MEASURED + " (union of op intervals; idle = the gaps)"),
        ]
    else:
        rows.append(("Step time", format_seconds(data["step_s"]) + " (sum of per-op predictions)", SRC_PREDICTED))
    if data["model_flops_per_step"]:
        rows.append(("Model FLOPs per step", format_si(data["model_flops_per_step"], "FLOP"), "trace metadata / HLO dump, per device"))
    rows.append(("Trace files", ", ".join(Path(p).name for p in run["xplane_files"]) or "—", ""))
    rows.append(("HLO dump files", ", ".join(Path(p).name for p in run["hlo_files"]) or "—", ""))
    return rows


# ------------------------------------------------------------------ entry


def _host_rows(host_steps: dict | None) -> dict | None:
    """The hosts section (two hosts or more): per host, slowest first, and the slowest host's lag."""
    if not host_steps or len(host_steps["hosts"]) < 2:
        return None
    rows = [{"host": h["host"], "devices": h["devices"], "step": format_seconds(h["step_s"]),
             "busy": format_seconds(h["busy_s"]), "idle": format_seconds(h["idle_s"]),
             "lag": format_seconds(h["lag_s"]), "slowest": h["host"] == host_steps["slowest_host"]}
            for h in host_steps["hosts"]]
    return {"rows": rows, "slowest": host_steps["slowest_host"], "lag": format_seconds(host_steps["lag_s"]),
            "share": format_percent(host_steps["lag_fraction"]), "median": format_seconds(host_steps["median_step_s"])}


def report_context(report) -> dict:
    """Everything the template reads, already formatted (the template does layout only)."""
    a = report.analysis
    data = report_to_dict(report)
    measured = data["measured"]
    step_s = data["step_s"]
    time_word = SRC_MEASURED if measured else SRC_PREDICTED
    ideal_known = data["ideal_step_s"] is not None  # None: no op has a prediction (not 'an ideal of 0 s')

    cards = [
        {"label": "Step time", "value": format_seconds(step_s), "source": time_word,
         "sub": (f"mean of {count(data['steps']['count'], 'step')} per device" if measured else "sum of per-op roofline predictions")},
        {"label": "MFU", "value": format_percent(data["mfu"]) if data["mfu"] is not None else "n/a",
         "source": "model FLOPs (trace metadata / HLO dump) ÷ (step × chip peak)",
         "sub": f"peak {format_si(data['chip']['peak_flops_per_s'], 'FLOP/s')}"},
        {"label": "Roofline ideal step", "value": format_seconds(data["ideal_step_s"]) if ideal_known else "n/a",
         "source": SRC_PREDICTED,
         "sub": "every op at its roofline" if ideal_known else "no op has FLOPs or bytes: pass --hlo-dir"},
    ]
    if measured and data["steps"]["idle_s"] is not None:
        cards.append({"label": "Idle per step", "value": format_seconds(data["steps"]["idle_s"]), "source": SRC_MEASURED,
                      "sub": f"{format_percent(data['steps']['idle_s'] / step_s) if step_s else 'n/a'} of the step"})
    rec = data["recoverable"]
    cards.append({"label": "Recoverable per step", "value": format_seconds(rec["s_per_step"]),
                  "source": "sum of the findings' savings, each op counted by one finding",
                  "sub": f"{format_percent(rec['fraction_of_step'])} of the step"
                  if rec["fraction_of_step"] is not None else "per step"})
    if data["findings"]:
        top = data["findings"][0]
        cards.append({"label": "Biggest fix saves", "value": format_seconds(top["est_savings_s_per_step"]),
                      "source": "estimated by rule " + top["rule"],
                      "sub": f"per step, by {top['lever']}" if top["lever"] else "per step"})

    share_of = step_s if step_s and step_s > 0 else None
    findings = [_finding_view(fd, finding, i, measured, share_of)
                for i, (fd, finding) in enumerate(zip(data["findings"], report.findings), 1)]

    breakdown = {k: v or 0.0 for k, v in data["breakdown"].items()}
    total = sum(breakdown.values())
    breakdown_rows = [
        {"key": k, "label": svg.CLASS_LABELS.get(k, k), "seconds": format_seconds(breakdown.get(k, 0.0)),
         "share": format_percent(breakdown.get(k, 0.0) / total) if total > 0 else "n/a", "colour": svg.CLASS_COLOURS.get(k, "#999")}
        for k in svg.CLASS_ORDER
    ]

    points, roofline_note = roofline_points(a)
    chip = data["chip"]
    roofline_svg = svg.roofline_chart(
        points,
        svg.Roof(chip["peak_flops_per_s"] or float("nan"), chip["hbm_bytes_per_s"] or float("nan"),
                 peak_label=short_source(chip["source"]["peak_flops_per_s"]),
                 hbm_label=short_source(chip["source"]["hbm_bytes_per_s"])),
        achieved_label="measured" if measured else "predicted",
        note=roofline_note,
    )
    events, lanes, span_s, timeline_note = representative_step_events(a)
    timeline_svg = svg.timeline_chart(events, lanes, span_s=span_s, caption="from step start", width=1100) if lanes else ""

    all_ops = data["ops"]
    rows = _op_rows(all_ops[:MAX_HTML_OPS], measured)
    return {
        "title": "xladiag report: " + (data["run"]["name"] or _hlo_title(data) or chip["name"]),
        "data": data,
        "headline": data["headline"],
        "capture_scope": data["capture_scope"],
        "measured": measured,
        "time_word": time_word,
        "cards": cards,
        "breakdown_svg": Markup(svg.breakdown_bar(breakdown, width=1100)),
        "breakdown_rows": breakdown_rows,
        "breakdown_source": (
            "measured: each op's time per step by what its roofline says it is bound by; idle = gaps between ops"
            if measured else "predicted: per-op roofline times, nothing measured"
        ),
        "findings": findings,
        "capture_rows": _capture_rows(data, a),
        "hosts": _host_rows(data.get("host_steps")),
        "left_out": {"findings": data["selection"]["ignored_findings"],
                     "rules": [(r["rule"], r["why"]) for r in data["selection"]["rules_left_out"]]},
        "roofline_svg": Markup(roofline_svg),
        "roofline_note": roofline_note,
        "timeline_svg": Markup(timeline_svg),
        "timeline_note": timeline_note,
        "op_rows": rows,
        "ops_total": len(all_ops),
        "ops_truncated": max(len(all_ops) - MAX_HTML_OPS, 0),
        "bound_kinds": sorted({r["bound_by"] for r in rows}),
        "warnings": data["warnings"],
        "version": data["tool"]["version"],
        # Our own files, inserted verbatim (not rendered as templates: CSS braces are not Jinja).
        "css": Markup(_load_template("report.css")),
        "js": Markup(_load_template("report.js")),
    }


def _hlo_title(data: dict) -> str:
    """An HLO-only report is named after its dump file(s)."""
    files = [Path(p).name for p in data["run"]["hlo_files"]]
    return files[0] + (f" (+{len(files) - 1} more)" if len(files) > 1 else "") if files else ""


def render_html(report) -> str:
    return _environment().get_template("report.html.j2").render(**report_context(report))

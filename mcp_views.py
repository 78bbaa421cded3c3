"""What each tool of ``diagnose mcp`` answers, as plain data cut from the JSON report (``Report.to_dict()``) and
the comparison JSON, so that an agent reads the very numbers ``diagnose --format json`` writes. Lists are capped
and say how to page: an agent's context is small, a report's op table is not.

No MCP here (mcp_server.py serves these); no analysis either.
"""

from __future__ import annotations

import difflib

from .errors import UsageError

TOP_OPS = 10  # ops in the diagnose answer
MAX_FINDINGS = 25  # findings listed by the diagnose answer (each whole through `finding`)
MAX_PAGE = 100  # ops per page of `ops`
MAX_WARNINGS = 10
MAX_CHANGES = 10  # op changes in the compare answer
MAX_FINDING_CHANGES = 20
HLO_TEXT_CHARS = 4000  # an op's HLO text beyond this is cut (the JSON report has it whole)

# The report's top-level numbers an agent judges the step by.
VERDICT_KEYS = ("platform", "measured", "time_source", "devices", "step_s", "mfu", "unknown_flops_share",
                "model_flops_per_step", "ideal_step_s", "breakdown", "recoverable")
STEP_KEYS = ("count", "mean_s", "min_s", "max_s", "source", "program", "warmup_excluded")
FINDING_ROW = ("key", "rule", "severity", "title", "est_savings_s_per_step", "counted_s_per_step",
               "fraction_of_step", "confidence", "lever", "benefit")
OP_ROW = ("name", "module", "program_id", "category", "bound_by", "occurrences_per_step", "measured_s_per_step",
          "predicted_s_per_step", "share_of_step", "efficiency")
OP_CHANGE_ROW = ("status", "name", "module", "base_s_per_step", "new_s_per_step", "delta_s_per_step", "ratio",
                 "delta_share_of_step")
FINDING_CHANGE_ROW = ("status", "key", "title", "base_severity", "new_severity", "base_s_per_step", "new_s_per_step",
                      "delta_s_per_step", "base_savings_s_per_step", "new_savings_s_per_step")


def _pick(row: dict, keys) -> dict:
    return {k: row.get(k) for k in keys}


def _capped(items: list, cap: int, name: str, how: str) -> dict:
    """``{name: first cap items}`` plus, when some were left out, ``{name}_total`` and how to see them."""
    out = {name: items[:cap]}
    if len(items) > cap:
        out[f"{name}_total"] = len(items)
        out[f"{name}_more"] = how
    return out


def _time_column(data: dict) -> str:
    """What ranks the ops: measured time per step, or without a trace the roofline's prediction."""
    return "measured_s_per_step" if data["measured"] else "predicted_s_per_step"


def _by_time(data: dict, rows: list) -> list:
    return sorted(rows, key=_sort_key(_time_column(data), True))


def summary(report_id: str, data: dict) -> dict:
    """The ``diagnose`` answer: headline, verdict numbers, findings (key and saving), the top ops."""
    verdict = {k: data.get(k) for k in VERDICT_KEYS}
    verdict["chip"] = data["chip"]["name"]
    verdict["steps"] = _pick(data["steps"], STEP_KEYS) if data.get("steps") else None
    findings = [{**_pick(f, FINDING_ROW), "ops": len(f["ops"])} for f in data["findings"]]
    ignored = data["selection"]["ignored_findings"]
    return {
        "report": report_id,
        "headline": data["headline"],
        "verdict": verdict,
        "capture_scope": data.get("capture_scope"),
        **_capped(findings, MAX_FINDINGS, "findings", "the JSON report (diagnose --format json) lists them all"),
        "findings_left_out": len(ignored),
        "top_ops": [_pick(o, OP_ROW) for o in _by_time(data, data["ops"])[:TOP_OPS]],
        "ops_total": len(data["ops"]),
        **_capped(list(data["warnings"]), MAX_WARNINGS, "warnings", "the JSON report lists them all"),
        "next": (f"finding(report={report_id!r}, key=...) gives one finding whole; ops(report={report_id!r}, "
                 "category=, bound_by=, rule=, sort=, limit=, offset=) pages the op table; op(report=..., name=...) "
                 "one op with its HLO; section(field=...) any field of the JSON report (steps, chip, run, "
                 "selection...); explain_rule(rule=...) what a rule means"),
    }


def finding(report_id: str, data: dict, key: str) -> dict:
    """One finding whole, by its key (``rule:kind:main_op``); a rule id or key prefix that names one finding
    also does."""
    findings = data["findings"]
    chosen = [f for f in findings if f["key"] == key] or [f for f in findings if f["key"].startswith(key)]
    if len(chosen) != 1:
        keys = [f["key"] for f in findings]
        what = "names several findings" if chosen else "is no finding's key"
        raise UsageError(f"{key!r} {what} of report {report_id}; keys: {', '.join(keys[:30]) or 'none'}")
    return {"report": report_id, "finding": chosen[0]}


def _sort_key(column: str, descending: bool):
    def key(row: dict):
        value = row.get(column)
        if value is None:
            return (1, 0)  # missing last, either way
        if isinstance(value, (int, float)):
            return (0, -value if descending else value)
        return (0, str(value))
    return key


def ops_page(report_id: str, data: dict, filters: dict, claimed: dict[str, set] | None = None,
             sort: str | None = None, limit: int = 20, offset: int = 0) -> dict:
    """A page of the op table: filtered (``filters``: category, bound_by, program (module or program id), and
    rule: the ops that rule's findings count, ``claimed`` mapping rule ids to (module, program_id, name) keys),
    sorted by a column (numbers biggest first; '+column' smallest first; default: the time that ranks the ops),
    ``limit`` rows from ``offset``."""
    ops = data["ops"]
    category, bound_by, rule, program = (filters.get(k) for k in ("category", "bound_by", "rule", "program"))
    rows = [o for o in ops if (category is None or o["category"] == category)
            and (bound_by is None or o["bound_by"] == bound_by)
            and (program is None or program in (o["module"], o["program_id"]))]
    if rule is not None:
        ops_of_rule = (claimed or {}).get(rule, set())
        rows = [o for o in rows if (o["module"], o["program_id"], o["name"]) in ops_of_rule]
    if sort:
        column, descending = sort.lstrip("+-"), not sort.startswith("+")
        if ops and column not in ops[0]:
            raise UsageError(f"sort {sort!r}: no op column {column!r}; columns: {', '.join(ops[0])}")
        numeric = any(isinstance(o.get(column), (int, float)) and not isinstance(o.get(column), bool) for o in rows)
        rows = sorted(rows, key=_sort_key(column, descending and numeric))
    else:
        rows = _by_time(data, rows)
    limit, offset = max(1, min(int(limit), MAX_PAGE)), max(0, int(offset))
    page = rows[offset: offset + limit]
    after = offset + len(page)
    out = {"report": report_id, "total": len(rows), "offset": offset, "returned": len(page),
           "next_offset": after if after < len(rows) else None,
           "filters": {k: v for k, v in filters.items() if v is not None},
           "sort": sort or _time_column(data),
           "ops": [_pick(o, OP_ROW) for o in page]}
    if not rows:  # say what the filters could have been
        out["categories"] = sorted({o["category"] for o in ops if o["category"]})
        out["bound_by_values"] = sorted({o["bound_by"] for o in ops if o["bound_by"]})
        out["rules_with_ops"] = sorted(r for r, keys in (claimed or {}).items() if keys)
        out["programs"] = sorted({o["module"] for o in ops if o["module"]})
    return out


def op(report_id: str, data: dict, name: str, program: str | None = None,
       findings_of: dict[tuple, list] | None = None) -> dict:
    """One op whole (its JSON record, HLO text cut at HLO_TEXT_CHARS) and the keys of the findings that count
    it; several ops of that name (one per program) are listed for ``program`` to pick from."""
    matches = [o for o in data["ops"] if o["name"] == name
               and (program is None or program in (o["module"], o["program_id"]))]
    if not matches:
        close = difflib.get_close_matches(name, sorted({o["name"] for o in data["ops"]}), n=5)
        hint = f"; close: {', '.join(close)}" if close else ""
        where = f" in program {program!r}" if program else ""
        raise UsageError(f"no op named {name!r}{where} in report {report_id}{hint}")
    if len(matches) > 1:
        return {"report": report_id, "matches": [_pick(o, OP_ROW) for o in matches[:MAX_PAGE]],
                "next": "several programs hold an op of this name: give program= (module or program_id)"}
    record = dict(matches[0])
    text = record.get("hlo_text") or ""
    if len(text) > HLO_TEXT_CHARS:
        record["hlo_text"] = text[:HLO_TEXT_CHARS]
        record["hlo_text_chars"] = len(text)
    key = (record["module"], record["program_id"], record["name"])
    return {"report": report_id, "op": record, "findings": list((findings_of or {}).get(key, []))}


def comparison(data: dict) -> dict:
    """The ``compare`` answer, from the comparison JSON: headline, step change, the biggest op changes, the
    findings that changed."""
    changed_ops = [_pick(o, OP_CHANGE_ROW) for o in data["ops"] if o["status"] != "unchanged"]
    changed_findings = [_pick(f, FINDING_CHANGE_ROW) for f in data["findings"] if f["status"] != "unchanged"]
    full = "the comparison JSON (diagnose compare BASE NEW --format json) has every change"
    return {
        "headline": data["headline"],
        "measured": data["measured"],
        "step": data["step"],
        "mfu": data["mfu"],
        "regression": data["regression"],
        "ops_summary": data["ops_summary"],
        **_capped(changed_ops, MAX_CHANGES, "op_changes", full),
        "findings_summary": data["findings_summary"],
        **_capped(changed_findings, MAX_FINDING_CHANGES, "finding_changes", full),
        **_capped(list(data["warnings"]), MAX_WARNINGS, "warnings", full),
    }


def scopes_page(report_id: str, data: dict, under: str | None = None, depth: int | None = None,
                sort: str | None = None, limit: int = 20, offset: int = 0) -> dict:
    """A page of the report's ``scopes`` (time per framework name path, depth first, children heaviest first):
    the scope ``under`` and those below it (default: all), at most ``depth`` levels below it, in the report's
    order or sorted by a column as ``ops_page`` sorts."""
    if "scopes" not in data:
        raise UsageError(f"report {report_id} has no scopes (a report of an xladiag without them)")
    rows, base = data["scopes"], 0
    under = (under or "").strip("/")
    if under:
        known = {r["scope"] for r in rows}
        if under not in known:
            close = difflib.get_close_matches(under, sorted(known), n=5)
            hint = f"; close: {', '.join(close)}" if close else ""
            raise UsageError(f"no scope {under!r} in report {report_id}{hint}")
        rows = [r for r in rows if r["scope"] == under or r["scope"].startswith(under + "/")]
        base = next(r["depth"] for r in rows if r["scope"] == under)
    if depth is not None:
        rows = [r for r in rows if r["depth"] - base <= depth]
    if sort:
        column, descending = sort.lstrip("+-"), not sort.startswith("+")
        if rows and column not in rows[0]:
            raise UsageError(f"sort {sort!r}: no scope column {column!r}; columns: {', '.join(rows[0])}")
        rows = sorted(rows, key=_sort_key(column, descending))
    limit, offset = max(1, min(int(limit), MAX_PAGE)), max(0, int(offset))
    page, where = _page(rows, offset, limit)
    return {"report": report_id, **where, "sort": sort or "depth first, children heaviest first",
            "scopes": page}


def _page(items: list, offset: int, limit: int) -> tuple[list, dict]:
    page = items[offset: offset + limit]
    after = offset + len(page)
    return page, {"total": len(items), "offset": offset, "returned": len(page),
                  "next_offset": after if after < len(items) else None}


def section(report_id: str, data: dict, field: str, offset: int = 0, limit: int = 20) -> dict:
    """One top-level field of the JSON report as written (docs/json_schema.md): a list a page at a time, an
    object whole but for its lists longer than a page (each paged alike, said in ``paged``), a value as is.
    Fields added to the report later are served as they land."""
    if field not in data:
        raise UsageError(f"report {report_id} has no field {field!r}; fields: {', '.join(data)}")
    value = data[field]
    limit, offset = max(1, min(int(limit), MAX_PAGE)), max(0, int(offset))
    if isinstance(value, list):
        page, where = _page(value, offset, limit)
        return {"report": report_id, "field": field, **where, "items": page}
    if not isinstance(value, dict):
        return {"report": report_id, "field": field, "value": value}
    out, paged = dict(value), {}
    for key, inner in value.items():
        if isinstance(inner, list) and len(inner) > limit:
            out[key], paged[key] = _page(inner, offset, limit)
    return {"report": report_id, "field": field, "value": out, **({"paged": paged} if paged else {})}


def rule_text(rule: str | None, catalog: list[dict]) -> dict:
    """A rule's docstring parts (rules/catalog.py); without a rule, every rule's id and summary."""
    if rule is None:
        return {"rules": [{"id": r["id"], "summary": r["summary"]} for r in catalog],
                "next": "explain_rule(rule=ID) gives what it finds, why it costs time, how the cost is "
                        "estimated, the fix and its details keys"}
    row = next((r for r in catalog if r["id"] == rule), None)
    if row is None:
        raise UsageError(f"no rule {rule!r}; rules: {', '.join(r['id'] for r in catalog)}")
    details = [{"name": d.name, "type": d.type, "meaning": d.meaning} for d in row["details"]]
    return {**{k: v for k, v in row.items() if k != "details"}, "details": details}

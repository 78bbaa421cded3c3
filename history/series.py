"""One run of a history: the few numbers of a JSON report that a series follows (step time, MFU, per-step times,
each op's time per step, each finding's time per step), whether read from a report or from the store.

A point is plain data (the store keeps exactly these fields, so a recorded run reads back as it went in).
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..units import finite_or_none as _num

# A jax.profiler run folder is named by its start time (plugins/profile/2024_05_01_12_30_00).
_RUN_NAME_FORMAT = "%Y_%m_%d_%H_%M_%S"


def run_time_of(run_name: str | None) -> str | None:
    """The run's start (ISO 8601, UTC) read from its folder name; None when the name is not a time."""
    try:
        when = datetime.strptime(str(run_name), _RUN_NAME_FORMAT)
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc).isoformat()


def op_key(op: dict) -> str:
    """Ops are followed by program and op name (as compare matches them first)."""
    return f"{op.get('module') or ''}/{op.get('name') or ''}"


def finding_key(finding: dict) -> str:
    """Findings are followed by their stable key rule:kind:main_op (as compare matches them)."""
    return finding.get("key") or f"{finding.get('rule', '')}:{finding.get('kind', '')}:"


def point_of(report: dict, label: str, input_kind: str) -> dict:
    """The point of one JSON report dict (``diagnose --format json``'s schema)."""
    steps = report.get("steps") or {}
    run = report.get("run") or {}
    ops = {}
    for op in report.get("ops") or []:
        seconds = _num(op.get("measured_s_per_step"))
        if seconds is None:
            seconds = _num(op.get("predicted_s_per_step"))
        if seconds is not None:  # two rows of one name (one per program id): summed
            key = op_key(op)
            ops[key] = ops.get(key, 0.0) + seconds
    findings = {}
    for f in report.get("findings") or []:
        key = finding_key(f)
        seconds = _num(f.get("time_s_per_step")) or 0.0
        old = findings.get(key)
        findings[key] = {"title": f.get("title") or key, "severity": f.get("severity") or "info",
                         "s_per_step": seconds + (old["s_per_step"] if old else 0.0)}
    per_step = [float(s) for s in steps.get("per_step_s") or [] if _num(s) is not None]
    return {"label": label, "input_kind": input_kind, "run": run.get("name"), "run_time": run_time_of(run.get("name")),
            "tool_version": (report.get("tool") or {}).get("version"), "platform": report.get("platform"),
            "chip": (report.get("chip") or {}).get("name"), "step_s": _num(report.get("step_s")),
            "mfu": _num(report.get("mfu")), "per_step_s": per_step, "headline": report.get("headline") or "",
            "ops": ops, "findings": findings}


def ordered(points: list[dict], given_order: bool) -> list[dict]:
    """By run time (a stable sort: runs of one time, or of no known time, keep the order given), or as given.
    A run of no known time (its folder name is not a time, and it was not recorded) goes after those of one."""
    if given_order:
        return list(points)

    def when(point: dict) -> str | None:
        return point.get("run_time") or point.get("recorded_at")

    return sorted(points, key=lambda p: (when(p) is None, when(p) or ""))

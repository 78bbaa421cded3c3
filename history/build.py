"""The history data of a series of points (series.py): runs, change points (changes.py), the top ops and
findings across the series, the regression gate and a headline. Plain data; report/history_* render it."""

from __future__ import annotations

import math

from ..compare.noise import ALPHA, RULE, TEST_NAME
from ..errors import InputError, UsageError
from .changes import METHOD, RUN_RULE, change_points

TOP_OPS = 8
TOP_FINDINGS = 8


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g} ms"


def _run_row(index: int, p: dict) -> dict:
    steps = len(p["per_step_s"]) or (1 if p["step_s"] is not None else 0)
    return {"index": index, "label": p["label"], "input_kind": p["input_kind"], "run": p["run"],
            "run_time": p["run_time"], "recorded_at": p.get("recorded_at"), "tool_version": p["tool_version"],
            "platform": p["platform"], "chip": p["chip"], "step_s": p["step_s"], "mfu": p["mfu"], "steps": steps,
            "per_step_s": list(p["per_step_s"]), "headline": p["headline"]}


def _top(points: list[dict], field: str, limit: int) -> list[dict]:
    """The ``limit`` keys of the largest time per step in any run, each with its time in every run (None:
    absent from that run)."""
    peak: dict[str, float] = {}
    for p in points:
        for key, value in p[field].items():
            seconds = value["s_per_step"] if isinstance(value, dict) else value
            peak[key] = max(peak.get(key, 0.0), seconds)
    keys = sorted(peak, key=lambda k: (-peak[k], k))[:limit]
    rows = []
    for key in keys:
        values = [p[field].get(key) for p in points]
        row = {"key": key, "s_per_step": [v["s_per_step"] if isinstance(v, dict) else v for v in values]}
        if field == "findings":
            last = next(v for v in reversed(values) if v is not None)
            row.update(title=last["title"], severity=last["severity"])
        rows.append(row)
    return rows


def _warnings(points: list[dict]) -> list[str]:
    notes = []
    for field, what in (("platform", "platforms"), ("chip", "chips")):
        seen = sorted({str(p[field]) for p in points if p[field] is not None})
        if len(seen) > 1:
            notes.append(f"the runs are on different {what} ({', '.join(seen)}): a change point may be that")
    untested = [p["label"] for p in points if len(p["per_step_s"]) < 2]
    if untested:
        notes.append(f"{len(untested)} run(s) without per-step times (e.g. {untested[0]}): their mean step counts "
                     "as one step, with no spread of its own")
    return notes


def _regression(changes: list[dict], threshold: float | None) -> dict:
    if threshold is None:
        return {"threshold": None, "regressed": False, "reason": "no --fail-on-regression given"}
    if not changes:
        return {"threshold": threshold, "regressed": False, "reason": "no change point beyond noise"}
    last = changes[-1]
    change = last["change"]
    regressed = last["direction"] == "slower" and change is not None and change > threshold
    reason = (f"the last change point, at run {last['index'] + 1} ({last['label']}), is "
              f"{abs(change or 0.0):.1%} {last['direction']} ({_ms(last['mean_before_s'])} -> "
              f"{_ms(last['mean_after_s'])}); threshold {threshold:.1%} slower")
    return {"threshold": threshold, "regressed": regressed, "reason": reason}


def headline(runs: list[dict], changes: list[dict]) -> str:
    first, last = runs[0], runs[-1]
    text = f"{len(runs)} run{'s' if len(runs) > 1 else ''}, step {_ms(first['step_s'])} -> {_ms(last['step_s'])}"
    if not changes:
        return text + "; no change point beyond noise"
    parts = [f"run {c['index'] + 1} ({c['label']}) {abs(c['change'] or 0.0):.1%} {c['direction']}" for c in changes]
    return text + f"; {len(changes)} change point{'s' if len(changes) > 1 else ''}: " + ", ".join(parts)


def history_data(points: list[dict], *, fail_on_regression: float | None = None) -> dict:
    """The history of ``points`` (already in series order)."""
    if not points:
        raise InputError("history: no runs given")
    if fail_on_regression is not None and not (math.isfinite(fail_on_regression) and fail_on_regression >= 0):
        raise UsageError(f"fail_on_regression {fail_on_regression!r} is not a share like 0.05")
    runs = [_run_row(i, p) for i, p in enumerate(points)]
    changes = change_points(points)
    return {"headline": headline(runs, changes), "runs": runs, "change_points": changes,
            "test": {"name": TEST_NAME, "alpha": ALPHA, "rule": RULE, "run_rule": RUN_RULE, "method": METHOD},
            "top_ops": _top(points, "ops", TOP_OPS), "top_findings": _top(points, "findings", TOP_FINDINGS),
            "regression": _regression(changes, fail_on_regression), "warnings": _warnings(points)}

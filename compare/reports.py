"""Before/after of two reports (``diagnose compare BASE NEW``): step time with a noise-aware verdict, MFU,
breakdown, per-op and per-finding deltas.

Both sides are JSON report dicts (the ``schema_version`` ``diagnose --format json`` writes), whether
read from a file or just produced from a capture, so a saved report compares with a fresh capture the
same way two captures do. The result is plain data; ``report/compare_*`` render it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analyzer.analysis import UNPRICED_LIMIT
from ..errors import InputError
from ..units import finite_or_none as _num
from .noise import NoiseTest, welch
from .ops import REL_TOL, STEP_TOL, compare_findings, compare_ops

# On a noisy capture an op's time varies at least as much, relative to itself, as the step's: a per-op change
# is labelled only beyond twice the step's relative spread (and never below REL_TOL).
NOISE_FACTOR = 2.0
BREAKDOWN_ORDER = ("compute", "memory", "collective", "host_transfer", "other", "idle")


@dataclass(frozen=True)
class Side:
    """One input: its report dict and how to name it."""

    report: dict
    label: str  # the path as given
    input_kind: str  # 'capture' | 'json report'


def _ratio(new, base) -> float | None:
    n, b = _num(new), _num(base)
    return n / b if n is not None and b not in (None, 0.0) else None


def _side_dict(side: Side) -> dict:
    r = side.report
    steps = r.get("steps") or {}
    chip = r.get("chip") or {}
    return {"label": side.label, "input_kind": side.input_kind,
            "tool_version": (r.get("tool") or {}).get("version"), "platform": r.get("platform"),
            "chip": chip.get("name"), "chip_key": chip.get("key"), "devices": r.get("devices"),
            "run": (r.get("run") or {}).get("name"), "step_program": steps.get("program"),
            "steps": steps.get("count"), "step_source": steps.get("source"), "step_s": _num(r.get("step_s")),
            "mfu": _num(r.get("mfu")), "per_step_s": list(steps.get("per_step_s") or []),
            "headline": r.get("headline")}


def _comparability(base: dict, new: dict) -> list[str]:
    """What differs between the two inputs beyond the change under test (said, not refused)."""
    notes = []
    for field, what in (("platform", "platform"), ("chip_key", "chip"), ("devices", "device count"),
                        ("step_program", "step program")):
        if base[field] != new[field]:
            notes.append(f"the {what} differs ({base[field]} -> {new[field]}): the ratios mix that change in")
    for which, side in (("base", base), ("new", new)):
        if side["step_s"] is not None and not side["per_step_s"]:
            kind = "predicted, nothing measured" if side["platform"] == "hlo" else \
                f"written by xladiag {side['tool_version']} before reports kept them"
            notes.append(f"{which} ({side['label']}) has no per-step times ({kind}): the step change is not tested "
                         "against noise")
    return notes


def _unpriced(sides, measured: bool) -> list[str]:
    """A side with more than UNPRICED_LIMIT of its step in ops with no cost model: a predicted comparison
    leaves that time out (not meaningful), a measured one compares MFUs that are only lower bounds."""
    notes = []
    for label, report in sides:
        share = _num(report.get("unpriced_share"))
        if share is None or share <= UNPRICED_LIMIT:
            continue
        notes.append(f"{label}: {share:.1%} of the step is in ops with no cost model: "
                     + ("the predicted comparison is not meaningful (that time is left out of its step)"
                        if not measured else "its MFU is a lower bound"))
    return notes


def _verdict(test: NoiseTest, diff: float | None) -> str:
    if diff is None:
        return "unknown"
    if diff == 0:
        return "unchanged"
    if test.beyond_noise is None:
        return "untested"
    if not test.beyond_noise:
        return "within noise"
    # The direction of the difference the test judged (the per-step means), not of the headline steps.
    return "slower" if test.diff_s > 0 else "faster"


def regression(verdict: str, ratio: float | None, threshold: float | None, test: NoiseTest) -> dict:
    """The ``--fail-on-regression`` gate: a slower mean step beyond noise and beyond ``threshold``."""
    change = None if ratio is None else ratio - 1.0
    if threshold is None:
        return {"threshold": None, "value": change, "tripped": False, "reason": "no threshold given"}
    if change is None:
        return {"threshold": threshold, "value": None, "tripped": False, "reason": "step time unknown on one side"}
    beyond = change > threshold
    if verdict == "untested":  # one step, or an old report: the threshold alone decides, and we say so
        return {"threshold": threshold, "value": change, "tripped": bool(beyond),
                "reason": f"step {change:+.1%} vs threshold {threshold:.1%}; noise not testable ({test.reason})"}
    tripped = verdict == "slower" and beyond
    if tripped:
        reason = f"step {change:+.1%} > {threshold:.1%}, beyond noise ({test.reason})"
    elif verdict == "slower":
        reason = f"slower beyond noise but {change:+.1%} <= threshold {threshold:.1%}"
    else:
        reason = f"step {verdict} ({change:+.1%}); threshold {threshold:.1%}"
    return {"threshold": threshold, "value": change, "tripped": bool(tripped), "reason": reason}


def _breakdown(base: dict, new: dict) -> list[dict]:
    b, n = base.get("breakdown") or {}, new.get("breakdown") or {}
    keys = list(BREAKDOWN_ORDER) + [k for k in (*b, *n) if k not in BREAKDOWN_ORDER]
    rows = []
    for k in dict.fromkeys(keys):
        bv, nv = _num(b.get(k)) or 0.0, _num(n.get(k)) or 0.0
        rows.append({"class": k, "base_s": bv, "new_s": nv, "delta_s": nv - bv, "ratio": _ratio(nv, bv)})
    return rows


def _records(frame: pd.DataFrame) -> list[dict]:
    out = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return [{k: (_num(v) if isinstance(v, (float, np.floating)) else v) for k, v in r.items()} for r in out]


def _counts(frame: pd.DataFrame, statuses) -> dict:
    counts = frame["status"].value_counts()
    return {s: int(counts.get(s, 0)) for s in statuses}


def _closed_loop(findings: pd.DataFrame, step_delta_s: float | None) -> pd.DataFrame:
    """For each base finding that disappeared or shrank: what it claimed its fix saves, next to what the step
    really saved (base step minus new step, whatever else changed) and what its own cost fell by; the share of
    the claim the step realized for a finding that disappeared. NaN elsewhere."""
    out = findings.copy()
    fixed = out["status"].isin(["disappeared", "shrank"]).to_numpy()
    gone = (out["status"] == "disappeared").to_numpy()
    claimed = out["base_savings_s_per_step"].astype(float).to_numpy()
    step_saved = -step_delta_s if step_delta_s is not None else math.nan
    out["claimed_s_per_step"] = np.where(fixed, claimed, np.nan)
    # the claim's share of the base's recoverable total, where other findings' fixes overlap it
    out["claimed_counted_s_per_step"] = np.where(fixed, out["base_counted_s_per_step"].astype(float), np.nan)
    out["realized_step_s_per_step"] = np.where(fixed, step_saved, np.nan)
    out["realized_own_s_per_step"] = np.where(fixed, -out["delta_s_per_step"].astype(float).to_numpy(), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["realized_share"] = np.where(gone & (claimed > 0), step_saved / claimed, np.nan)
    return out


def compare_reports(base: Side, new: Side, *, threshold: float | None = None) -> dict:
    """The comparison as plain data (see docs/compare.md); ``threshold`` is ``--fail-on-regression``."""
    b, n = base.report, new.report
    if bool(b.get("measured", True)) != bool(n.get("measured", True)):
        raise InputError(f"{base.label} vs {new.label}: one report is measured and the other predicted "
                         "(HLO only): their times cannot be compared")
    measured = bool(b.get("measured", True))
    time_col = "measured_s_per_step" if measured else "predicted_s_per_step"
    bs, ns = _side_dict(base), _side_dict(new)
    base_step, new_step = bs["step_s"], ns["step_s"]
    diff = None if base_step is None or new_step is None else new_step - base_step
    test = welch(np.asarray(bs["per_step_s"], float), np.asarray(ns["per_step_s"], float))
    verdict = _verdict(test, diff)
    ratio = _ratio(new_step, base_step)
    step_for_tol = base_step if base_step is not None else math.nan
    spread_share = test.spread_s / base_step if test.spread_s is not None and base_step else 0.0
    rel_tol = max(REL_TOL, NOISE_FACTOR * spread_share)
    ops = compare_ops(b.get("ops") or [], n.get("ops") or [], time_col, step_for_tol, rel_tol)
    findings = _closed_loop(compare_findings(b.get("findings") or [], n.get("findings") or [], step_for_tol, rel_tol),
                            diff)
    return {
        "measured": measured,
        "base": bs,
        "new": ns,
        "step": {"base_s": base_step, "new_s": new_step, "delta_s": diff, "ratio": ratio, "verdict": verdict,
                 "noise_test": test.as_dict()},
        "mfu": {"base": bs["mfu"], "new": ns["mfu"], "ratio": _ratio(ns["mfu"], bs["mfu"])},
        "regression": regression(verdict, ratio, threshold, test),
        "breakdown": _breakdown(b, n),
        "ops_summary": {"counts": _counts(ops, ("slower", "faster", "unchanged", "new", "removed")),
                        "delta_s_per_step": _num(ops["delta_s_per_step"].sum()) if len(ops) else 0.0,
                        "time": "measured" if measured else "predicted", "rel_tol": rel_tol, "step_tol": STEP_TOL},
        "ops": _records(ops),
        "findings_summary": _counts(findings, ("appeared", "disappeared", "grew", "shrank", "unchanged")),
        "findings": _records(findings),
        "warnings": _comparability(bs, ns) + _unpriced(((base.label, b), (new.label, n)), measured),
    }

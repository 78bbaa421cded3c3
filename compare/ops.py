"""Per-op and per-finding deltas between two reports, matched by names that survive a recompile.

Ops (the step program's, one record per HLO op as in the JSON report) are matched
1. by program name and HLO op name (``module``, ``name``); program ids are never used, they change with
   every compile;
2. what is left, by framework op and source line (``tf_op``, ``source``): a recompile that renumbers
   ``fusion.3`` to ``fusion.7`` keeps the JAX op path and the Python line. Several ops can share one such
   key; they are matched as a group (their times summed), named ``a, b -> c``;
3. the rest are ``new`` or ``removed``.
Findings are matched by their stable key ``rule:kind:main_op``.

A matched change is reported as ``slower``/``faster`` (``grew``/``shrank`` for findings) only when it is at
least ``rel_tol`` of the base time (``REL_TOL``, raised by the caller on a noisy capture) and ``STEP_TOL``
of the base step; else ``unchanged``. These are reported, never gated: only the step time is tested
against noise (``step_noise``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..rules.base import current_key

REL_TOL = 0.05  # of the op's (finding's) base time
STEP_TOL = 0.001  # of the base step
MAX_NAMES = 3  # names shown for a group matched by framework op / source line

OP_COLUMNS = ("status", "matched_by", "module", "name", "base_name", "tf_op", "source", "time_class",
              "base_s_per_step", "new_s_per_step", "delta_s_per_step", "ratio", "delta_share_of_step")


def _step_ops(records: list[dict], time_col: str) -> pd.DataFrame:
    """The step program's ops, one row per (module, name), time per step summed."""
    cols = ["module", "name", "tf_op", "source", "time_class", "in_step", time_col]
    frame = pd.DataFrame.from_records(records, columns=cols) if records else pd.DataFrame(columns=cols)
    frame = frame[frame["in_step"].fillna(False).astype(bool)]
    frame = frame.assign(module=frame["module"].fillna("").astype(str), name=frame["name"].fillna("").astype(str),
                         time=pd.to_numeric(frame[time_col], errors="coerce").fillna(0.0))
    return frame.groupby(["module", "name"], sort=False, as_index=False).agg(
        time=("time", "sum"), tf_op=("tf_op", "first"), source=("source", "first"),
        time_class=("time_class", "first"))


def _framework_key(frame: pd.DataFrame) -> pd.Series:
    tf_op, source = frame["tf_op"].fillna("").astype(str), frame["source"].fillna("").astype(str)
    return (tf_op + "\x1f" + source).where((tf_op != "") | (source != ""), "")


def _names(values) -> str:
    names = sorted(set(values))
    shown = ", ".join(names[:MAX_NAMES])
    return shown + (f" (+{len(names) - MAX_NAMES} more)" if len(names) > MAX_NAMES else "")


def _by_framework_op(base: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Groups of unmatched ops with the same (tf_op, source) on both sides: (matched, base rest, new rest)."""
    bk, nk = _framework_key(base), _framework_key(new)
    shared = set(bk[bk != ""]) & set(nk[nk != ""])
    bm, nm = bk.isin(shared), nk.isin(shared)

    def group(frame: pd.DataFrame, key: pd.Series) -> pd.DataFrame:
        return frame.assign(key=key).groupby("key", as_index=False).agg(
            module=("module", "first"), names=("name", _names), time=("time", "sum"), tf_op=("tf_op", "first"),
            source=("source", "first"), time_class=("time_class", "first"))

    if not shared:
        return pd.DataFrame(columns=list(OP_COLUMNS)), base, new
    g = group(base[bm], bk[bm]).merge(group(new[nm], nk[nm]), on="key", suffixes=("_b", "_n"))
    matched = pd.DataFrame({"matched_by": "framework op", "module": g["module_n"], "name": g["names_n"],
                            "base_name": g["names_b"], "tf_op": g["tf_op_n"], "source": g["source_n"],
                            "time_class": g["time_class_n"], "base_s_per_step": g["time_b"],
                            "new_s_per_step": g["time_n"]})
    return matched, base[~bm], new[~nm]


def changed(base_s: pd.Series, new_s: pd.Series, step_s: float, rel_tol: float = REL_TOL) -> np.ndarray:
    """Whether each matched time moved by at least ``rel_tol`` of itself and STEP_TOL of the step."""
    delta = (new_s - base_s).abs().to_numpy(np.float64)
    floor = np.maximum(rel_tol * base_s.abs().to_numpy(np.float64), STEP_TOL * (step_s if step_s > 0 else 0.0))
    return (delta >= floor) & (delta > 0)


def compare_ops(base_records: list[dict], new_records: list[dict], time_col: str, base_step_s: float,
                rel_tol: float = REL_TOL) -> pd.DataFrame:
    """One row per matched op (or op group), new op and removed op; biggest |delta| first (``OP_COLUMNS``)."""
    base, new = _step_ops(base_records, time_col), _step_ops(new_records, time_col)
    both = base.merge(new, on=["module", "name"], how="outer", suffixes=("_b", "_n"), indicator=True)
    named = both[both["_merge"] == "both"]
    by_name = pd.DataFrame({"matched_by": "name", "module": named["module"], "name": named["name"], "base_name": None,
                            "tf_op": named["tf_op_n"], "source": named["source_n"], "time_class": named["time_class_n"],
                            "base_s_per_step": named["time_b"], "new_s_per_step": named["time_n"]})
    base_rest = base.merge(both.loc[both["_merge"] == "left_only", ["module", "name"]], on=["module", "name"])
    new_rest = new.merge(both.loc[both["_merge"] == "right_only", ["module", "name"]], on=["module", "name"])
    by_framework, base_rest, new_rest = _by_framework_op(base_rest, new_rest)
    matched = pd.concat([by_name, by_framework], ignore_index=True)
    moved = changed(matched["base_s_per_step"].astype(float), matched["new_s_per_step"].astype(float), base_step_s,
                    rel_tol)
    slower = matched["new_s_per_step"].astype(float) > matched["base_s_per_step"].astype(float)
    matched["status"] = np.where(moved, np.where(slower, "slower", "faster"), "unchanged")
    removed = pd.DataFrame({"status": "removed", "matched_by": None, "module": base_rest["module"],
                            "name": base_rest["name"], "base_name": None, "tf_op": base_rest["tf_op"],
                            "source": base_rest["source"], "time_class": base_rest["time_class"],
                            "base_s_per_step": base_rest["time"], "new_s_per_step": 0.0})
    added = pd.DataFrame({"status": "new", "matched_by": None, "module": new_rest["module"], "name": new_rest["name"],
                          "base_name": None, "tf_op": new_rest["tf_op"], "source": new_rest["source"],
                          "time_class": new_rest["time_class"], "base_s_per_step": 0.0,
                          "new_s_per_step": new_rest["time"]})
    parts = [p for p in (matched, removed, added) if len(p)]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(OP_COLUMNS))
    out["base_s_per_step"] = out["base_s_per_step"].astype(float)
    out["new_s_per_step"] = out["new_s_per_step"].astype(float)
    out["delta_s_per_step"] = out["new_s_per_step"] - out["base_s_per_step"]
    base_t = out["base_s_per_step"]
    out["ratio"] = (out["new_s_per_step"] / base_t).where(base_t > 0)
    out["delta_share_of_step"] = out["delta_s_per_step"] / base_step_s if base_step_s > 0 else np.nan
    order = np.argsort(-out["delta_s_per_step"].abs().to_numpy(np.float64), kind="stable")
    return out.iloc[order][list(OP_COLUMNS)].reset_index(drop=True)


FINDING_COLUMNS = ("status", "key", "rule", "kind", "main_op", "title", "base_severity", "new_severity",
                   "base_s_per_step", "new_s_per_step", "delta_s_per_step", "base_savings_s_per_step",
                   "new_savings_s_per_step", "base_counted_s_per_step")


def _findings_frame(findings: list[dict]) -> pd.DataFrame:
    keys = [current_key(f.get("key") or f"{f.get('rule', '')}:{f.get('kind', '')}:") for f in findings]
    # An old report's finding under a renamed rule (rules.base.RENAMED_KEYS) pairs with its new name.
    rows = [{"key": key, "rule": key.split(":", 1)[0] if f.get("rule") else f.get("rule"),
             "kind": f.get("kind") or "", "title": f.get("title"), "severity": f.get("severity"),
             "time": f.get("time_s_per_step") or 0.0, "savings": f.get("est_savings_s_per_step") or 0.0,
             "counted": f.get("counted_s_per_step", f.get("est_savings_s_per_step")) or 0.0}
            for key, f in zip(keys, findings)]
    frame = pd.DataFrame(rows, columns=["key", "rule", "kind", "title", "severity", "time", "savings", "counted"])
    # One row per key, so the outer merge pairs each key once (two findings sharing a key: one, summed; the
    # first, highest-ranked, names it).
    return frame.groupby("key", sort=False, as_index=False).agg(
        rule=("rule", "first"), kind=("kind", "first"), title=("title", "first"), severity=("severity", "first"),
        time=("time", "sum"), savings=("savings", "sum"), counted=("counted", "sum"))


def compare_findings(base_findings: list[dict], new_findings: list[dict], base_step_s: float,
                     rel_tol: float = REL_TOL) -> pd.DataFrame:
    """Findings matched by key: appeared, disappeared, grew, shrank, unchanged; biggest |delta| first."""
    b, n = _findings_frame(base_findings), _findings_frame(new_findings)
    m = b.merge(n, on="key", how="outer", suffixes=("_b", "_n"), indicator=True)
    base_t, new_t = m["time_b"].astype(float).fillna(0.0), m["time_n"].astype(float).fillna(0.0)
    moved = changed(base_t, new_t, base_step_s, rel_tol)
    status = np.where(m["_merge"] == "left_only", "disappeared", np.where(
        m["_merge"] == "right_only", "appeared",
        np.where(moved, np.where(new_t > base_t, "grew", "shrank"), "unchanged")))
    out = pd.DataFrame({
        "status": status, "key": m["key"], "rule": m["rule_n"].fillna(m["rule_b"]),
        "kind": m["kind_n"].fillna(m["kind_b"]), "main_op": m["key"].str.split(":", n=2).str[2].fillna(""),
        "title": m["title_n"].fillna(m["title_b"]), "base_severity": m["severity_b"], "new_severity": m["severity_n"],
        "base_s_per_step": base_t, "new_s_per_step": new_t, "delta_s_per_step": new_t - base_t,
        "base_savings_s_per_step": m["savings_b"].astype(float), "new_savings_s_per_step": m["savings_n"].astype(float),
        "base_counted_s_per_step": m["counted_b"].astype(float),
    })
    order = np.argsort(-out["delta_s_per_step"].abs().to_numpy(np.float64), kind="stable")
    return out.iloc[order][list(FINDING_COLUMNS)].reset_index(drop=True)

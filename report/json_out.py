"""The JSON report: the public, versioned contract (documented in docs/json_schema.md).

:func:`report_to_dict` is also what the HTML and Markdown renderers read, so every format shows the
same numbers. Everything in it is plain Python: NaN and infinities become ``None`` (JSON has no NaN,
and ``json.loads`` in other languages rejects it), numpy and pandas scalars become ``int``/``float``/
``bool``, paths become strings.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd

from ..text_safety import clean_text
from . import json_text
from .memory_json import memory_at_peak_dict
from .ops_json import OP_FIELDS
from .ops_json import ops_records as _ops_records
from .scopes_out import scopes_records
from .trace_links import finding_occurrences, occurrence_index

SCHEMA_VERSION = 2

# Where the time numbers come from, in the words the report uses everywhere.
SOURCE_MEASURED = "measured (trace)"
SOURCE_PREDICTED = "predicted (roofline: HLO costs and chip table)"

_OP_FIELDS = OP_FIELDS  # the contract's op fields (report/ops_json.py)


def clean(value: Any) -> Any:
    """A JSON-safe copy: NaN/inf -> None, numpy/pandas scalars -> Python, containers recursively."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):  # before int: bool is an int subclass
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [clean(v) for v in value.tolist()]
    if isinstance(value, pd.Series):
        return [clean(v) for v in value.tolist()]
    if isinstance(value, pd.DataFrame):
        return [clean(r) for r in value.to_dict("records")]
    if isinstance(value, PurePath):  # a path is text of unknown encoding: shown, never opened from here
        return clean_text(str(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return clean({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if value is pd.NA or value is pd.NaT:
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return clean_text(str(value))  # a RemotePath's URL, among others


def _text(value: Any) -> str | None:
    """A text cell: None for missing (NaN, None, '')."""
    v = clean(value)
    if v is None or v == "":
        return None
    return str(v)


def chip_dict(analysis) -> dict:
    chip = analysis.chip
    sources = dict(chip.number_sources)
    peak = chip.peak_flops_per_s("bf16")
    return {
        "name": chip.name,
        "key": chip.key,
        "vendor": chip.vendor,
        "peak_flops_per_s": clean(peak),
        "hbm_bytes_per_s": clean(chip.hbm_bytes_per_s),
        "ridge_flops_per_byte": clean(peak / chip.hbm_bytes_per_s) if peak and chip.hbm_bytes_per_s else None,
        "detected_as": analysis.chip_note,
        # Per-number provenance: 'trace' | 'chip table (<reference>)' | 'user file (<path>)'.
        "source": {
            "peak_flops_per_s": sources.get("peak_bf16_flops_per_s", "chip table"),
            "hbm_bytes_per_s": sources.get("hbm_bytes_per_s", "chip table"),
            **{k: v for k, v in sources.items() if k not in ("peak_bf16_flops_per_s", "hbm_bytes_per_s")},
        },
        # The chip's other numbers (interconnect, capacity...), each with its entry in "source".
        "other_numbers": {
            k: clean(getattr(chip, k, None))
            for k in sources
            if k not in ("peak_bf16_flops_per_s", "hbm_bytes_per_s") and getattr(chip, k, None) is not None
        },
    }


def steps_dict(analysis) -> dict:
    steps = analysis.steps
    if steps is None:
        return {
            "count": 0,
            "mean_s": clean(analysis.step_s),
            "min_s": None,
            "max_s": None,
            "source": "predicted: no trace, the step is the sum of per-op roofline predictions",
            "program": None,
            "warmup_excluded": False,
            "busy_s": None,
            "idle_s": None,
            "per_step_s": [],
        }
    measured = steps.after_warmup
    durations = measured["duration_ps"].astype("float64") / 1e12
    ds = analysis.device_steps
    return {
        "count": steps.count,
        "mean_s": clean(steps.mean_s),
        "min_s": clean(durations.min()) if len(durations) else None,
        "max_s": clean(durations.max()) if len(durations) else None,
        "source": steps.source,
        "program": steps.program or None,
        "warmup_excluded": bool(steps.warmup_excluded),
        "busy_s": clean(ds["busy_s"].mean()) if len(ds) else None,
        "idle_s": clean(ds["idle_s"].mean()) if len(ds) else None,
        "per_step_s": per_step_s(ds),
        # Steps that are a program's executions: its share of the programs' device time, and the others when
        # it holds under half (null / [] otherwise).
        "program_share": clean(steps.program_share) if steps.program_share is not None else None,
        "other_programs": [{"name": n, "program_id": i or None, "share": clean(sh)}
                           for n, i, sh in steps.other_programs] if _listed(steps) else [],
    }


def _listed(steps) -> bool:
    from ..analyzer.steps.choice import MIN_PROGRAM_SHARE

    return steps.program_share is not None and steps.program_share < MIN_PROGRAM_SHARE


def per_step_s(device_steps: pd.DataFrame) -> list[float]:
    """Each measured step's duration, mean over devices, in step order: the distribution ``diagnose compare``
    tests a change of the mean against (device-steps of one step are not independent samples)."""
    if device_steps.empty:
        return []
    steps, where = np.unique(device_steps["step"].to_numpy(np.int64), return_inverse=True)
    total = np.bincount(where, weights=device_steps["duration_s"].to_numpy(np.float64), minlength=len(steps))
    return clean(total / np.bincount(where, minlength=len(steps)))


def host_steps_dict(analysis) -> dict | None:
    """Step time per host and the slowest host's lag (analyzer/hosts/step_times.py); None without measured steps."""
    from ..analyzer.hosts.step_times import host_step_times

    hs = host_step_times(analysis.device_steps, analysis.devices)
    if hs.table.empty:
        return None
    median = hs.median_step_s
    return {
        "hosts": [{"host": str(r.host), "devices": int(r.devices), "device_steps": int(r.device_steps),
                   "step_s": float(r.step_s), "busy_s": float(r.busy_s), "idle_s": float(r.idle_s),
                   "lag_s": float(r.lag_s)} for r in hs.table.itertuples()],
        "median_step_s": median,
        "slowest_host": hs.slowest_host,
        "lag_s": hs.lag_s if hs.slowest_host is not None else None,
        "lag_fraction": hs.lag_s / median if hs.slowest_host is not None and median > 0 else None,
    }


def recoverable_dict(report) -> dict:
    step = report.analysis.step_s
    total = report.recoverable_s_per_step
    raw = sum(f.counted for f in report.findings)
    return {
        "s_per_step": total,
        "fraction_of_step": total / step if step and step > 0 else None,
        "findings": sum(1 for f in report.findings if f.counted > 0),
        "capped_at_step": bool(raw > total),
    }


def finding_dict(finding, occurrences: list | None = None) -> dict:
    """One finding; ``occurrences``: each op's representative occurrence in the trace (report.trace_links)."""
    occurrences = occurrences or [None] * len(finding.ops)
    return {
        "rule": finding.rule,
        "kind": finding.kind,
        "key": finding.key,
        "severity": finding.severity,
        "title": finding.title,
        "time_s_per_step": clean(finding.time_s_per_step),
        "est_savings_s_per_step": clean(finding.est_savings_s_per_step),
        "counted_s_per_step": clean(finding.counted),
        "fraction_of_step": clean(finding.fraction_of_step),
        "confidence": finding.confidence,
        "lever": finding.lever,
        "benefit": finding.benefit,
        "related_ops": [{"op": op, "counted_by": key} for op, key in finding.related],
        "ops": [
            {
                "name": str(op.name),
                "measured_s_per_step": clean(op.measured_s_per_step),
                "predicted_s_per_step": clean(op.predicted_s_per_step),
                "detail": op.detail,
                "occurrence": occ,
            }
            for op, occ in zip(finding.ops, occurrences)
        ],
        "evidence": finding.evidence,
        "fix": finding.fix,
        "details": clean(finding.details),
    }


def selection_dict(report) -> dict:
    """What --select/--ignore/--baseline (or [tool.xladiag]) left out, and why."""
    from ..rules.registry import RULE_IDS

    chosen = report.selection
    left_out = chosen.rules_left_out(RULE_IDS) if chosen is not None else {}
    return {
        "select": list(chosen.select) if chosen is not None and chosen.select is not None else None,
        "ignore": list(chosen.ignore) if chosen is not None else [],
        "baseline": chosen.baseline_file if chosen is not None else None,
        "baseline_keys": len(chosen.baseline) if chosen is not None else 0,
        "rules_left_out": [{"rule": rule, "why": why} for rule, why in left_out.items()],
        "ignored_findings": [
            {"key": d.finding.key, "rule": d.finding.rule, "severity": d.finding.severity,
             "title": d.finding.title, "why": d.why}
            for d in report.dropped
        ],
    }


def ops_records(ops: pd.DataFrame) -> list[dict]:
    """The ops table as records in the contract's field names (one per HLO op)."""
    return _ops_records(ops, clean)


def report_to_dict(report) -> dict:
    """The whole report as plain data (schema_version :data:`SCHEMA_VERSION`)."""
    from .. import __version__

    a = report.analysis
    files = a.files
    devices = a.devices
    device_cols = [c for c in ("device", "host", "device_type", "vendor") if c in devices.columns]
    index = occurrence_index(a)
    data = clean(
        {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "xladiag", "version": __version__},
            "headline": report.headline,
            "platform": a.platform,
            "measured": bool(a.measured),
            "time_source": SOURCE_MEASURED if a.measured else SOURCE_PREDICTED,
            "chip": chip_dict(a),
            "devices": a.num_devices,
            "device_list": devices[device_cols].to_dict("records") if device_cols else [],
            "hosts": list(a.hosts),
            "run": {
                "name": files.run_name,
                "dir": files.run_dir,
                "other_runs": list(files.other_runs),
                "note": files.runs_note,
                "xplane_files": list(files.xplane_files),
                "hlo_files": list(files.hlo_files),
            },
            "steps": steps_dict(a),
            "host_steps": host_steps_dict(a),
            "step_s": a.step_s,
            "breakdown": {k: a.breakdown.get(k, 0.0) for k in a.breakdown},
            "mfu": a.mfu,
            "unknown_flops_share": a.unknown_flops_share,
            "unpriced_share": a.unpriced_share,
            "mfu_at_least": a.mfu_is_lower_bound,
            "model_flops_per_step": a.model_flops_per_step,
            "ideal_step_s": a.ideal_step_s,
            "recoverable": recoverable_dict(report),
            "capture_scope": report.capture_scope,
            "gates": [g.to_dict() for g in report.gates],  # CI thresholds evaluated (--fail-on/--max-*/--min-*)
            "findings": [finding_dict(f, finding_occurrences(f, index)) for f in report.findings],
            "selection": selection_dict(report),
            "choices": a.choices,
            "framework": dict(a.framework),  # who built the program: the fixes name its levers
            "ops": [],  # filled below: its records are clean already (a second pass over 80k cells)
            "scopes": scopes_records(report),  # time per framework scope (analyzer/scopes.py)
            "memory_at_peak": memory_at_peak_dict(a.dump.memory_at_peak),
            "warnings": list(a.warnings),
        }
    )
    data["ops"] = ops_records(a.ops)
    return data


def render_json(report, *, indent: int | None = 2) -> str:
    # allow_nan=False: a NaN that slipped past clean() is a bug, not something to emit.
    if indent is None:
        return json.dumps(report_to_dict(report), allow_nan=False, ensure_ascii=False) + "\n"
    return json_text.dumps(report_to_dict(report), indent) + "\n"

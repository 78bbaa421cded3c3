"""What every rule returns, and the few helpers all rules share.

A rule is one module in this folder with a ``RULE_ID`` string, a docstring in four
parts (*What it finds*, *Why it costs time*, *How the cost is estimated*, *Fix*) and
``check(analysis) -> list[Finding]``. Register it in ``registry.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..units import format_bytes, format_percent, format_seconds  # noqa: F401 (the rules' evidence formatting)

HIGH_FRACTION = 0.10  # a finding costing >= 10 % of the step is high severity
MEDIUM_FRACTION = 0.03


@dataclass(frozen=True)
class OpEvidence:
    """One op behind a finding: what it measured against what the roofline predicts."""

    name: str
    measured_s_per_step: float
    predicted_s_per_step: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # 'high' | 'medium' | 'low'
    title: str
    time_s_per_step: float  # what the problem costs now
    est_savings_s_per_step: float  # what the fix should recover (never more than the cost)
    fraction_of_step: float
    confidence: str  # 'high' | 'medium' | 'low'
    ops: tuple[OpEvidence, ...]
    evidence: str  # a sentence with the numbers
    fix: str  # the concrete change: flag, config key, code
    details: dict[str, Any] = field(default_factory=dict)  # rule-specific numbers for charts and JSON


def severity_for(fraction_of_step: float) -> str:
    if fraction_of_step >= HIGH_FRACTION:
        return "high"
    if fraction_of_step >= MEDIUM_FRACTION:
        return "medium"
    return "low"


def make_finding(
    *,
    rule: str,
    title: str,
    time_s_per_step: float,
    est_savings_s_per_step: float,
    step_s: float,
    confidence: str,
    ops: tuple[OpEvidence, ...] | list[OpEvidence],
    evidence: str,
    fix: str,
    details: dict[str, Any] | None = None,
) -> Finding:
    """Build a finding with severity and fraction derived the same way for every rule."""
    savings = min(max(est_savings_s_per_step, 0.0), time_s_per_step)
    fraction = time_s_per_step / step_s if step_s and step_s > 0 and math.isfinite(step_s) else 0.0
    return Finding(
        rule=rule,
        severity=severity_for(fraction),
        title=title,
        time_s_per_step=float(time_s_per_step),
        est_savings_s_per_step=float(savings),
        fraction_of_step=float(fraction),
        confidence=confidence,
        ops=tuple(ops),
        evidence=evidence,
        fix=fix,
        details=dict(details or {}),
    )

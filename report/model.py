"""The report every renderer reads: the analysis, its ranked findings and a summary."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..analyzer.analysis import Analysis
from ..rules.base import Finding
from ..units import format_percent, format_seconds
from ..rules.registry import run_rules


@dataclass(frozen=True)
class Report:
    analysis: Analysis
    findings: tuple[Finding, ...]
    headline: str  # the one sentence a lead would want

    @property
    def summary(self) -> dict:
        a = self.analysis
        return {
            "platform": a.platform,
            "chip": a.chip.name,
            "devices": a.num_devices,
            "hosts": list(a.hosts),
            "run": a.files.run_name,
            "steps": a.steps.count if a.steps is not None else 0,
            "step_s": a.step_s,
            "mfu": a.mfu,
            "breakdown": dict(a.breakdown),
            "headline": self.headline,
        }


def _headline(analysis: Analysis, findings: tuple[Finding, ...]) -> str:
    step = analysis.step_s
    what = "predicted step" if not analysis.measured else "step"
    head = f"{analysis.chip.name}, {analysis.num_devices or 'no'} devices: {what} {format_seconds(step)}"
    if analysis.mfu is not None and math.isfinite(analysis.mfu):
        head += f", MFU {format_percent(analysis.mfu)}"
    if findings:
        top = findings[0]
        head += f"; biggest fix: {top.title} (saves ~{format_seconds(top.est_savings_s_per_step)} per step)"
    else:
        head += "; no findings"
    return head + "."


def build_report(analysis: Analysis) -> Report:
    findings = tuple(run_rules(analysis))
    return Report(analysis=analysis, findings=findings, headline=_headline(analysis, findings))

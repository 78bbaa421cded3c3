"""The one list of rules. A new rule: one new file in this folder plus one line here."""

from __future__ import annotations

from . import exposed_collective, latency_bound_collective, remat_overhead, retiling_copy
from .base import Finding

# Findings are ranked by estimated savings, so the order here does not matter.
RULES = (
    exposed_collective,
    remat_overhead,
    retiling_copy,
    latency_bound_collective,
)


def run_rules(analysis) -> list[Finding]:
    """Every registered rule over one analysis, ranked by estimated step time saved."""
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule.check(analysis))
    return sorted(findings, key=lambda f: (-f.est_savings_s_per_step, -f.time_s_per_step, f.rule))

"""The one list of rules. A new rule: one new file in this folder plus one line here."""

from __future__ import annotations

import importlib

from .base import Finding

# Module names in this folder, in no particular order (findings are ranked by savings).
RULE_MODULES = (
    "exposed_collective",
    "remat_overhead",
    "retiling_copy",
    "latency_bound_collective",
)


def load_rules():
    """The rule modules that exist (so a half-written tree still runs the others)."""
    rules = []
    for name in RULE_MODULES:
        try:
            rules.append(importlib.import_module(f"{__package__}.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise
    return rules


def run_rules(analysis) -> list[Finding]:
    """Every registered rule over one analysis, ranked by estimated step time saved."""
    findings: list[Finding] = []
    for rule in load_rules():
        findings.extend(rule.check(analysis))
    return sorted(findings, key=lambda f: (-f.est_savings_s_per_step, -f.time_s_per_step, f.rule))

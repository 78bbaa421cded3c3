"""The one list of rules. A new rule: one new file in this folder plus one line here."""

from __future__ import annotations

from dataclasses import replace
from importlib import import_module

from .base import LAST, Finding, ModuleRule, Rule
from .claims import resolve_claims
from .selection import Dropped, Selection

# Module names in this folder, one per line. Findings are ranked by estimated savings, so the order here
# only sets the catalogue's order.
_RULE_MODULES = (
    "exposed_collective",
    "exposed_host_transfer",
    "remat_overhead",
    "retiling_copy",
    "latency_bound_collective",
    "input_bound",
    "mxu_padding",
    "materialized_attention",
    "sharding_intensity",
    "straggler_host",
    "hbm_headroom",
    "low_precision",
)

RULES: tuple[Rule, ...] = tuple(ModuleRule(import_module(f".{name}", __package__)) for name in _RULE_MODULES)


RULE_IDS: tuple[str, ...] = tuple(rule.id for rule in RULES)
# Which finding keeps an op two rules name (claims.py): each rule's declared PRECEDENCE, lower first.
PRECEDENCE: dict[str, float] = {rule.id: rule.precedence for rule in RULES if rule.precedence != LAST}


def run_rules(analysis, rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    """The rules over one analysis, each op's time counted by one finding (``claims``), ranked by estimated
    step time saved."""
    return run_selected(analysis, Selection(), rules)[0]


def run_selected(analysis, selection: Selection,
                 rules: tuple[Rule, ...] = RULES) -> tuple[list[Finding], list[Dropped]]:
    """``run_rules`` keeping what ``selection`` keeps: (ranked findings, dropped ones). Dropped findings
    leave before the accounting, so the kept ones count every op they explain, each op once."""
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(rule.check(analysis))
    if analysis.unstable_steps:  # a saving measured on unsteady steps may not repeat
        findings = [replace(f, confidence="low") for f in findings]
    kept, dropped = selection.split(findings)
    kept = resolve_claims(kept, {rule.id: rule.precedence for rule in rules})
    return sorted(kept, key=lambda f: (-f.est_savings_s_per_step, -f.time_s_per_step, f.rule)), dropped

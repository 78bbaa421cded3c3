"""The rule contract: what a rule is, what it returns, and the helpers every rule shares.

A rule is one module in this folder with a ``RULE_ID`` string, a docstring in five parts (*What it
finds*, *Why it costs time*, *How the cost is estimated*, *Fix*, *Details*; ``catalog.py`` parses them)
and ``check(analysis) -> list[Finding]``. It reads the analysis' tables only: no parsing, no file I/O.
Registered by one line in ``registry.py``, which wraps the module in a :class:`ModuleRule`; anything
with ``id``, ``doc`` and ``check`` satisfies :class:`Rule` the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..units import format_bytes, format_percent, format_seconds  # noqa: F401 (the rules' evidence formatting)

if TYPE_CHECKING:
    from ..analyzer.analysis import Analysis

BENEFITS = ("step_time", "throughput")
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
class OpClaim:
    """An op whose time a finding counts: ``s_per_step`` is the part of the op's time the finding's cost
    includes (e.g. the exposed wait of a collective). ``rules.claims`` gives each op to one finding.
    Identified by the ops table's key (module, program id, op name), which holds in both modes (``op_id``
    is -1 without a trace)."""

    module: str
    program_id: str
    op_name: str
    s_per_step: float

    @property
    def op(self) -> tuple[str, str, str]:
        return self.module, self.program_id, self.op_name


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
    details: dict[str, Any] = field(default_factory=dict)  # rule-specific numbers, keys in the rule's docstring
    kind: str = ""  # which of the rule's findings: e.g. the transfer kind; '' for a rule with one finding
    main_op: str = ""  # the op a per-op finding is about; '' when the finding sums a class of ops over the step
    lever: str = ""  # what the fix changes, as the saving prices it: 'by <lever>' in the headline
    # 'step_time': the fix shortens the step as it is; 'throughput': it buys more samples per second (a bigger
    # batch, lower precision), an estimate to confirm by measuring
    benefit: str = "step_time"
    claims: tuple[OpClaim, ...] = ()  # every op the cost counts (not only the ten in ``ops``)
    related: tuple[tuple[str, str], ...] = ()  # (op name, key of the finding that counts it): set by rules.claims

    @property
    def key(self) -> str:
        """``rule:kind:main_op``: the same problem in two reports has the same key (compare, baselines).

        No program ids or ranks in it, so it survives recompiles; unique within one report.
        Split with ``key.split(":", 2)`` (rule ids and kinds hold no ':'; op names may).
        """
        return f"{self.rule}:{self.kind}:{self.main_op}"

    def __repr__(self) -> str:  # its claims and details can run to many kB: one line (the JSON has all)
        title = self.title if len(self.title) <= 80 else self.title[:79] + "…"
        return (f"<Finding {self.key} [{self.severity}] saves {format_seconds(self.est_savings_s_per_step)}/step "
                f"({len(self.ops)} ops): {title!r}>")


@runtime_checkable
class Rule(Protocol):
    """What the registry holds and ``run_rules`` calls."""

    @property
    def id(self) -> str: ...  # stable, public: the JSON's finding 'rule'

    @property
    def doc(self) -> str: ...  # the five-part docstring the catalogue reads

    def check(self, analysis: Analysis) -> list[Finding]: ...


@dataclass(frozen=True)
class ModuleRule:
    """A rule written as a module (``RULE_ID``, docstring, ``check``), seen as a :class:`Rule`."""

    module: ModuleType

    @property
    def id(self) -> str:
        return self.module.RULE_ID

    @property
    def doc(self) -> str:
        return self.module.__doc__ or ""

    def check(self, analysis: Analysis) -> list[Finding]:
        return self.module.check(analysis)


def op_claims(ops, seconds) -> tuple[OpClaim, ...]:
    """One claim per row of ``ops`` (rows of the ops table) with its ``seconds`` (unknown counts 0)."""
    return tuple(OpClaim(str(m), str(p), str(n), float(s) if s == s else 0.0)
                 for m, p, n, s in zip(ops["module"], ops["program_id"], ops["op_name"], seconds))


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
    kind: str = "",
    main_op: str = "",
    lever: str = "",
    claims: tuple[OpClaim, ...] | list[OpClaim] = (),
    benefit: str = "step_time",
) -> Finding:
    """Build a finding with severity and fraction derived the same way for every rule.

    The saving is never more than the cost, nor than the time of the ops claimed (when any are)."""
    if benefit not in BENEFITS:
        raise ValueError(f"benefit {benefit!r} is not one of {BENEFITS}")
    savings = min(max(est_savings_s_per_step, 0.0), time_s_per_step)
    if claims:
        savings = min(savings, sum(c.s_per_step for c in claims))
    fraction = time_s_per_step / step_s if step_s and step_s > 0 and math.isfinite(step_s) else 0.0
    severity = severity_for(fraction)
    if benefit == "throughput" and severity == "high":
        severity = "medium"  # an option with a numerics or memory trade-off, not a defect of the step
    return Finding(
        rule=rule,
        severity=severity,
        title=title,
        time_s_per_step=float(time_s_per_step),
        est_savings_s_per_step=float(savings),
        fraction_of_step=float(fraction),
        confidence=confidence,
        ops=tuple(ops),
        evidence=evidence,
        fix=fix,
        details=dict(details or {}),
        kind=kind,
        main_op=main_op,
        lever=lever,
        claims=tuple(claims),
        benefit=benefit,
    )

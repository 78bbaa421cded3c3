"""The rule contract: what a rule is, what it returns, and the helpers every rule shares.

A rule is one module in this folder with a ``RULE_ID`` string, a docstring in five parts (*What it
finds*, *Why it costs time*, *How the cost is estimated*, *Fix*, *Details*; ``catalog.py`` parses them),
its ``PRECEDENCE`` (which finding keeps an op two rules name: ``claims.py``) and, first numbers then words:

- ``measure(analysis) -> Numbers | list[Numbers] | None``: a frozen dataclass per finding whose public
  fields are the documented *Details* (in their order, with their units) and whose ``priced`` field is a
  :class:`Priced` (cost, saving, ops, claims: what every finding carries);
- ``title(numbers)``, ``evidence(numbers)`` and ``fix(numbers, target)``: the words, from those numbers only
  (``target``: the :class:`Target` platform and chip the fix must run on);
- ``check(analysis)``: ``compose(RULE_ID, measure, title, evidence, fix, analysis)``.

It reads the analysis' tables only: no parsing, no file I/O. Registered by one line in ``registry.py``,
which wraps the module in a :class:`ModuleRule`; anything with ``id``, ``doc``, ``precedence`` and
``check`` satisfies :class:`Rule` the same way.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..units import format_bytes, format_percent, format_seconds  # noqa: F401 (the rules' evidence formatting)

if TYPE_CHECKING:
    from ..analyzer.analysis import Analysis
    from ..analyzer.chips.catalog import Chip

BENEFITS = ("step_time", "throughput")
# Severity is what the fix can save, as a share of the step: high >= 10 %, medium >= 3 %, low above
# INFO_FRACTION; below it (nothing to save on this capture) a finding is a note, `info`, that no gate counts.
HIGH_FRACTION = 0.10
MEDIUM_FRACTION = 0.03
INFO_FRACTION = 0.001
SEVERITIES = ("high", "medium", "low", "info")


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
    severity: str  # 'high' | 'medium' | 'low' by the saving's share of the step; 'info': nothing to save here
    title: str
    time_s_per_step: float  # what the problem costs now
    est_savings_s_per_step: float  # what applying this fix alone should recover (never more than the cost)
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
    # Its share of the recoverable total: the saving of the ops no more specific finding counts (rules.claims);
    # equal to est_savings_s_per_step when it shares no op. The total sums these, the ranking the savings alone.
    counted_s_per_step: float | None = None

    @property
    def counted(self) -> float:
        return self.est_savings_s_per_step if self.counted_s_per_step is None else self.counted_s_per_step

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


# Keys a finding had under an earlier rule id (host-offload waits were an `exposed-collective` kind): an old
# baseline or report still names the same problem.
RENAMED_KEYS = {"exposed-collective:host-offload:": "exposed-host-transfer:host-offload:"}


def current_key(key: str) -> str:
    """``key`` as this version spells it (see RENAMED_KEYS)."""
    for old, new in RENAMED_KEYS.items():
        if key.startswith(old):
            return new + key[len(old):]
    return key


@runtime_checkable
class Rule(Protocol):
    """What the registry holds and ``run_rules`` calls."""

    @property
    def id(self) -> str: ...  # stable, public: the JSON's finding 'rule'

    @property
    def doc(self) -> str: ...  # the five-part docstring the catalogue reads

    @property
    def precedence(self) -> float: ...  # lower keeps a shared op first (``claims.resolve_claims``)

    def check(self, analysis: Analysis) -> list[Finding]: ...


LAST = float("inf")  # the precedence of a rule that claims no op another rule might name


@dataclass(frozen=True)
class ModuleRule:
    """A rule written as a module (``RULE_ID``, ``PRECEDENCE``, docstring, ``check``), seen as a :class:`Rule`."""

    module: ModuleType

    @property
    def id(self) -> str:
        return self.module.RULE_ID

    @property
    def doc(self) -> str:
        return self.module.__doc__ or ""

    @property
    def precedence(self) -> float:
        return getattr(self.module, "PRECEDENCE", LAST)

    def check(self, analysis: Analysis) -> list[Finding]:
        return self.module.check(analysis)


def op_claims(ops, seconds) -> tuple[OpClaim, ...]:
    """One claim per row of ``ops`` (rows of the ops table) with its ``seconds`` (unknown counts 0)."""
    return tuple(OpClaim(str(m), str(p), str(n), float(s) if s == s else 0.0)
                 for m, p, n, s in zip(ops["module"], ops["program_id"], ops["op_name"], seconds))


def severity_for(saving_share: float) -> str:
    """Severity from what the fix saves, as a share of the step."""
    if saving_share >= HIGH_FRACTION:
        return "high"
    if saving_share >= MEDIUM_FRACTION:
        return "medium"
    return "low" if saving_share >= INFO_FRACTION else "info"


def make_finding(rule: str, priced: Priced, *, title: str, evidence: str, fix: str,
                 details: dict[str, Any] | None = None) -> Finding:
    """Build a finding with severity and fraction derived the same way for every rule.

    The saving is never more than the cost, nor than the time of the ops claimed (when any are), nor than the
    step; ``fraction_of_step`` is at most 1."""
    if priced.benefit not in BENEFITS:
        raise ValueError(f"benefit {priced.benefit!r} is not one of {BENEFITS}")
    cost, step_s = priced.time_s_per_step, priced.step_s
    savings = min(max(priced.est_savings_s_per_step, 0.0), cost)
    if priced.claims:
        savings = min(savings, sum(c.s_per_step for c in priced.claims))
    known_step = bool(step_s and step_s > 0 and math.isfinite(step_s))
    # A share of the step, so at most all of it: a cost past the step is a model's hypothetical (padded MXU work
    # of a degenerate dot the roofline step does not hold), not more time than the step has.
    if known_step:  # no fix saves more than the whole step, however the cost was summed (overlapping lines)
        savings = min(savings, step_s)
    fraction = min(cost / step_s, 1.0) if known_step else 0.0
    severity = severity_for(savings / step_s if known_step else 0.0)
    if priced.benefit == "throughput" and severity == "high":
        severity = "medium"  # an option with a numerics or memory trade-off, not a defect of the step
    return Finding(
        rule=rule, severity=severity, title=title, time_s_per_step=float(cost), est_savings_s_per_step=float(savings),
        fraction_of_step=float(fraction), confidence=priced.confidence, ops=tuple(priced.ops), evidence=evidence,
        fix=fix, details=dict(details or {}), kind=priced.kind, main_op=priced.main_op, lever=priced.lever,
        claims=tuple(priced.claims), benefit=priced.benefit, counted_s_per_step=float(savings))


# ---- numbers, then words ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a fix must run on: the platform of the capture (``tpu``, ``gpu``, ``cpu``; ``hlo`` for a dump alone)
    and the chip the numbers were priced on."""

    platform: str
    chip: Chip
    framework: str = "unknown"  # jax | pytorch_xla | tensorflow | unknown (read as JAX): whose levers to name
    libraries: tuple = ()  # flax, maxtext, transformer_engine: found in the program

    @property
    def for_cpu(self) -> bool:
        """The fix runs on a CPU: a CPU capture, or a dump priced on a CPU chip (levers.target)."""
        from .levers import target  # levers builds on this module

        return target(self.platform, self.chip) == "cpu"

    @classmethod
    def of(cls, analysis: Analysis) -> Target:
        fw = getattr(analysis, "framework", None) or {}
        return cls(analysis.platform, analysis.chip, fw.get("name", "unknown"), tuple(fw.get("libraries", ())))


@dataclass(frozen=True)
class Priced:
    """The numbers every finding carries, whatever its rule (:func:`make_finding`'s arguments)."""

    time_s_per_step: float  # what the problem costs now
    est_savings_s_per_step: float  # what the fix should recover
    step_s: float
    confidence: str
    ops: tuple[OpEvidence, ...]
    claims: tuple[OpClaim, ...] = ()
    kind: str = ""
    main_op: str = ""
    lever: str = ""
    benefit: str = "step_time"


def details_of(numbers) -> dict[str, Any]:
    """A rule's numbers as the finding's ``details``: its fields in order, without ``priced`` and without
    the fields declared ``field(metadata={"detail": False})`` (inputs of the words that are no detail)."""
    return {f.name: getattr(numbers, f.name) for f in dataclasses.fields(numbers)
            if f.name != "priced" and f.metadata.get("detail", True)}


def compose(rule_id: str, measure, title, evidence, fix, analysis: Analysis) -> list[Finding]:
    """A rule's ``check``: its measured numbers (none, one or a list), each put into words."""
    measured = measure(analysis)
    if measured is None:
        return []
    target = Target.of(analysis)
    said = memory_words if target.for_cpu else str
    return [make_finding(rule_id, dataclasses.replace(n.priced, lever=said(n.priced.lever)), title=said(title(n)),
                         evidence=said(evidence(n)), fix=said(fix(n, target)), details=details_of(n))
            for n in (measured if isinstance(measured, list) else [measured])]


_HBM = re.compile(r"\bHBM\b")


def memory_words(text: str) -> str:
    """A CPU has no HBM: its main memory is 'memory' ('more HBM per device' -> 'more memory per device')."""
    return _HBM.sub("memory", text)


def is_nan(x) -> bool:
    """True for a NaN (an unknown number in the tables), numpy's included; False for anything else, None too."""
    try:
        return bool(x != x)
    except (TypeError, ValueError):
        return False


def time_column(analysis: Analysis) -> str:
    """The ops column of seconds per step a rule prices with: measured when there is a trace, else predicted."""
    return "measured_s_per_step" if analysis.measured else "predicted_s_per_step"


def times_are(analysis: Analysis) -> str:
    """``measured`` or ``predicted``: what a finding's seconds are (its ``times_are`` detail)."""
    return "measured" if analysis.measured else "predicted"


def seconds_per_step(ops, analysis: Analysis):
    """Each op's seconds per step, measured or predicted (unknown counts 0): the time a finding can claim."""
    return ops[time_column(analysis)].fillna(0.0)


def float_or_none(x) -> float | None:
    """``x`` as a float, or None when it is unknown (None or NaN): how a details number or an op's prediction
    reads in the JSON."""
    return None if x is None or is_nan(x) else float(x)

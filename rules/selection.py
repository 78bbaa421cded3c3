"""Which findings a report keeps: rule selection (``--select``/``--ignore``) and a baseline of accepted findings.

Like a linter's: ``select`` names the only rules to report, ``ignore`` rules to leave out, and a baseline
lists finding keys (``rule:kind:main_op``, :attr:`Finding.key`) already accepted, so a CI gate trips only on
new ones. Left-out findings are dropped *before* the op accounting (``rules.claims``): the kept findings
then count every op they explain, and the recoverable total is still each op counted once. The report
lists every left-out finding with why (:class:`Dropped`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from .base import Finding, current_key


@dataclass(frozen=True)
class Dropped:
    """A finding the report leaves out, and why ('rule in --ignore', 'accepted in baseline FILE', ...)."""

    finding: Finding
    why: str
    by: str  # 'select' | 'ignore' | 'baseline'


@dataclass(frozen=True)
class Selection:
    """What to keep. ``select`` None: every rule. ``*_from``: where each came from, for the report's 'why'
    (``'--select'``, ``'pyproject.toml [tool.xladiag]'``...)."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    baseline: frozenset[str] = frozenset()
    baseline_file: str | None = None
    select_from: str = "--select"
    ignore_from: str = "--ignore"

    def why_dropped(self, finding: Finding) -> tuple[str, str] | None:
        """(by, why) when the finding is left out, else None."""
        if self.select is not None and finding.rule not in self.select:
            return "select", f"rule not in {self.select_from}"
        if finding.rule in self.ignore:
            return "ignore", f"rule in {self.ignore_from}"
        if finding.key in self.baseline or finding.key in {current_key(k) for k in self.baseline}:
            where = f" {self.baseline_file}" if self.baseline_file else ""
            return "baseline", f"accepted in baseline{where}"
        return None

    def split(self, findings: list[Finding]) -> tuple[list[Finding], list[Dropped]]:
        """(kept, dropped), each in the order given."""
        kept, dropped = [], []
        for finding in findings:
            reason = self.why_dropped(finding)
            if reason is None:
                kept.append(finding)
            else:
                dropped.append(Dropped(finding, reason[1], reason[0]))
        return kept, dropped

    def rules_left_out(self, rule_ids: tuple[str, ...]) -> dict[str, str]:
        """Rule id -> why, for the registered rules the selection leaves out entirely."""
        out = {}
        for rule in rule_ids:
            if self.select is not None and rule not in self.select:
                out[rule] = f"not in {self.select_from}"
            elif rule in self.ignore:
                out[rule] = f"in {self.ignore_from}"
        return out


def parse_rule_list(value, option: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    """``'a,b'`` or ``['a', 'b']`` -> ('a', 'b'), every id checked against ``valid`` (UsageError, one line)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    if not all(isinstance(v, str) for v in items):
        raise UsageError(f"{option}: expected rule ids as text, got {value!r}")
    ids = tuple(dict.fromkeys(v.strip() for v in items if v.strip()))
    unknown = [v for v in ids if v not in valid]
    if unknown:
        raise UsageError(f"{option}: unknown rule {', '.join(map(repr, unknown))}; valid rules: {', '.join(valid)}")
    return ids


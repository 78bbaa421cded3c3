"""Which findings a report keeps: rule selection (``--select``/``--ignore``) and a baseline of accepted findings.

Like a linter's: ``select`` names the only rules to report, ``ignore`` rules to leave out, and a baseline
lists finding keys (``rule:kind:main_op``, :attr:`Finding.key`) already accepted, so a CI gate trips only on
new ones. An entry may carry the finding's size band (``KEY band=-5``: the power of two its saving share of
the step was in, :func:`size_band`): the finding stays accepted while it stays in that band or below, and is
new again once it grows past it. An entry without a band (baselines written before bands) accepts any size.
Left-out findings are dropped *before* the op accounting (``rules.claims``): the kept findings
then count every op they explain, and the recoverable total is still each op counted once. The report
lists every left-out finding with why (:class:`Dropped`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import UsageError
from .base import Finding, current_key

BAND = " band="  # between a baseline entry's key and its size band
LOWEST_BAND = -20  # a saving under 2**-20 of the step (or none): the smallest band
_BAND_VALUE = re.compile(r"-?\d+")


def band_of(savings_s: float, time_s: float, fraction_of_step: float) -> int:
    """floor(log2(saving share of the step)): -4 for a saving of 1/16 up to 1/8 of the step. The share is the
    saving over the step (the step is time / fraction); none, or under 2**-20: LOWEST_BAND."""
    try:
        share = float(savings_s) * float(fraction_of_step) / float(time_s) if time_s else 0.0
    except (TypeError, ValueError):
        share = 0.0
    return max(LOWEST_BAND, math.floor(math.log2(share))) if share > 0 and math.isfinite(share) else LOWEST_BAND


def size_band(finding: Finding) -> int:
    """The finding's size band (:func:`band_of`)."""
    return band_of(finding.est_savings_s_per_step, finding.time_s_per_step, finding.fraction_of_step)


def baseline_entry(finding: Finding) -> str:
    """What a baseline records to accept this finding at its size: ``KEY band=N``."""
    return f"{finding.key}{BAND}{size_band(finding)}"


def parse_entry(entry: str) -> tuple[str, int | None]:
    """(key, band) of a baseline entry; band None when it has none (accepts any size)."""
    key, sep, band = entry.rpartition(BAND)
    if sep and _BAND_VALUE.fullmatch(band.strip()):
        return current_key(key), int(band)
    return current_key(entry), None


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
    notes: tuple[str, ...] = ()  # warnings about the selection (a baseline without size bands), for the report

    def accepted(self) -> dict[str, int | None]:
        """Baseline key -> the largest band it is accepted at (None: any size)."""
        out: dict[str, int | None] = {}
        for key, band in map(parse_entry, self.baseline):
            if key in out and (out[key] is None or band is None):
                out[key] = None
            else:
                out[key] = band if key not in out else max(out[key], band)
        return out

    def why_dropped(self, finding: Finding) -> tuple[str, str] | None:
        """(by, why) when the finding is left out, else None."""
        if self.select is not None and finding.rule not in self.select:
            return "select", f"rule not in {self.select_from}"
        if finding.rule in self.ignore:
            return "ignore", f"rule in {self.ignore_from}"
        accepted = self.accepted() if self.baseline else {}
        if finding.key in accepted and (accepted[finding.key] is None or size_band(finding) <= accepted[finding.key]):
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


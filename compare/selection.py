"""One rule selection for both sides of a comparison, so a finding left out on one side is not "appeared".

A JSON report records its own selection (``selection``: rules left out, findings dropped with why); a capture
is diagnosed with the comparison's ``--select/--ignore/--baseline`` (or ``[tool.xladiag]``). What either side
or the comparison left out is left out of both: rules by id, accepted findings by key. When the two sides'
recorded selections differ, the comparison says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..rules.registry import RULE_IDS
from ..rules.selection import Selection, parse_entry


@dataclass(frozen=True)
class Recorded:
    """What a report's own selection left out: rule ids, and accepted finding keys (its baseline)."""

    rules: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()

    def describe(self) -> str:
        parts = ([f"rules {', '.join(sorted(self.rules))}"] if self.rules else []) + \
            ([f"{len(self.keys)} baseline finding(s)"] if self.keys else [])
        return " and ".join(parts) or "nothing"


def recorded(report: dict) -> Recorded:
    """The selection a JSON report was written with (nothing for a report from before selections)."""
    chosen = report.get("selection") or {}
    rules = frozenset(r.get("rule") for r in chosen.get("rules_left_out") or [] if r.get("rule"))
    keys = frozenset(f.get("key") for f in chosen.get("ignored_findings") or []
                     if f.get("key") and f.get("rule") not in rules)
    return Recorded(rules, keys)


def given(selection: Selection) -> Recorded:
    """What the comparison's own options leave out."""
    return Recorded(frozenset(selection.rules_left_out(RULE_IDS)),
                    frozenset(parse_entry(e)[0] for e in selection.baseline))  # keys: a band is the baseline's


def for_captures(selection: Selection, recorded_sides: list[Recorded]) -> Selection:
    """The selection a capture side is diagnosed with: the comparison's, plus what a JSON side left out."""
    rules = frozenset().union(*(r.rules for r in recorded_sides)) - given(selection).rules
    keys = frozenset().union(*(r.keys for r in recorded_sides))
    if not rules and not keys:
        return selection
    return replace(selection, ignore=tuple(dict.fromkeys((*selection.ignore, *sorted(rules)))),
                   baseline=selection.baseline | keys, ignore_from=f"{selection.ignore_from} or the other report")


def align(base: dict, new: dict, own: tuple[Recorded, Recorded],
          selection: Selection) -> tuple[dict, dict, dict, list[str]]:
    """(base, new) with the same findings left out of both, the ``selection`` record of the comparison JSON,
    and a warning when the sides' own selections differ. ``own``: per side, what its JSON report recorded, or
    for a capture what the comparison's options left out (:func:`given`)."""
    b, n = own
    g = given(selection)
    rules, keys = b.rules | n.rules | g.rules, b.keys | n.keys | g.keys

    def kept(report: dict) -> tuple[dict, int]:
        findings = report.get("findings") or []
        keep = [f for f in findings if f.get("rule") not in rules and f.get("key") not in keys]
        return dict(report, findings=keep), len(findings) - len(keep)

    (base, b_cut), (new, n_cut) = kept(base), kept(new)
    warnings = []
    if b != n:
        warnings.append(f"the two sides were diagnosed with different rule selections (base left out {b.describe()}, "
                        f"new {n.describe()}): findings are compared without what either left out")
    record = {"rules_left_out": sorted(rules), "baseline_keys": len(keys),
              "findings_left_out": {"base": b_cut, "new": n_cut}, "sides_differ": b != n}
    return base, new, record, warnings

"""CI gates: thresholds a report is held to, each evaluated into a :class:`Gate` (value, verdict, one line).

The CLI's ``--fail-on``/``--max-*``/``--min-*`` options and ``Report.with_gates`` build them; the JSON and
Markdown reports list them; a tripped gate exits 3 and, on GitHub Actions, is one ``::error::`` line.
``Gate`` and :func:`parse_share` are generic so that other verdicts (compare's ``--fail-on-regression``)
reuse them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import UsageError

_RANK = {"info": -1, "low": 0, "medium": 1, "high": 2}  # an info note never trips --fail-on

# What each gate measures, in the words of `diagnose --help` and the report (the one place they are written).
MEASURES = {
    "fail-on": ("the number of findings of at least this severity "
                "(high: saves >= 10% of the step, medium: >= 3%; notes that save nothing never count)"),
    "max-exposed-collective": (
        "the time per step devices wait on collectives (all-gather, reduce-scatter, all-reduce, all-to-all, "
        "collective-permute, send/recv) not hidden behind compute, as a share of the step (the exposed-collective "
        "rule's findings; a kind under 0.5% of the step counts 0; host-offload copies are not counted)"),
    "max-exposed-host-transfer": (
        "the time per step devices wait on host-offload copies (device <-> pinned host memory over PCIe) not "
        "hidden behind compute, as a share of the step (the exposed-host-transfer rule's finding)"),
    "min-mfu": "MFU: model FLOPs per step / (step time x chip peak FLOP/s); an unknown MFU trips the gate",
    "fail-on-regression": (
        "diagnose compare: the change of the mean step time (new / base - 1), counted only when the step is slower "
        "beyond noise (Welch's t-test p < 0.05 and a change above the step-to-step spread)"),
}


@dataclass(frozen=True)
class Gate:
    """One evaluated threshold. ``value`` is what was measured (a share, a count; None when unknown)."""

    name: str  # the option without dashes: 'max-exposed-collective'
    threshold: float | str
    value: float | int | None
    tripped: bool
    message: str  # one line, read on stderr, in ::error:: lines and in the report
    unit: str = "fraction"  # of ``value`` (and a numeric ``threshold``): 'fraction' (0.10 is 10 %) or 'count'

    @property
    def option(self) -> str:
        return f"--{self.name}"

    @property
    def measures(self) -> str:
        return MEASURES.get(self.name, "")

    def to_dict(self) -> dict:
        return {"name": self.name, "option": self.option, "measures": self.measures, "threshold": self.threshold,
                "value": self.value, "unit": self.unit, "tripped": self.tripped, "message": self.message}

    def shown(self, value) -> str:
        return shown(value, self.unit)

    def __repr__(self) -> str:
        return f"<Gate {self.option} {'TRIPPED' if self.tripped else 'passed'}: {self.message}>"


_SHARE = re.compile(r"\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<percent>%?)\s*")


def parse_share(text: str, option: str) -> float:
    """A share of the step written ``10%`` or ``0.10`` as a fraction in [0, 1].

    A bare number must be a fraction below 1: ``1`` (100 % or 1 %?) and any bare number >= 1 is refused
    with a one-line :class:`UsageError` naming ``option``.
    """
    match = _SHARE.fullmatch(str(text))
    if not match:
        raise UsageError(f"{option} {text!r}: not a share of the step; write it as 10% or 0.10")
    number = float(match["number"])
    if match["percent"]:
        fraction = number / 100.0
        if not (math.isfinite(fraction) and fraction <= 1.0):
            raise UsageError(f"{option} {text!r}: a share is at most 100%")
        return fraction
    if number >= 1.0:
        raise UsageError(f"{option} {text!r} is ambiguous: write {match['number']}% for a percentage, "
                         "or a fraction below 1 (0.10 is 10%)")
    return number


def _exposed_share(report, host_offload: bool) -> float:
    from ..rules import exposed_collective, exposed_host_transfer  # lazy: keeps `--help` instant

    # Each gate reads its own rule: waits on host copies, waits on collectives.
    rule = exposed_host_transfer.RULE_ID if host_offload else exposed_collective.RULE_ID
    exposed = sum(f.time_s_per_step for f in report.findings if f.rule == rule)
    step = report.analysis.step_s
    return exposed / step if step and step > 0 else 0.0


def _pct(fraction: float) -> str:
    """Exact enough to compare with the threshold: 5.0%, 97.0%, 0.028%."""
    return f"{fraction:.1%}" if fraction == 0 or abs(fraction) >= 0.001 else f"{fraction * 100:.2g}%"


def shown(value, unit: str = "fraction") -> str:
    """A gate's ``value`` or ``threshold`` as the reports write it: 10.0%, 3, high, unknown."""
    if value is None:
        return "unknown"
    return _pct(value) if unit == "fraction" and isinstance(value, (int, float)) else str(value)


def _share_gate(name: str, what: str, value: float, limit: float) -> Gate:
    tripped = value > limit
    sign = ">" if tripped else "<="
    return Gate(name, limit, value, tripped, f"{what} {_pct(value)} of the step {sign} {_pct(limit)}")


def evaluate_gates(report, *, fail_on: str | None = None, max_exposed_collective: float | None = None,
                   max_exposed_host_transfer: float | None = None, min_mfu: float | None = None) -> tuple[Gate, ...]:
    """Every gate given (None: not evaluated), in option order; ``[g for g in gates if g.tripped]`` fail."""
    gates: list[Gate] = []
    if fail_on is not None:
        if fail_on not in _RANK:
            raise UsageError(f"--fail-on {fail_on!r}: one of high, medium, low")
        worst = [f for f in report.findings if _RANK[f.severity] >= _RANK[fail_on]]
        message = (f"{len(worst)} finding(s) of severity >= {fail_on}, first: [{worst[0].severity}] {worst[0].title}"
                   if worst else f"no finding of severity >= {fail_on}")
        gates.append(Gate("fail-on", fail_on, len(worst), bool(worst), message, unit="count"))
    if max_exposed_collective is not None:
        gates.append(_share_gate("max-exposed-collective", "exposed collective time",
                                 _exposed_share(report, host_offload=False), max_exposed_collective))
    if max_exposed_host_transfer is not None:
        gates.append(_share_gate("max-exposed-host-transfer", "exposed host-transfer time",
                                 _exposed_share(report, host_offload=True), max_exposed_host_transfer))
    if min_mfu is not None:
        mfu = report.analysis.mfu
        tripped = mfu is None or not math.isfinite(mfu) or mfu < min_mfu
        shown = "unknown" if mfu is None or not math.isfinite(mfu) else _pct(mfu)
        gates.append(Gate("min-mfu", min_mfu, mfu if mfu is None or math.isfinite(mfu) else None, tripped,
                          f"MFU {shown} {'<' if tripped else '>='} {_pct(min_mfu)}"))
    return tuple(gates)

"""CI gates: which thresholds a report trips (each gate one line)."""

from __future__ import annotations

_RANK = {"low": 0, "medium": 1, "high": 2}


def evaluate_gates(report, *, fail_on=None, max_exposed_collective=None, min_mfu=None) -> list[str]:
    tripped: list[str] = []
    if fail_on is not None:
        worst = [f for f in report.findings if _RANK[f.severity] >= _RANK[fail_on]]
        if worst:
            tripped.append(f"{len(worst)} finding(s) of severity >= {fail_on}, first: [{worst[0].severity}] {worst[0].title}")
    if max_exposed_collective is not None:
        from ..rules.exposed_collective import RULE_ID as EXPOSED_TRANSFERS  # lazy: keeps `--help` instant

        # Host-offload waits share the exposed-collective rule (their finding's kind) but are not collectives.
        exposed = sum(f.time_s_per_step for f in report.findings
                      if f.rule == EXPOSED_TRANSFERS and f.kind != "host-offload")
        step = report.analysis.step_s
        share = exposed / step if step and step > 0 else 0.0
        if share > max_exposed_collective:
            tripped.append(f"exposed collective time {share:.1%} of the step > {max_exposed_collective:.1%}")
    if min_mfu is not None:
        mfu = report.analysis.mfu
        if mfu is None or mfu < min_mfu:
            shown = "unknown" if mfu is None else f"{mfu:.3f}"
            tripped.append(f"MFU {shown} < {min_mfu:.3f}")
    return tripped

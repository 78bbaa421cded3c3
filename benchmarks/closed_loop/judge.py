"""Judge a recorded closed-loop case: diagnose its `before`, set the claim against the measured saving.

A case folder holds `before/` (capture and dump) and `timing.json` (run.py: both variants timed without the
profiler, interleaved). The claim is the rule's saving as a share of the profiled step; the measured saving
is a share of the unprofiled step (the profiler slows a CPU step 1.2-2.8x). A case passes when the ratio is
within [0.5, 2] (or both are under 3 % of the step) and the finding's fix names the lever `after` applied; a
false-positive case passes when the claim is under 1 %. tests/test_closed_loop_claims.py runs this on the
cases kept in sample_profiles/closed_loop.
"""

from __future__ import annotations

import json
from pathlib import Path

PASS_RATIO, SMALL_SHARE, FALSE_POSITIVE_SHARE = (0.5, 2.0), 0.03, 0.01


def claim(report: dict, rule: str) -> tuple[float, str]:
    """The rule's claimed saving (its findings' savings alone, at most the step) and the first one's fix text."""
    mine = [f for f in report["findings"] if f["rule"] == rule]
    total = sum(f.get("est_savings_s_per_step") or 0.0 for f in mine)
    return min(total, report["step_s"] or total), (mine[0]["fix"] if mine else "")


def judge(case_dir: Path) -> dict:
    """Diagnose a recorded case and set its claim against its timing."""
    import xladiag

    timing = json.loads((case_dir / "timing.json").read_text())
    report = xladiag.diagnose(case_dir / "before").to_dict()
    claimed_s, fix_text = claim(report, timing["rule"])
    claimed = claimed_s / report["step_s"] if report["step_s"] else 0.0
    measured = timing["saving_s"] / timing["before_step_s"]
    lever_named = not timing.get("lever") or not claimed_s or timing["lever"] in fix_text
    if timing["false_positive"]:
        ok = claimed < FALSE_POSITIVE_SHARE
    else:
        ok = lever_named and (max(claimed, measured) < SMALL_SHARE
                              or (measured > 0 and PASS_RATIO[0] <= claimed / measured <= PASS_RATIO[1]))
    return {"case": timing["case"], "rule": timing["rule"], "false_positive": timing["false_positive"],
            "claimed_share": claimed, "claimed_s": claimed_s, "profiled_step_s": report["step_s"],
            "measured_share": measured, "measured_s": timing["saving_s"],
            "measured_interval_s": timing["saving_interval_90_s"], "unprofiled_step_s": timing["before_step_s"],
            "ratio": claimed / measured if measured > 0 else None, "lever_named": lever_named, "pass": ok,
            "fix_text": fix_text}


def table(rows: list[dict]) -> str:
    lines = ["| case | rule | claimed (share of step) | measured saving (90 % interval) | ratio | pass |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = (x / r["unprofiled_step_s"] for x in r["measured_interval_s"])
        kind = " (false positive)" if r["false_positive"] else ""
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(f"| {r['case']}{kind} | {r['rule']} | {r['claimed_share']:.1%} | {r['measured_share']:.1%} "
                     f"({lo:.1%} to {hi:.1%}) | {ratio} | {'yes' if r['pass'] else 'NO'} |")
    return "\n".join(lines)

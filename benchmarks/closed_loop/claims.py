"""Claim against measured saving, per recorded before/after pair: does a finding's saving hold once its fix
is applied?

Each pair folder in sample_profiles/ holds `before/` and `after/` (the same program with exactly the fix a
finding names). The measured saving is `timing.json`'s (both programs timed without the profiler,
interleaved; make_gpu_pair.py writes it) where the pair has one, else the step change `diagnose compare`
measures on the two profiled captures. Prints a Markdown table: case, rule, claimed, measured, ratio.

    python benchmarks/closed_loop/claims.py            # every pair in sample_profiles/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"
# make_gpu_pair.py's pairs -> the rule whose fix "after" applies (a miss is a row too: claimed 0).
PAIR_RULE = {"attention": "materialized-attention", "remat": "remat-overhead"}


def pairs() -> list[Path]:
    return sorted(p for p in SAMPLES.iterdir() if (p / "before").is_dir() and (p / "after").is_dir())


def rows(pair: Path) -> list[tuple]:
    """(case, rule, claimed s, measured s, source) for each base finding the fix removed."""
    import xladiag

    comparison = xladiag.compare(pair / "before", pair / "after").to_dict()
    timing = json.loads((pair / "timing.json").read_text()) if (pair / "timing.json").exists() else None
    out = []
    for f in comparison["findings"]:
        if f["status"] != "disappeared" or not f.get("claimed_s_per_step"):
            continue
        measured = timing["saving_ms"] / 1e3 if timing else f["realized_step_s_per_step"]
        source = "timed without the profiler (timing.json)" if timing else "profiled step change (compare)"
        out.append((pair.name, f["rule"], f["claimed_s_per_step"], measured, source))
    expected = PAIR_RULE.get(timing.get("pair")) if timing else None
    if expected and not any(r[1] == expected for r in out):  # the fix worked, the finding never fired
        out.append((pair.name, f"{expected} (not found)", 0.0, timing["saving_ms"] / 1e3,
                    "timed without the profiler (timing.json)"))
    return out


def main() -> int:
    from xladiag.units import format_seconds

    print("| case | finding removed | claimed | measured | ratio | measured by |")
    print("|---|---|---|---|---|---|")
    for pair in pairs():
        for case, rule, claimed, measured, source in rows(pair):
            ratio = claimed / measured if measured else float("nan")
            print(f"| {case} | {rule} | {format_seconds(claimed)} | {format_seconds(measured)} | {ratio:.2f} "
                  f"| {source} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Record, time and diagnose every closed-loop case; print claim against measured saving.

For each case of cases.py, in a process of its own (XLA_FLAGS are read once, when jax is imported):
  1. build `before` and `after` (the fix applied), compile and warm both;
  2. profile 6 steps of `before` with its HLO dump: OUT/<case>/before/ (a capture folder diagnose reads);
  3. time both without the profiler, interleaved: rounds of one block per variant, the order alternating
     (ABBA...), each block's median step (a stateful case skips its first steps); saving = median over
     rounds of before - after, with a bootstrap 90 % interval; OUT/<case>/timing.json.
Then this process diagnoses each `before` and compares the finding's claim, as a share of the profiled step,
with the measured saving, as a share of the unprofiled step. A case passes when the ratio is within
[0.5, 2] (or both are under 3 % of the step); a false-positive case passes when the claim is under 1 %.

    python benchmarks/closed_loop/run.py                    # every case, into /tmp/xladiag_closed_loop
    python benchmarks/closed_loop/run.py --cases slow_loader --out DIR
    python benchmarks/closed_loop/run.py --diagnose-only    # reuse OUT's recordings, diagnose again

Needs a quiet machine: a parallel test run moves CPU timings several-fold. Prints a Markdown table
(benchmarks/README.md keeps the last one) and writes OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "sample_profiles")]

WARMUP, PROFILED_STEPS, STEP_NAME = 3, 6, "train"
ROUNDS, BLOCK = 16, 4
# A prefetch queue refills while the other variant runs: its first steps are free. Skip the queue's depth
# (2 in cases.py) plus one, in longer blocks, so the steady state is what is timed.
STATEFUL_BLOCK, STATEFUL_SKIP = 8, 3


def _block_median(step, stateful: bool) -> float:
    steps, skip = (STATEFUL_BLOCK, STATEFUL_SKIP) if stateful else (BLOCK, 0)
    times = []
    for i in range(steps):
        t = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times[skip:])


def _bootstrap(samples: list[float], n: int = 2000) -> tuple[float, float]:
    import numpy as np

    rng = np.random.default_rng(0)
    meds = np.median(rng.choice(samples, size=(n, len(samples)), replace=True), axis=1)
    return float(np.percentile(meds, 5)), float(np.percentile(meds, 95))


def time_interleaved(before, after, stateful: bool, rounds: int = ROUNDS) -> dict:
    per = {"before": [], "after": []}
    for r in range(rounds):
        order = (("before", before), ("after", after)) if r % 2 == 0 else (("after", after), ("before", before))
        for name, step in order:
            per[name].append(_block_median(step, stateful))
    savings = [b - a for b, a in zip(per["before"], per["after"])]
    low, high = _bootstrap(savings)
    return {"rounds": rounds, "block_steps": STATEFUL_BLOCK if stateful else BLOCK,
            "before_step_s": statistics.median(per["before"]),
            "after_step_s": statistics.median(per["after"]), "saving_s": statistics.median(savings),
            "saving_interval_90_s": [low, high], "before_blocks_s": per["before"], "after_blocks_s": per["after"]}


def record(name: str, out: Path) -> None:
    """In a fresh process: profile `before` with its dump, then time both variants unprofiled."""
    import _recording as rec

    out = rec.fresh_out(out)
    case_dir = out / "before"
    case_dir.mkdir()
    from cases import BY_NAME

    case = BY_NAME[name]
    rec.set_xla_flags(case.devices, case_dir / "hlo")
    import jax

    before, after = case.build(jax, False), case.build(jax, True)
    for step in (before, after):
        for i in range(WARMUP):
            step(i)
    rec.profiled_steps(jax, case_dir, PROFILED_STEPS, STEP_NAME, before)
    rec.fix_run_names(case_dir)
    modules = rec.keep_text_dump(case_dir / "hlo")
    wanted = [m for m in modules if m["module_name"].endswith("_before")]
    if len(wanted) == 1:
        rec.keep_module_only(case_dir / "hlo", wanted[0]["module_name"])
    timing = time_interleaved(before, after, case.stateful)
    timing.update({"case": name, "rule": case.rule, "fix": case.fix, "lever": case.lever,
                   "false_positive": case.false_positive,
                   "devices": case.devices, "jax_version": jax.__version__,
                   "command": f"python benchmarks/closed_loop/run.py --cases {name}"})
    (out / "timing.json").write_text(json.dumps(timing, indent=2) + "\n")
    (out / rec.ANSWERS).write_text(json.dumps({"case": name, "dump_modules": modules}, indent=2) + "\n")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record"]:
        record(argv[1], Path(argv[2]))
        return 0
    from cases import CASES
    from judge import judge, table

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/xladiag_closed_loop"),
                   help="where the recordings go (sample_profiles/closed_loop keeps the ones CI checks)")
    p.add_argument("--cases", default=",".join(c.name for c in CASES), help="comma-separated case names")
    p.add_argument("--diagnose-only", action="store_true", help="diagnose OUT's recordings again, time nothing")
    args = p.parse_args(argv)
    names = [n for n in args.cases.split(",") if n]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(HERE)]))}
    rows = []
    for name in names:
        if not args.diagnose_only:
            print(f"[{name}] recording and timing ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, __file__, "--record", name, str(args.out / name)], check=True, env=env)
        rows.append(judge(args.out / name))
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Change points of a series of runs: where the per-step time distributions before and after differ beyond
noise, by compare's test (compare/noise.py: Welch's t-test, p < 0.05, and a change of the mean larger than the
step-to-step spread).

Binary segmentation: within a stretch of runs, every split is tested (the steps of all runs before it pooled
against the steps of all runs after it); the split of the largest |t| among those beyond noise is a change
point, and each side is searched again. A stretch with no split beyond noise has none: a series of noise only
gives no change point, and each real shift gives one at its first run.

Runs vary more than their steps do (another host, another compile, a warmer cache): the steps of one run are not
independent of each other. So a split is also held to the run-to-run spread: its change of the mean must exceed
the run-to-run spread and be significant with the runs as the units (run_test), at an alpha shared among the
splits tried in a stretch (Bonferroni), so that trying every split does not find a shift in noise.
"""

from __future__ import annotations

import math

import numpy as np

from ..compare.noise import ALPHA, NoiseTest, t_two_sided_p, welch

RUN_RULE = (f"and, with the runs as units, Student's t-test of the run means (pooled variance) gives p < {ALPHA:g} "
            "shared among the splits tried in the stretch (Bonferroni) and the change of the mean exceeds the "
            "run-to-run spread (their pooled standard deviation)")
METHOD = ("binary segmentation: of the splits beyond both tests, the one of the largest |t| (steps) is a change "
          "point, then each side is searched again; in a series of two runs the steps' test alone decides, as in "
          "compare")


def _steps(point: dict) -> list[float]:
    """A run's steps; without per-step times its mean step stands as one step (no spread of its own)."""
    if point["per_step_s"]:
        return point["per_step_s"]
    return [point["step_s"]] if point["step_s"] is not None else []


def _pooled(runs: list[list[float]]) -> np.ndarray:
    return np.concatenate([np.asarray(r, np.float64) for r in runs] + [np.empty(0)])


def run_test(before: list[list[float]], after: list[list[float]], alpha: float = ALPHA) -> dict:
    """The runs as the units: Student's t-test of the run means with their pooled variance (a side of one run:
    is it outside the other side's prediction interval), at ``alpha``, and a change larger than that pooled
    run-to-run spread. ``beyond_noise`` None: untestable (one run a side)."""
    a = np.array([np.mean(r) for r in before if r])
    b = np.array([np.mean(r) for r in after if r])
    out = {"runs_before": len(a), "runs_after": len(b), "alpha": alpha, "t": None, "df": None, "p_value": None,
           "spread_s": None, "beyond_noise": None}
    df = len(a) + len(b) - 2
    if len(a) == 0 or len(b) == 0 or df < 1:
        return out
    diff = float(b.mean() - a.mean())
    squares = sum(float(((s - s.mean()) ** 2).sum()) for s in (a, b))
    spread = math.sqrt(squares / df)
    if spread == 0.0:
        t, p = (math.inf if diff else 0.0), (0.0 if diff else 1.0)
    else:
        t = diff / (spread * math.sqrt(1 / len(a) + 1 / len(b)))
        p = t_two_sided_p(t, df)
    out.update(t=None if math.isinf(t) else t, df=df, p_value=p, spread_s=spread,
               beyond_noise=bool(p < alpha and abs(diff) > spread))
    return out


def split_test(before: list[list[float]], after: list[list[float]], splits: int = 1) -> tuple[NoiseTest, dict, bool]:
    """compare's noise test of the pooled steps, the run-level test (its alpha shared among the ``splits`` tried
    in one stretch: Bonferroni), and whether the split is beyond both. One run against one is untestable at the
    run level: beyond noise only when those are the whole series (compare's verdict), else not (run-to-run noise
    alone would pass the steps' test)."""
    test = welch(_pooled(before), _pooled(after))
    runs = run_test(before, after, ALPHA / max(splits, 1))
    by_runs = runs["beyond_noise"] if runs["beyond_noise"] is not None else splits == 0
    return test, runs, bool(test.beyond_noise) and by_runs


def _best_split(runs: list[list[float]], lo: int, hi: int) -> tuple[int, NoiseTest] | None:
    """The split index k (runs lo..k-1 | k..hi-1) beyond noise of the largest |t|, or None."""
    best = None
    for k in range(lo + 1, hi):
        # splits=0 marks a series of two runs, where the steps' test alone decides (as compare's does)
        test, _, beyond = split_test(runs[lo:k], runs[k:hi], 0 if len(runs) == 2 else hi - lo - 1)
        if beyond and (best is None or abs(test.t) > abs(best[1].t)):
            best = (k, test)
    return best


def change_points(points: list[dict]) -> list[dict]:
    """The change points of ``points`` (in series order), each with the run index it starts at, the means of the
    stretches on either side (up to the neighbouring change points) and their noise test."""
    runs = [_steps(p) for p in points]
    found: list[int] = []
    stack = [(0, len(runs))]
    while stack:
        lo, hi = stack.pop()
        best = _best_split(runs, lo, hi)
        if best is not None:
            found.append(best[0])
            stack += [(lo, best[0]), (best[0], hi)]
    found.sort()
    bounds = [0, *found, len(runs)]
    out = []
    for i, k in enumerate(found):  # each one tested again against its neighbouring stretches only
        before, after = runs[bounds[i]:k], runs[k:bounds[i + 2]]
        test, by_run, _ = split_test(before, after)
        mean_before, mean_after = float(_pooled(before).mean()), float(_pooled(after).mean())
        change = mean_after / mean_before - 1.0 if mean_before > 0 else None
        out.append({"index": k, "label": points[k]["label"], "runs_before": k - bounds[i],
                    "runs_after": bounds[i + 2] - k, "mean_before_s": mean_before, "mean_after_s": mean_after,
                    "change": change, "run_test": by_run,
                    "direction": "slower" if test.diff_s > 0 else "faster", "noise_test": test.as_dict()})
    return out

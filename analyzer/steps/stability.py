"""Steps whose times vary too much for a saving in seconds to be read as a prediction.

A finding's saving is measured on the capture's steps; when they spread (slowest over fastest above 1.5, or a
coefficient of variation above 20 %: a host doing other work, a recompile, a data stall) the same fix can
measure very differently on another run. The analysis warns, every finding's confidence drops to low, and the
reports' shares of the step are the numbers to compare.
"""

from __future__ import annotations

import math

import pandas as pd

MAX_OVER_MIN = 1.5
MAX_CV = 0.20


def step_spread(device_steps: pd.DataFrame) -> tuple[float, float, int]:
    """(slowest / fastest, coefficient of variation, steps) of the per-step mean over devices; NaN when fewer
    than two steps were measured."""
    if device_steps.empty:
        return math.nan, math.nan, 0
    per_step = device_steps.groupby("step")["duration_s"].mean()
    n = len(per_step)
    if n < 2 or per_step.min() <= 0:
        return math.nan, math.nan, n
    return float(per_step.max() / per_step.min()), float(per_step.std(ddof=1) / per_step.mean()), n


def unstable_note(device_steps: pd.DataFrame) -> str | None:
    """A warning when the measured steps spread past the limits, else None."""
    ratio, cv, n = step_spread(device_steps)
    if not (ratio > MAX_OVER_MIN or cv > MAX_CV):
        return None
    return (f"the {n} measured steps vary (slowest {ratio:.2f}x the fastest, coefficient of variation "
            f"{cv:.0%}): a saving measured on them may not repeat, so every finding's confidence is low; compare "
            "savings as shares of the step, and capture more steps on a quiet host to be sure")

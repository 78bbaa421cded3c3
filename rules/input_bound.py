"""The device waits for the host inside the user's annotated steps (data loading, callbacks, Python).

What it finds:
    Annotated steps (`jax.profiler.StepTraceAnnotation`; MaxText annotates its own) in which no device
    works for part of the step: the host is loading the next batch, running a callback, or in Python between
    steps. One finding for the capture when that idle time is at least 5 % of the mean step. Without step
    annotations the rule says nothing: executions of a program hold no host time.
Why it costs time:
    A step cannot end before its input exists. While the host loads data or runs Python, every device idles,
    and no change to the compiled program recovers that time.
How the cost is estimated:
    Per measured step: the annotated span minus the time at least one device works on the step's own
    programs (the ones launched inside the span, wherever they run); cost = the mean over measured steps.
    A step whose device is busy 20 ms of an 80 ms annotated step costs 60 ms. Savings = the cost: a
    prefetching loader overlaps it with device work up to the device's busy time.
Fix:
    Prefetch the next batch while the device works (e.g. a background thread or `prefetch` in tf.data /
    Grain), give the loader more workers (MaxText `grain_worker_count`), and move host callbacks and
    per-step Python (logging, `float(loss)`) off the step. To confirm, rerun MaxText with
    `dataset_type=synthetic` or `reuse_example_batch=1`: if the idle time disappears, the input pipeline
    is the cause (keys checked in MaxText's `MaxText/configs/base.yml`, listed in `rules/levers.py`).
Details:
    steps (count): measured annotated steps (warm-up excluded)
    annotation (text): the annotation's name, as the user gave it
    mean_step_s (s): mean annotated step
    mean_busy_s (s): mean time per step at least one device works on the step's programs
    mean_idle_s (s): mean time per step no device works (the cost)
    idle_s_per_step (list): idle seconds of each measured step, in step order
    step_nums (list): the annotations' step_num of those steps
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import Priced, Target, compose, format_percent, format_seconds
from .levers import name

RULE_ID = "input-bound"
MIN_FRACTION = 0.05  # idle below 5 % of the step is launch overhead and noise, not an input problem


@dataclass(frozen=True)
class Numbers:
    steps: int  # count
    annotation: str
    mean_step_s: float  # s
    mean_busy_s: float  # s
    mean_idle_s: float  # s
    idle_s_per_step: list  # s, in step order
    step_nums: list
    priced: Priced


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def measure(analysis) -> Numbers | None:
    steps = analysis.steps
    if steps is None or not steps.annotated or steps.busy_any_ps is None:
        return None
    wait = steps.host_wait_s()
    if wait.empty:
        return None
    mean_step, mean_idle = float(wait["duration_s"].mean()), float(wait["all_idle_s"].mean())
    if not (math.isfinite(mean_idle) and mean_step > 0) or mean_idle < MIN_FRACTION * mean_step:
        return None
    return Numbers(
        steps=len(wait), annotation=steps.annotation, mean_step_s=mean_step,
        mean_busy_s=float(wait["busy_any_s"].mean()), mean_idle_s=mean_idle,
        idle_s_per_step=[float(v) for v in wait["all_idle_s"]], step_nums=[int(v) for v in wait["step_num"]],
        priced=Priced(time_s_per_step=mean_idle, est_savings_s_per_step=mean_idle, step_s=mean_step,
                      confidence="high", ops=()))


def title(n: Numbers) -> str:
    return (f"Devices wait for the host {format_seconds(n.mean_idle_s)} per step "
            f"({format_percent(n.mean_idle_s / n.mean_step_s)})")


def evidence(n: Numbers) -> str:
    return (f"Over {n.steps} annotated steps the step takes {format_seconds(n.mean_step_s)} on the host and "
            f"the devices work {format_seconds(n.mean_busy_s)} of it: {format_seconds(n.mean_idle_s)} per step no "
            "device runs anything, waiting for input, callbacks or Python.")


def fix(n: Numbers, target: Target) -> str:
    return (f"Prefetch the next batch while the device computes and give the loader more workers (MaxText "
            f"{name('grain_worker_count')}); keep host callbacks and per-step Python (logging, float(loss)) off "
            f"the step. Confirm with MaxText {name('dataset_type')}=synthetic or {name('reuse_example_batch')}=1: "
            "if the idle time goes away, the input pipeline is the cause.")

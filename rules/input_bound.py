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
    Per measured step: the host's lead, from the span's start to the first launch of the step's work (the
    first device op's start where the capture records no launch), is the time the host spends before it
    launches anything: loading, callbacks, Python. Cost = the mean over measured steps of that lead while no
    device works. It fires at 5 % of the step and 1 ms or more: idle between ops or after the last one
    (dispatch, a host waking up from `block_until_ready`, a fraction of a millisecond a step) is no input
    wait and no prefetch removes it. Savings: a prefetching loader overlaps loading with the device's work, so
    a step becomes max(lead, busy) instead of its span: saving = span - max(lead, busy) per step, mean over
    steps. A loader of 60 ms before 20 ms of device work saves 20 ms, not 60; a host that already launches
    asynchronously (the step is the loader's time) saves nothing.
Fix:
    Prefetch the next batch while the device works (e.g. a background thread or `prefetch` in tf.data /
    Grain), give the loader more workers (MaxText `grain_worker_count`), and move host callbacks and
    per-step Python (logging, `float(loss)`) off the step. To confirm, rerun MaxText with
    `dataset_type=synthetic` or `reuse_example_batch=1`: if the idle time disappears, the input pipeline
    is the cause (keys checked in MaxText's `MaxText/configs/base.yml`, listed in `rules/levers.py`).
    PyTorch/XLA: `MpDeviceLoader`; TensorFlow: `tf.data.Dataset.prefetch` and `num_parallel_calls`
    (in words where no lever is verified). A TensorFlow capture without XLA is measured over TF's own step markers.
Details:
    steps (count): measured annotated steps (warm-up excluded)
    annotation (text): the annotation's name, as the user gave it
    mean_step_s (s): mean annotated step
    mean_busy_s (s): mean time per step at least one device works on the step's programs
    mean_idle_s (s): mean time per step no device works
    idle_s_per_step (list): idle seconds of each measured step, in step order
    step_nums (list): the annotations' step_num of those steps
    mean_lead_s (s): mean host time per step before the step's first launch
    mean_lead_idle_s (s): of it, the time no device works (the cost)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import framework_levers as fwl
from .base import Priced, Target, compose, format_percent, format_seconds
from .levers import name

RULE_ID = "input-bound"
MIN_FRACTION = 0.05  # a lead below 5 % of the step is launch overhead and noise, not an input problem
# A host dispatching a jitted step takes a fraction of a millisecond before its first launch (0.25 ms on the
# bundled H100 captures, 0.1 ms on CPU); loading a batch takes longer. Leads under this are dispatch.
MIN_LEAD_S = 1e-3


@dataclass(frozen=True)
class Numbers:
    steps: int  # count
    annotation: str
    mean_step_s: float  # s
    mean_busy_s: float  # s
    mean_idle_s: float  # s
    idle_s_per_step: list  # s, in step order
    step_nums: list
    mean_lead_s: float  # s
    mean_lead_idle_s: float  # s
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
    lead = _lead_s(steps, analysis.step_ops).reindex(wait["step"]).fillna(0.0).to_numpy()
    lead_idle = np.minimum(lead, wait["all_idle_s"].to_numpy())
    mean_step, mean_lead_idle = float(wait["duration_s"].mean()), float(lead_idle.mean())
    if not (math.isfinite(mean_lead_idle) and mean_step > 0) or mean_lead_idle < max(MIN_FRACTION * mean_step,
                                                                                      MIN_LEAD_S):
        return None
    # Prefetching overlaps the lead with the device's work: a step takes max(lead, busy), not its span.
    overlapped = np.maximum(lead, wait["busy_any_s"].to_numpy())
    saving = float(np.clip(wait["duration_s"].to_numpy() - overlapped, 0.0, None).mean())
    return Numbers(
        steps=len(wait), annotation=steps.annotation, mean_step_s=mean_step,
        mean_busy_s=float(wait["busy_any_s"].mean()), mean_idle_s=float(wait["all_idle_s"].mean()),
        idle_s_per_step=[float(v) for v in wait["all_idle_s"]], step_nums=[int(v) for v in wait["step_num"]],
        mean_lead_s=float(lead.mean()), mean_lead_idle_s=mean_lead_idle,
        priced=Priced(time_s_per_step=mean_lead_idle, est_savings_s_per_step=min(saving, mean_lead_idle),
                      step_s=mean_step, confidence="high", ops=()))


def _lead_s(steps, step_ops: pd.DataFrame) -> pd.Series:
    """Per measured step: seconds from the annotated span's start to the step's first launch (its first
    device op's start where no launch is recorded), over every device."""
    if steps.first_launch is not None:  # hosts reduced where read: the step events are a sample
        first_by_step = steps.first_launch
    elif step_ops.empty:
        return pd.Series(dtype=float)
    else:
        first_by_step = _first_by_step(step_ops)
    spans = steps.after_warmup.groupby("step")["start_ps"].min()
    return ((first_by_step.reindex(spans.index) - spans) / 1e12).clip(lower=0.0)


def title(n: Numbers) -> str:
    return (f"Devices wait for the host {format_seconds(n.mean_lead_idle_s)} per step before it launches the step "
            f"({format_percent(n.mean_lead_idle_s / n.mean_step_s)})")


def evidence(n: Numbers) -> str:
    saves = n.priced.est_savings_s_per_step
    overlap = (f"Prefetching overlaps that wait with the devices' {format_seconds(n.mean_busy_s)} of work, so a "
               f"step would take the longer of the two: saves {format_seconds(saves)} per step."
               if saves > 0 else "The host already launches ahead: the step takes the host's time, and prefetching "
               "saves nothing; only a faster loader (more workers, less per-step Python) shortens it.")
    return (f"Over {n.steps} annotated steps the step takes {format_seconds(n.mean_step_s)} on the host and "
            f"the devices work {format_seconds(n.mean_busy_s)} of it; the host spends {format_seconds(n.mean_lead_s)} "
            f"of each step before its first launch, {format_seconds(n.mean_lead_idle_s)} of it with no device "
            f"working (loading input, callbacks or Python). {overlap}")


def fix(n: Numbers, target: Target) -> str:
    fw = fwl.other(target)
    if fw:
        return (f"Prefetch the next batch while the device computes: {fwl.loader(fw)}; keep host callbacks and "
                "per-step Python (logging, reading the loss back every step) off the step. Confirm by feeding one "
                "cached batch every step: if the idle time goes away, the input pipeline is the cause.")
    return (f"Prefetch the next batch while the device computes and give the loader more workers (MaxText "
            f"{name('grain_worker_count')}); keep host callbacks and per-step Python (logging, float(loss)) off "
            f"the step. Confirm with MaxText {name('dataset_type')}=synthetic or {name('reuse_example_batch')}=1: "
            "if the idle time goes away, the input pipeline is the cause.")


def _first_by_step(step_ops: pd.DataFrame) -> pd.Series:
    """Per step number (sorted): the earliest launch of its events (a device op's start where none is
    recorded). Step numbers are small non-negative ints: a minimum per slot, no hash of millions of events."""
    launch, start = step_ops["launch_ps"].to_numpy(np.int64), step_ops["start_ps"].to_numpy(np.int64)
    step = step_ops["step"].to_numpy(np.int64)
    if step.min() < 0:  # (not a step number: group them)
        return pd.Series(np.where(launch >= 0, launch, start), index=step).groupby(level=0).min()
    first = np.full(int(step.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, step, np.where(launch >= 0, launch, start))
    present = np.bincount(step, minlength=len(first)) > 0
    return pd.Series(first[present], index=np.flatnonzero(present))

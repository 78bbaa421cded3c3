"""input-bound: idle time inside annotated steps, on recorded JAX jobs that wait for a loader and on
TPU-shaped captures built with a known wait."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders.annotated_steps import annotated_tpu_steps
from conftest import REPO
from xladiag.analyzer.analysis import analyze
from xladiag.rules import input_bound

SAMPLES = REPO / "sample_profiles"
MS = 10**9  # ps


def _known(sample: str) -> dict:
    return json.loads((SAMPLES / sample / "known_answers.json").read_text())


def _built(tmp_path, **kw):
    b, expected = annotated_tpu_steps(**kw)
    return analyze(b.write(tmp_path)), expected


def test_recorded_loader_wait_is_found_within_5_percent():
    """jax_input_bound: 5 steps, each waiting ~62 ms (a 60 ms sleep, timed by the script) then ~20 ms of
    matmuls. The finding's per-step idle time is the recording's annotated minus busy, step by step."""
    known = _known("jax_input_bound")
    [f] = input_bound.check(analyze(SAMPLES / "jax_input_bound"))
    steps = {s["step_num"]: s for s in known["steps"]}
    assert f.details["step_nums"] == [1, 2, 3, 4]  # step 0 (17 ms more host time) is the warm-up
    expected = [steps[n]["annotated_ms"] - steps[n]["device_busy_ms_any_device"] for n in f.details["step_nums"]]
    assert np.allclose(np.array(f.details["idle_s_per_step"]) * 1e3, expected, rtol=0.01)
    loader_ms = np.mean([steps[n]["loader_ms_perf_counter"] for n in f.details["step_nums"]])
    assert f.time_s_per_step * 1e3 == pytest.approx(loader_ms, rel=0.05)
    # Prefetching overlaps the ~62 ms wait with the ~19 ms of device work: a step becomes the wait, so what
    # it saves is the device's work per step (the span minus max(wait, busy)), not the wait.
    assert f.est_savings_s_per_step == pytest.approx(
        np.mean([s - max(lead, b) for s, lead, b in zip(
            [steps[n]["annotated_ms"] for n in f.details["step_nums"]], [f.details["mean_lead_s"] * 1e3] * 4,
            [steps[n]["device_busy_ms_any_device"] for n in f.details["step_nums"]])]) / 1e3, rel=0.05)
    assert f.est_savings_s_per_step < 0.4 * f.time_s_per_step and f.severity == "high"
    assert f.details["annotation"] == known["step_annotation"] == "train" and f.details["steps"] == 4


def test_recorded_fsdp_job_waits_for_its_loader():
    """jax_fsdp_tp_train (8 devices): idle is time no device works, so the 60 ms wait is found within 5 %."""
    known = _known("jax_fsdp_tp_train")
    [f] = input_bound.check(analyze(SAMPLES / "jax_fsdp_tp_train"))
    steps = {s["step_num"]: s for s in known["steps"]}
    expected = [steps[n]["annotated_ms"] - steps[n]["device_busy_ms_any_device"] for n in f.details["step_nums"]]
    assert np.allclose(np.array(f.details["idle_s_per_step"]) * 1e3, expected, rtol=0.01)
    assert known["loader_wait_ms"] <= f.time_s_per_step * 1e3 <= 1.05 * known["loader_wait_ms"]


def test_busy_20_of_80_ms_reports_60_ms(tmp_path):
    a, exp = _built(tmp_path, loader_ps=60 * MS, device_ps=20 * MS)
    [f] = input_bound.check(a)
    assert exp["span_ps"] == pytest.approx(80 * MS, rel=0.01)
    assert f.time_s_per_step == pytest.approx(exp["idle_ps"] / 1e12, rel=1e-3)  # the wait before the launch
    assert f.time_s_per_step == pytest.approx(0.060, rel=0.01)
    assert f.details["mean_busy_s"] == pytest.approx(0.020, rel=0.01) and f.details["steps"] == 4
    assert f.est_savings_s_per_step == pytest.approx(0.020, rel=0.01)  # 80 ms -> max(60, 20) ms
    assert "dataset_type=synthetic" in f.fix and "reuse_example_batch=1" in f.fix


def test_asynchronous_dispatch_counts_only_the_time_no_device_works(tmp_path):
    """The host never blocks: each step's 20 ms run during the next 60 ms loader wait; 40 ms per step idle."""
    a, exp = _built(tmp_path, loader_ps=60 * MS, device_ps=20 * MS, host_blocks=False)
    [f] = input_bound.check(a)
    assert f.time_s_per_step == pytest.approx(exp["idle_ps"] / 1e12, rel=1e-3)
    assert f.time_s_per_step == pytest.approx(0.040, rel=0.01)
    assert f.est_savings_s_per_step == pytest.approx(0.0, abs=1e-4)  # already max(load, compute): no prefetch gain


def test_silent_without_annotations_or_without_a_wait(tmp_path):
    plain, _ = _built(tmp_path / "plain", loader_ps=60 * MS, annotate=False)
    assert not plain.steps.annotated and input_bound.check(plain) == []
    fed, exp = _built(tmp_path / "fed", loader_ps=MS // 2, device_ps=20 * MS)  # 0.5 ms of a 20.5 ms step
    assert fed.steps.annotated and input_bound.check(fed) == []
    # The recorded CPU train step annotates its steps but never waits for input.
    assert input_bound.check(analyze(SAMPLES / "cpu_jax_train_step")) == []


@pytest.mark.parametrize("pair", ["gpu_h100_remat_pair_nocb", "gpu_h100_attention_pair"])
def test_dispatch_and_sync_gaps_are_no_input_wait(pair):
    """The H100 recordings have no input pipeline: ~0.25 ms before the first kernel (dispatch) and ~0.25 ms
    after the last (block_until_ready), 8-10 % of a 7 ms step idle, which no prefetch removes."""
    a = analyze(SAMPLES / pair / "before")
    idle = a.steps.host_wait_s()["all_idle_s"].mean()
    assert idle > 0.05 * a.steps.mean_s  # the old rule fired on this
    assert input_bound.check(a) == []


def test_first_launch_per_step_as_pandas_groups_it():
    """_first_by_step (a minimum per step slot) gives the groupby's per-step minimum of launch, else start."""
    import pandas as pd

    from xladiag.rules.input_bound import _first_by_step

    rng = np.random.default_rng(2)
    n = 300
    step_ops = pd.DataFrame({"step": rng.choice([1, 2, 5, 9], n), "start_ps": rng.integers(10**6, 10**7, n),
                             "launch_ps": np.where(rng.random(n) < 0.3, -1, rng.integers(10**5, 10**7, n))})
    for frame in (step_ops, step_ops.assign(step=step_ops["step"] - 3)):  # negative: the groupby fallback
        first = np.where(frame["launch_ps"] >= 0, frame["launch_ps"], frame["start_ps"])
        want = pd.Series(first, index=frame["step"].to_numpy()).groupby(level=0).min()
        pd.testing.assert_series_equal(_first_by_step(frame), want)

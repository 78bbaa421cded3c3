"""A TensorFlow GPU capture without XLA (TF ops as kernels, no HLO op or program): its steps are TF's own host
step markers, as xprof groups them (a root TraceMe `_r`, else `train*` / `TraceContext`, else FunctionRun /
SessionRun), not the span of each device's events; and the input-bound check runs on them."""

from __future__ import annotations

import pytest

from builders.tf_gpu_capture import TfGpuCapture
from xladiag.api import diagnose


def _report(tmp_path, **kwargs):
    _, expected = TfGpuCapture(**kwargs).write(tmp_path)
    return diagnose(tmp_path), expected


def test_tf_steps_are_the_root_markers_and_the_host_wait_is_input_bound(tmp_path):
    report, exp = _report(tmp_path)
    a = report.analysis
    assert a.steps.annotated and "TensorFlow root TraceMe (_r) 'train'" in a.steps.source
    assert a.steps.count == exp["measured_steps"]  # the first marked step is the warm-up
    assert a.step_s == pytest.approx(exp["step_s"], rel=1e-9)  # the marker's span, not a device's event span
    assert a.num_devices == 2 and a.framework["name"] == "tensorflow"
    [f] = [f for f in report.findings if f.rule == "input-bound"]
    # The host waits for the loader before it launches anything: that lead is the idle time, and a prefetching
    # loader makes the step max(lead, busy) = the lead (the kernels are shorter).
    assert f.details["mean_lead_idle_s"] == pytest.approx(exp["lead_s"], rel=0.01)
    assert f.est_savings_s_per_step == pytest.approx(exp["step_s"] - f.details["mean_lead_s"], rel=1e-6)
    assert "tf.data.Dataset.prefetch" in f.fix and "MaxText" not in f.fix


@pytest.mark.parametrize("marker,root,kind", [("train_step", False, "step marker 'train_step'"),
                                              ("TraceContext", False, "step marker 'TraceContext'"),
                                              ("FunctionRun", False, "implicit root 'FunctionRun'")])
def test_without_a_root_the_named_markers_are_the_steps(tmp_path, marker, root, kind):
    report, exp = _report(tmp_path, marker=marker, root=root, steps=3)
    assert f"TensorFlow {kind}" in report.analysis.steps.source
    assert report.analysis.steps.count == 2 and report.analysis.step_s == pytest.approx(exp["step_s"], rel=1e-9)


def test_without_any_marker_the_whole_capture_remains(tmp_path):
    report, _ = _report(tmp_path, marker="loop/body", root=False)  # a name with '/' is no step marker
    assert report.analysis.steps.source == "the whole capture (no program executions found)"
    assert not [f for f in report.findings if f.rule == "input-bound"]

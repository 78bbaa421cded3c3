"""retiling-copy: layout-only copies and transposes, injected and on the MI300 sample."""

from __future__ import annotations

import pandas as pd
import pytest

from builders import scenarios
from builders.hlo_snippets import relayout_module
from rule_helpers import REL, analyze_scenario, gpu, only, per_device_step  # noqa: F401 (fixtures)
from xladiag.analyzer.analysis import analyze
from xladiag.rules import retiling_copy
from xladiag.rules.registry import run_rules


@pytest.mark.parametrize("variant,change", [("copy", "layout"), ("transpose_fusion", "transpose")])
def test_layout_copies_are_found_with_their_time(tmp_path, variant, change):
    analysis, exp = analyze_scenario(tmp_path, scenarios.layout_copies, 120.0, variant=variant)
    f = only(retiling_copy.check(analysis), "retiling-copy")
    assert f.time_s_per_step == pytest.approx(exp["layout_change_s_per_step"], rel=REL)
    assert [o.name for o in f.ops] == exp["layout_ops"]  # 60 % / 40 % of the injected time, in that order
    assert {o["change"] for o in f.details["ops"]} == {change}
    assert {o["source"] for o in f.details["ops"]} == {"maxtext/layers/linears.py:140"}
    assert "Layout.AUTO" in f.fix and f.confidence == "high"


def test_mi300_transposes_around_the_convolution_cost_more_than_it(gpu):
    f = next(f for f in run_rules(gpu) if f.rule == "retiling-copy")
    names = {o["op"] for o in f.details["ops"]}
    assert {"input_transpose_fusion", "input_transpose_fusion.1", "loop_transpose_fusion"} <= names
    transposes = per_device_step(gpu, r".*transpose_fusion")
    conv = per_device_step(gpu, r"^cudnn-conv\.1$")
    assert transposes > conv > 0  # measured: ~375 us of transposes against ~313 us of convolution
    assert f.time_s_per_step == pytest.approx(transposes, rel=REL)
    assert f.details["convolution_s_per_step"] == pytest.approx(conv, rel=REL)
    assert {c["op"] for c in f.details["convolutions"]} == {"cudnn-conv.1"}
    where = {o["op"]: o["relative_to_convolution"] for o in f.details["ops"]}
    assert where["input_transpose_fusion.1"] == "before" and where["input_transpose_fusion"] == "after"
    assert f.confidence == "high"  # recognised from the HLO the capture carries (no dump needed)
    assert "NDHWC" in f.fix


def _relayout_analysis(tmp_path, consumer, **kwargs):
    (tmp_path / "module_0001.jit_relayout.after_optimizations.txt").write_text(relayout_module(consumer, **kwargs))
    return analyze(hlo_dir=tmp_path, chip="v6e")


@pytest.mark.parametrize("consumer,shared", [("fft", False), ("all-to-all", False), ("dot", True)])
def test_a_move_the_consumer_needs_is_not_claimed(tmp_path, consumer, shared):
    # An FFT along the moved axis, an all-to-all over it, a matmul contracting it on an array read in two orders.
    analysis = _relayout_analysis(tmp_path, consumer, shared=shared)
    t = analysis.ops.set_index("op_name").loc["t"]
    assert t["layout_change"] == "transpose" and t["layout_needed_by"] == consumer
    assert t["predicted_s_per_step"] > 0
    [f] = retiling_copy.check(analysis)
    assert "t" not in [o["op"] for o in f.details["ops"]] and f.est_savings_s_per_step == 0.0
    assert f.details["needed_ops"] == [{"op": "t", "s_per_step": t["predicted_s_per_step"], "needed_by": consumer}]
    assert "their consumer needs the move" in f.evidence


@pytest.mark.parametrize("consumer,moved,shared", [("fft", "batch", False), ("all-to-all", "batch", False),
                                                   ("dot", "batch", True), ("dot", "consumer", False)])
def test_a_move_no_consumer_needs_stays_layout_only(tmp_path, consumer, moved, shared):
    # Other axes moved, or a matmul whose operand nothing else reads: the producer could write that order.
    analysis = _relayout_analysis(tmp_path, consumer, moved=moved, shared=shared)
    t = analysis.ops.set_index("op_name").loc["t"]
    assert pd.isna(t["layout_needed_by"])
    [f] = retiling_copy.check(analysis)
    assert [o["op"] for o in f.details["ops"]] == ["t"] and f.details["needed_ops"] == []
    assert f.est_savings_s_per_step == pytest.approx(t["predicted_s_per_step"])

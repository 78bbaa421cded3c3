"""retiling-copy: layout-only copies and transposes, injected and on the MI300 sample."""

from __future__ import annotations

import pytest

from builders import scenarios
from rule_helpers import REL, analyze_scenario, gpu, only, per_device_step  # noqa: F401 (fixtures)
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

"""mxu-padding on the recorded HLO fixtures (sample_profiles/hlo_rules_*): known padded fractions."""

from __future__ import annotations

import json

import pytest

from conftest import HLO_PROGRAM, SAMPLES
from xladiag.analyzer.analysis import analyze
from xladiag.rules import mxu_padding

K200 = SAMPLES / "hlo_rules_dot_k200_n72"


def _findings(folder, chip, program=None):
    return mxu_padding.check(analyze(hlo_dir=folder, chip=chip, program=program))


@pytest.mark.parametrize("chip,key", [("v6e", "v6e/tpu7x"), ("tpu7x", "v6e/tpu7x"), ("v5e", "v5e/v5p/v4"),
                                      ("v5p", "v5e/v5p/v4")])
def test_k200_n72_dot_is_flagged_with_the_recorded_fraction(chip, key):
    known = json.loads((K200 / "known_answers.json").read_text())
    (finding,) = _findings(K200, chip)
    (dot,) = finding.details["dots"]
    assert (dot["k"], dot["n"], dot["m"]) == (known["spec"]["k"], known["spec"]["n"], known["spec"]["m"])
    assert dot["padded_fraction"] == pytest.approx(known["padded_flops_fraction"][key], abs=1e-4)
    assert finding.details["padded_flops_fraction"] == pytest.approx(known["padded_flops_fraction"][key], abs=1e-4)
    # Cost = the padded FLOPs at the f32 peak: FLOPs / peak * f / (1 - f).
    analysis = analyze(hlo_dir=K200, chip=chip)
    f = known["padded_flops_fraction"][key]
    expected = known["flops"] / analysis.chip.peak_flops_per_s("f32") * f / (1 - f)
    assert finding.time_s_per_step == pytest.approx(expected, rel=1e-3)
    # The dot is HBM-bound at its size either way: aligning buys nothing now, and the finding says so.
    assert finding.est_savings_s_per_step == 0.0 and "HBM-bound" in finding.evidence
    assert "base_mlp_dim" in finding.fix and "head_dim" in finding.fix and "vocab_size" in finding.fix


def test_aligned_1024_control_is_not_flagged():
    assert _findings(SAMPLES / "hlo_rules_dot_aligned_1024", "v6e") == []
    assert _findings(SAMPLES / "hlo_rules_dot_aligned_1024", "v5e") == []


def test_compute_bound_half_width_dots_save_their_padding():
    """MaxText Llama-3 8B on v6e: head_dim 128 dots fill half of the 256-wide MXU and are compute-bound."""
    (finding,) = _findings(SAMPLES / "hlo_maxtext_llama3_8b_v6e4", "v6e", HLO_PROGRAM)
    assert finding.details["multiple"] == 256
    assert all(d["padded_fraction"] == pytest.approx(0.5) for d in finding.details["dots"])
    assert finding.time_s_per_step > 0
    assert finding.est_savings_s_per_step == pytest.approx(finding.time_s_per_step, rel=1e-6)
    # On a 128-wide MXU the same dims are aligned.
    assert _findings(SAMPLES / "hlo_maxtext_llama3_8b_v6e4", "v5p", HLO_PROGRAM) == []

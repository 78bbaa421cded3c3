"""materialized-attention on the recorded HLO fixtures: naive attention flagged, the MLP of the same FLOPs not."""

from __future__ import annotations

import json

import pytest

from conftest import SAMPLES
from xladiag.analyzer.analysis import analyze
from xladiag.rules import materialized_attention

NAIVE = SAMPLES / "hlo_rules_attention_naive"


@pytest.mark.parametrize("chip", ["v6e", "tpu7x"])
def test_naive_attention_is_flagged_with_its_score_matrix(chip):
    known = json.loads((NAIVE / "known_answers.json").read_text())
    analysis = analyze(hlo_dir=NAIVE, chip=chip)
    (finding,) = materialized_attention.check(analysis)
    assert finding.details["chains"] == 1
    assert finding.details["score_bytes"] == known["score_matrix_bytes_f32"] == 536_870_912
    ops = analysis.ops
    softmax = ops[ops["attention_role"] == "softmax"]
    # The ops between the two dots are exactly the ones the finding prices, and none of them is a matmul.
    assert not softmax["is_matmul"].any() and len(softmax) == finding.details["scores"][0]["softmax_ops"] >= 3
    assert finding.details["softmax_s_per_step"] == pytest.approx(softmax["predicted_s_per_step"].sum())
    # Scores written once and read once by the context dot, at the chip's HBM bandwidth.
    assert finding.details["score_hbm_s_per_step"] == pytest.approx(2 * 536_870_912 / analysis.chip.hbm_bytes_per_s)
    assert finding.time_s_per_step == pytest.approx(finding.details["softmax_s_per_step"]
                                                    + finding.details["score_hbm_s_per_step"])
    assert "attention='flash'" in finding.fix
    dots = [d["name"] for d in known["dots"]]
    assert set(ops.loc[ops["attention_role"].isin(["scores", "context"]), "op_name"]) == set(dots)


def test_mlp_of_the_same_flops_is_not_flagged():
    known = json.loads((SAMPLES / "hlo_rules_mlp_same_flops" / "known_answers.json").read_text())
    analysis = analyze(hlo_dir=SAMPLES / "hlo_rules_mlp_same_flops", chip="v6e")
    assert analysis.ops.loc[analysis.ops["is_matmul"], "flops"].sum() == known["flops"]
    assert materialized_attention.check(analysis) == []
    assert analysis.ops["attention_role"].isna().all()


def test_gpu_fix_names_cudnn_flash():
    (finding,) = materialized_attention.check(analyze(hlo_dir=NAIVE, chip="h100"))
    assert "attention='cudnn_flash_te'" in finding.fix and "implementation='cudnn'" in finding.fix
    assert "Splash" not in finding.fix

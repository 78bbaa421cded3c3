"""Custom calls priced from their backend_config and shapes (cuDNN / TransformerEngine attention, cuBLASLt
epilogues), the unknown ones left unknown (no HBM-copy guess), the GPU kernel launch floor, and the
unpriced share the report and compare state."""

from __future__ import annotations

import json
import math

import pytest

import xladiag
from builders.hlo_snippets import (
    cublas_lt_text,
    cudnn_fmha_text,
    te_fused_attn_text,
    triton_call_text,
)
from conftest import REPO, SAMPLES, diagnosed, report_data
from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.analyzer.hlo.costs import instruction_costs
from xladiag.analyzer.models.roofline import predict_ops
from xladiag.parsers.hlo_text import parse_hlo_file, parse_hlo_module

B, S, H, D = 2, 512, 4, 64
QKV = f"bf16[{B},{S},{H},{D}]{{3,2,1,0}}"
QKV_BYTES = B * S * H * D * 2
STATS = f"f32[{B},{H},{S}]{{2,1,0}}"


def _costs(*lines: str):
    params = [f"  %q = {QKV} parameter(0)", f"  %k = {QKV} parameter(1)", f"  %v = {QKV} parameter(2)",
              f"  %do = {QKV} parameter(3)", f"  %o = {QKV} parameter(4)", f"  %stats = {STATS} parameter(5)"]
    body = "\n".join(params + [f"  {line}" for line in lines])
    module = parse_hlo_module(f"HloModule t\n\nENTRY %main {{\n{body}\n}}\n", strict=True)
    return instruction_costs(module).set_index("name")


def test_cudnn_attention_forward_backward_dropout_and_causal():
    costs = _costs(cudnn_fmha_text("fwd", B, S, S, H, D, mask="CAUSAL", workspace=256),
                   cudnn_fmha_text("bwd", B, S, S, H, D, mask="CAUSAL", backward=True, workspace=1 << 24),
                   cudnn_fmha_text("drop", B, S, S, H, D, dropout=0.1))
    two_gemms = 4 * B * H * S * S * D
    assert costs.loc["fwd", "flops"] == two_gemms / 2  # causal: half the score matrix
    assert costs.loc["bwd", "flops"] == 2.5 * two_gemms / 2
    assert costs.loc["drop", "flops"] == two_gemms  # __cudnn$fmhaSoftmaxDropout, no mask
    assert "backward" in costs.loc["bwd", "flops_note"] and "causal" in costs.loc["fwd", "flops_note"]
    # Bytes: Q, K, V (and dO, O, stats backward) read, outputs written; the u8 workspace is scratch.
    stats = B * H * S * 4
    assert costs.loc["fwd", "hbm_bytes"] == 4 * QKV_BYTES + stats
    assert costs.loc["bwd", "hbm_bytes"] == 5 * QKV_BYTES + stats + 3 * QKV_BYTES


def test_cublas_lt_epilogues_add_their_elementwise_work_and_keep_the_aux_output():
    m, k, n = 256, 1024, 512
    costs = _costs(f"%a = bf16[{m},{k}]{{1,0}} parameter(6)", f"%b = bf16[{k},{n}]{{1,0}} parameter(7)",
                   f"%bias = bf16[{n}]{{0}} parameter(8)", f"%c = bf16[{m},{n}]{{1,0}} parameter(9)",
                   cublas_lt_text("plain", m, k, n), cublas_lt_text("gelu", m, k, n, epilogue="BIAS_GELU_AUX"),
                   cublas_lt_text("acc", m, k, n, beta=1.0))
    dot = 2 * m * k * n
    assert costs.loc["plain", "flops"] == dot
    assert costs.loc["gelu", "flops"] == dot + 2 * m * n  # bias add + gelu, one FLOP per output element each
    assert costs.loc["acc", "flops"] == dot + m * n  # + beta·C
    assert "BIAS_GELU_AUX" in costs.loc["gelu", "flops_note"]
    ins = (m * k + k * n) * 2
    assert costs.loc["plain", "hbm_bytes"] == ins + m * n * 2  # the s8 workspace is not traffic
    assert costs.loc["gelu", "hbm_bytes"] == ins + n * 2 + 2 * m * n * 2  # bias read, output + aux written


def test_transformer_engine_attention_from_its_ffi_attributes():
    costs = _costs(te_fused_attn_text("te_fwd", B, S, H, D, mask_type=2),
                   te_fused_attn_text("te_bwd", B, S, H, D, mask_type=0, backward=True))
    assert costs.loc["te_fwd", "flops"] == 4 * B * H * S * S * D / 2
    assert costs.loc["te_bwd", "flops"] == 2.5 * 4 * B * H * S * S * D
    assert "TransformerEngine" in costs.loc["te_fwd", "flops_note"]


def test_sliding_window_attention_counts_the_window_not_half_the_keys():
    costs = _costs(cudnn_fmha_text("swa", B, S, S, H, D, mask="CAUSAL", window=128),
                   te_fused_attn_text("te_swa", B, S, H, D, mask_type=2, window_left=127),
                   cudnn_fmha_text("wide", B, S, S, H, D, mask="CAUSAL", window=4 * S))
    assert costs.loc["swa", "flops"] == 4 * B * H * S * 128 * D
    assert costs.loc["te_swa", "flops"] == 4 * B * H * S * 128 * D
    assert costs.loc["wide", "flops"] == 4 * B * H * S * S * D / 2  # a window wider than the keys: causal


def test_unknown_kernel_is_unknown_not_an_hbm_copy_and_tiny_gpu_ops_get_the_launch_floor():
    costs = _costs(triton_call_text("triton", QKV, QKV, "q"),
                   f"%tiny = bf16[{B},{S},{H},{D}]{{3,2,1,0}} negate(%q)").reset_index()
    assert math.isnan(costs.set_index("name").loc["triton", "flops"])
    assert "no cost estimate" in costs.set_index("name").loc["triton", "flops_note"]
    catalog = load_catalog()
    h100, v6e = catalog["h100"], catalog["v6e"]
    out = predict_ops(costs, h100).set_index("name")
    # Its bytes alone would have priced it as a copy (4 MB / 3.35 TB/s): now no time and an unknown bound.
    assert out.loc["triton", "bound_by"] == "unknown" and math.isnan(out.loc["triton", "predicted_s"])
    assert out.loc["triton", "t_memory_s"] > 0  # the bytes' time stays as a lower bound
    tiny_roofline = out.loc["tiny", "t_memory_s"]
    assert tiny_roofline < h100.kernel_launch_floor_s
    assert out.loc["tiny", "predicted_s"] == h100.kernel_launch_floor_s and out.loc["tiny", "bound_by"] == "latency"
    # Free ops (parameters) launch nothing: no floor. TPUs have no launch floor in the catalog.
    assert out.loc["q", "predicted_s"] == 0
    assert v6e.kernel_launch_floor_s is None
    assert predict_ops(costs, v6e).set_index("name").loc["tiny", "bound_by"] == "hbm"
    assert "forums.developer.nvidia.com" in h100.number_sources["kernel_launch_floor_s"]


@pytest.mark.parametrize("pair", ["gpu_h100_attention_pair_nocb", "gpu_h100_remat_pair_nocb"])
def test_every_gpu_custom_call_of_the_h100_samples_is_priced(pair):
    """The H100 samples' cuDNN flash attention (JAX dot_product_attention, causal, [8, 1024, 16, 64]) and
    cuBLASLt gemms all get FLOPs; the backward is 2.5x the forward."""
    dump = next((SAMPLES / pair / "after" / "hlo").glob("*after_optimizations.txt"))
    costs = instruction_costs(parse_hlo_file(dump))
    calls = costs[costs["opcode"] == "custom-call"]
    assert len(calls) > 10 and calls["flops"].notna().all() and (calls["flops"] > 0).all()
    attention = calls[calls["name"].str.startswith("dot_product_attention")]
    fwd = 4 * 8 * 16 * 1024 * 1024 * 64 / 2
    assert set(attention["flops"]) == {fwd, 2.5 * fwd}


def test_h100_sample_attention_backward_is_compute_bound_without_its_workspace():
    ops = diagnosed(SAMPLES / "gpu_h100_attention_pair_nocb" / "after").analysis.ops.set_index("op_name")
    bwd = ops.loc["dot_product_attention_bwd.16"]
    # 5 [8,1024,16,64] bf16 inputs + f32 stats + 3 gradients; the 34 MB u8 workspace is not counted.
    assert bwd["hbm_bytes"] == 8 * (16 << 20) + 8 * 16 * 1024 * 4
    assert bwd["bound_by"] == "compute" and bwd["efficiency"] < 1


def test_unpriced_share_makes_mfu_a_lower_bound_and_is_reported():
    """The H100 recording with command buffers: ~89% of the step is in command_buffer ops XLA's dump does not
    price. MFU reads 'at least'; JSON, text and Markdown say how much is unpriced."""
    report = diagnosed(SAMPLES / "gpu_h100_attention_pair" / "after")
    data = report.to_dict()
    assert data["unpriced_share"] > 0.8 and data["mfu_at_least"] is True
    assert "MFU at least " in data["headline"]
    assert "of the step's op time is in ops with no cost model" in report.to_text()
    assert "**Unpriced:**" in report.to_markdown()
    assert ">Unpriced<" in report.to_html()
    priced = report_data(SAMPLES / "gpu_h100_attention_pair_nocb" / "after")
    assert priced["unpriced_share"] == 0 and priced["mfu_at_least"] is False
    assert "at least" not in priced["headline"]


def test_compare_warns_when_a_predicted_side_is_unpriced(tmp_path):
    data = report_data(REPO / "sample_profiles" / "hlo_rules_matmul_compute_bound", chip="v6e")
    assert data["measured"] is False
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(data))
    new.write_text(json.dumps({**data, "unpriced_share": 0.2}))
    warnings = xladiag.compare(base, new).to_dict()["warnings"]
    assert [w for w in warnings if "20.0% of the step" in w and "not meaningful" in w]
    assert not [w for w in xladiag.compare(base, base).to_dict()["warnings"] if "cost model" in w]



def test_gpu_ops_list_their_kernels_with_times_per_execution():
    """One event per op execution keeps each op's kernels visible: the MI300 convolution's Im3d2Col + GEMM,
    the H100 attention backward's cuDNN kernels; their times per execution add up to the op's."""
    conv = diagnosed(SAMPLES / "gpu_mi300_jax_conv").analysis.ops.set_index("op_name").loc["cudnn-conv.1"]
    listed = conv["kernels"].split("; ")
    assert len(listed) == 2 and listed[0].startswith("Cijk_") and listed[1].startswith("Im3d2Col.kd ")
    ops = report_data(SAMPLES / "gpu_h100_attention_pair_nocb" / "after")["ops"]
    bwd = next(o for o in ops if o["name"] == "dot_product_attention_bwd.16")
    kernels = bwd["kernels"].split("; ")
    assert kernels[0].startswith("cudnn_generated_fort_native_sdpa_sm90_flash_bprop") and len(kernels) == 4
    assert all("(" not in k for k in kernels)  # C++ argument lists cut off
    micros = sum(float(k.rsplit(" ", 2)[1]) for k in kernels if k.endswith(" µs"))
    assert micros * 1e-6 == pytest.approx(bwd["mean_s"], rel=0.05)
    assert all(o["kernels"] for o in ops)
    assert all(o["kernels"] is None for o in report_data(SAMPLES / "cpu_jax_train_step")["ops"])

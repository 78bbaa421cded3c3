"""HLO-only mode counts what runs: a while body its trip count times per step (nested loops multiply), a
conditional as its costliest branch (an upper bound), kernels from their cost estimate or shapes, and kernels
nobody can count as bound 'unknown', never 'hbm'. Each expectation is hand arithmetic on the chip's numbers."""

from __future__ import annotations

import math
import warnings

import pytest

from xladiag.analyzer.analysis import analyze

REL = 0.02
STATE = "(s32[], bf16[128,4096]{1,0}, bf16[32,4096,4096]{2,1,0})"
# One scanned layer: slice this layer's weight out of the stacked ones, multiply.
BODY = f"""%body (p: {STATE}) -> {STATE} {{
  %p = {STATE} parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = bf16[128,4096]{{1,0}} get-tuple-element(%p), index=1
  %ws = bf16[32,4096,4096]{{2,1,0}} get-tuple-element(%p), index=2
  %zero = s32[] constant(0)
  %w = bf16[1,4096,4096]{{2,1,0}} dynamic-slice(%ws, %i, %zero, %zero), dynamic_slice_sizes={{1,4096,4096}}
  %w2 = bf16[4096,4096]{{1,0}} bitcast(%w)
  %y = bf16[128,4096]{{1,0}} dot(%x, %w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = {STATE} tuple(%next, %y, %ws)
}}

%cond (c: {STATE}) -> pred[] {{
  %c = {STATE} parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(32)
  ROOT %lt = pred[] compare(%ci, %n), direction=LT
}}
"""
ENTRY = f"""ENTRY %main (x0: bf16[128,4096], ws0: bf16[32,4096,4096]) -> bf16[128,4096] {{
  %x0 = bf16[128,4096]{{1,0}} parameter(0)
  %ws0 = bf16[32,4096,4096]{{2,1,0}} parameter(1)
  %c0 = s32[] constant(0)
  %init = {STATE} tuple(%c0, %x0, %ws0)
  %loop = {STATE} while(%init), condition=%cond, body=%body{{config}}
  ROOT %out = bf16[128,4096]{{1,0}} get-tuple-element(%loop), index=1
}}
"""


def _analysis(tmp_path, text: str, chip: str = "v6e"):
    (tmp_path / "module_0001.jit_step.cpu_after_optimizations.txt").write_text("HloModule jit_step\n\n" + text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze(hlo_dir=tmp_path, chip=chip)


def _layer_s(chip) -> float:
    """One layer at its roofline: the dot, max(FLOPs / peak, bytes / HBM), plus the weight slice (read and
    written once: 2 x 4096 x 4096 bf16)."""
    dot_flops = 2 * 128 * 4096 * 4096
    dot_bytes = (128 * 4096 + 4096 * 4096 + 128 * 4096) * 2
    dot_s = max(dot_flops / chip.peak_flops_per_s("bf16"), dot_bytes / chip.hbm_bytes_per_s)
    return dot_s + 2 * 4096 * 4096 * 2 / chip.hbm_bytes_per_s


@pytest.mark.parametrize("config", [', backend_config={"known_trip_count":{"n":"32"}}', ""])
def test_scanned_layers_run_trip_count_times(tmp_path, config):
    # With known_trip_count, and without it from the condition 'counter < 32'.
    a = _analysis(tmp_path, BODY + ENTRY.replace("{config}", config))
    ops = a.ops.set_index("op_name")
    assert ops.loc["y", "occurrences_per_step"] == 32 and ops.loc["lt", "occurrences_per_step"] == 33
    assert ops.loc["loop", "occurrences_per_step"] == 1
    assert a.ideal_step_s == pytest.approx(32 * _layer_s(a.chip), rel=REL)
    assert "runs 32x" in ops.loc["y", "cost_note"]


def test_nested_loops_multiply(tmp_path):
    # An outer loop of 4 microbatches around the 32-layer scan: the dot runs 128 times per step.
    outer_state = f"(s32[], {STATE})"
    outer = f"""%outer_body (q: {outer_state}) -> {outer_state} {{
  %q = {outer_state} parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %s = {STATE} get-tuple-element(%q), index=1
  %loop = {STATE} while(%s), condition=%cond, body=%body, backend_config={{"known_trip_count":{{"n":"32"}}}}
  %one = s32[] constant(1)
  %j1 = s32[] add(%j, %one)
  ROOT %r = {outer_state} tuple(%j1, %loop)
}}

%outer_cond (oc: {outer_state}) -> pred[] {{
  %oc = {outer_state} parameter(0)
  %k = s32[] get-tuple-element(%oc), index=0
  %four = s32[] constant(4)
  ROOT %lt4 = pred[] compare(%k, %four), direction=LT
}}

ENTRY %main (x0: bf16[128,4096], ws0: bf16[32,4096,4096]) -> bf16[128,4096] {{
  %x0 = bf16[128,4096]{{1,0}} parameter(0)
  %ws0 = bf16[32,4096,4096]{{2,1,0}} parameter(1)
  %c0 = s32[] constant(0)
  %init = {STATE} tuple(%c0, %x0, %ws0)
  %oinit = {outer_state} tuple(%c0, %init)
  %mb = {outer_state} while(%oinit), condition=%outer_cond, body=%outer_body, backend_config={{"known_trip_count":{{"n":"4"}}}}
  %st = {STATE} get-tuple-element(%mb), index=1
  ROOT %out = bf16[128,4096]{{1,0}} get-tuple-element(%st), index=1
}}
"""
    a = _analysis(tmp_path, BODY + outer)
    ops = a.ops.set_index("op_name")
    assert ops.loc["y", "occurrences_per_step"] == 4 * 32 and ops.loc["j1", "occurrences_per_step"] == 4
    assert a.ideal_step_s == pytest.approx(4 * 32 * _layer_s(a.chip), rel=REL)


def test_conditional_costs_its_costliest_branch(tmp_path):
    text = """%cheap (a: bf16[1024,1024]) -> bf16[1024,1024] {
  %a = bf16[1024,1024]{1,0} parameter(0)
  ROOT %neg = bf16[1024,1024]{1,0} negate(%a)
}

%dear (b: bf16[1024,1024]) -> bf16[1024,1024] {
  %b = bf16[1024,1024]{1,0} parameter(0)
  %mm = bf16[1024,1024]{1,0} dot(%b, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %mm2 = bf16[1024,1024]{1,0} dot(%mm, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (i: s32[], x: bf16[1024,1024]) -> bf16[1024,1024] {
  %i = s32[] parameter(0)
  %x = bf16[1024,1024]{1,0} parameter(1)
  ROOT %pick = bf16[1024,1024]{1,0} conditional(%i, %x, %x), branch_computations={%cheap, %dear}
}
"""
    a = _analysis(tmp_path, text)
    chip = a.chip
    # The dear branch: two 1024^3 matmuls, each reading two operands and writing one (2 MiB each).
    mm_s = 2 * max(2 * 1024 ** 3 / chip.peak_flops_per_s("bf16"), 3 * 1024 * 1024 * 2 / chip.hbm_bytes_per_s)
    neg_s = 2 * 1024 * 1024 * 2 / chip.hbm_bytes_per_s
    assert mm_s > neg_s
    assert a.ideal_step_s == pytest.approx(mm_s, rel=REL)  # not mm_s + neg_s, the sum of branches
    ops = a.ops.set_index("op_name")
    assert ops.loc["neg", "occurrences_per_step"] == 0
    assert "upper bound" in ops.loc["mm", "cost_note"]
    assert any("upper bound" in w and "pick" in w for w in a.warnings)


def _kernel(tmp_path, line: str, chip: str):
    text = f"""ENTRY %main (a: bf16[4096,4096], b: bf16[4096,4096]) -> bf16[4096,4096] {{
  %a = bf16[4096,4096]{{1,0}} parameter(0)
  %b = bf16[4096,4096]{{1,0}} parameter(1)
  ROOT %k = bf16[4096,4096]{{1,0}} {line}
}}
"""
    a = _analysis(tmp_path, text, chip)
    return a, a.ops.set_index("op_name").loc["k"]


def test_pallas_kernel_priced_from_its_cost_estimate(tmp_path):
    # A Pallas matmul of 4096^3: 2 x 4096^3 = 1.37e11 FLOPs; JAX writes the estimate into the backend config.
    flops = 2 * 4096 ** 3
    # As the v6e dump prints it (proto JSON: int64 as strings).
    config = ('{"flag_configs":[],"scoped_memory_configs":[],"custom_call_config":{"body":"TUxJUh","cost_estimate":'
              f'{{"flops":"{flops}","transcendentals":"0","bytes_accessed":"100663296"}},"needs_layout_passes":true}}}}')
    a, k = _kernel(tmp_path, f'custom-call(%a, %b), custom_call_target="tpu_custom_call", backend_config={config}',
                   "v6e")
    assert k["flops"] == flops and k["bound_by"] == "compute"
    assert k["predicted_s"] == pytest.approx(flops / a.chip.peak_flops_per_s("bf16"), rel=REL)
    assert "cost_estimate" in k["cost_note"]
    assert a.unknown_flops_share == 0


def test_kernel_without_flops_is_bound_unknown(tmp_path):
    a, k = _kernel(tmp_path, 'custom-call(%a, %b), custom_call_target="my_kernel"', "v6e")
    assert k["bound_by"] == "unknown" and k["bound_by"] != "hbm"
    # No time from its bytes alone (that priced it as an HBM copy): unpriced, and the shares say so.
    assert math.isnan(k["predicted_s"])
    assert a.unknown_flops_share == pytest.approx(1.0) and a.unpriced_share == pytest.approx(1.0)


def test_cudnn_fused_attention_from_shapes(tmp_path):
    # Q, K, V as [B=2, H=6, S=2048, D=128] (dimension numbers as XLA prints them), causal mask: 4·B·H·S²·D / 2.
    qkv = "bf16[2,6,2048,128]{3,2,1,0}"
    config = ('{"cudnn_fmha_backend_config":{"fmha_scale":0.088,"mask_type":"CAUSAL","bmm1_dot_dimension_numbers":'
              '{"lhs_contracting_dimensions":["3"],"rhs_contracting_dimensions":["3"],"lhs_batch_dimensions":'
              '["0","1"],"rhs_batch_dimensions":["0","1"]}}}')
    text = f"""ENTRY %main (q: {qkv}) -> {qkv} {{
  %q = {qkv} parameter(0)
  %f = ({qkv}, u8[0]{{0}}) custom-call(%q, %q, %q), custom_call_target="__cudnn$fmhaSoftmax", backend_config={config}
  ROOT %o = {qkv} get-tuple-element(%f), index=0
}}
"""
    a = _analysis(tmp_path, text, "h100")
    f = a.ops.set_index("op_name").loc["f"]
    assert f["flops"] == pytest.approx(4 * 2 * 6 * 2048 * 2048 * 128 / 2, rel=REL)
    assert "causal" in f["cost_note"] and f["bound_by"] == "compute"


def test_trace_zero_flops_of_a_pallas_kernel_is_unknown_not_hbm():
    # The v6e-style trace gives a tpu_custom_call 0 FLOPs and its bytes: a Pallas matmul of ≈ 8.6 GFLOP in 76 µs
    # must not read as HBM-bound at efficiency 0.27 (the bug report); a plain fusion's 0 FLOPs stay 0.
    import pandas as pd

    from xladiag.analyzer.chips import catalog as chip_catalog
    from xladiag.analyzer.hlo.facts import attach_hlo_facts
    from xladiag.analyzer.models.collective_pricing import price_collectives
    from xladiag.analyzer.models.roofline import predict_ops

    chip = chip_catalog.load_catalog(None).get("v6e")
    ops = pd.DataFrame({"module": "jit_step", "program_id": "1", "op_name": ["pallas", "copy"], "mean_s": [76e-6, 1e-5],
                        "occurrences": 1, "occurrences_per_step": 1.0})
    md = pd.DataFrame({"program_id": "1", "op_name": ["pallas", "copy"],
                       "hlo_text": ['%pallas = bf16[4096,4096]{1,0} custom-call(bf16[4096,4096]{1,0} %a), '
                                    'custom_call_target="tpu_custom_call"',
                                    "%copy = bf16[4096,4096]{0,1} copy(bf16[4096,4096]{1,0} %a)"],
                       "category": ["custom-call", "data formatting"], "flops": [0.0, 0.0], "model_flops": [0.0, 0.0],
                       "bytes_accessed": [2 * 4096 * 4096 * 2.0] * 2, "hbm_bytes": [2 * 4096 * 4096 * 2.0] * 2,
                       "tf_op": "", "source": ""})
    out = predict_ops(price_collectives(attach_hlo_facts(ops, md, {}), chip, 1), chip).set_index("op_name")
    assert out.loc["pallas", "bound_by"] == "unknown" and pd.isna(out.loc["pallas", "efficiency"])
    assert out.loc["copy", "bound_by"] == "hbm" and out.loc["copy", "flops"] == 0

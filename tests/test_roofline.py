"""Single-op and step rooflines against the worked answers of roofline.md (each to 2 %)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.analyzer.models.roofline import arithmetic_intensity, op_roofline, predict_ops, step_roofline

REL = 0.02


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_worked_1_ffw_matmul_on_tpu_v2():
    # bf16[32,1024,8192] . bf16[8192,32768] on 8 TPU v2 cores at 2.3e13 FLOP/s each: 95.6 ms (measured 96 ms)
    flops = 2 * 32 * 1024 * 8192 * 32768
    bytes_hbm = 2 * (32 * 1024 * 8192 + 8192 * 32768 + 32 * 1024 * 32768)
    # HBM: 7e11 B/s per TPU v2 chip, 2 cores per chip -> 4 chips (only used to show the op is compute-bound)
    t_compute_s, t_memory_s, predicted_s = op_roofline(flops, bytes_hbm, 2.3e13 * 8, 4 * 7.0e11)
    assert predicted_s == pytest.approx(95.6e-3, rel=REL)
    assert predicted_s == t_compute_s > t_memory_s
    assert isinstance(predicted_s, float)


def test_worked_5_one_teraflop(catalog):
    # 1e12 FLOPs: H100 at 9.89e14 -> 1.01 ms; TPU v6e (~9.1e14) -> 1.1 ms
    _, _, h100_s = op_roofline(1e12, 0.0, catalog["h100"].peak_flops_per_s("bf16"), catalog["h100"].hbm_bytes_per_s)
    _, _, v6e_s = op_roofline(1e12, 0.0, catalog["v6e"].peak_flops_per_s("bf16"), catalog["v6e"].hbm_bytes_per_s)
    assert h100_s == pytest.approx(1.01e-3, rel=REL)
    assert v6e_s == pytest.approx(1.1e-3, rel=REL)


def test_worked_6_inference_memory_bound_over_16_v5e(catalog):
    # batch 4 x 8192 tokens x 100 kB KV + 30e9 int8 weights, read once per token over 16 v5e chips.
    # The book rounds (4*819e6 + 30e9) / (16 * 8.1e11) = 2.57 ms to "about 2.5 ms".
    v5e = catalog["v5e"]
    total_bytes = 4 * 819e6 + 30e9
    _, t_memory_s, predicted_s = op_roofline(0.0, total_bytes / 16, v5e.peak_flops_per_s("s8"), v5e.hbm_bytes_per_s)
    assert predicted_s == t_memory_s == pytest.approx(2.567e-3, rel=REL)
    assert 2.4e-3 < predicted_s < 2.6e-3


def test_intensity_and_roofline_broadcast():
    flops = np.array([1e9, 0.0, 5.0])
    bytes_hbm = np.array([1e6, 1e6, 0.0])
    np.testing.assert_allclose(arithmetic_intensity(flops, bytes_hbm), [1000.0, 0.0, np.nan])
    t_c, t_m, pred = op_roofline(flops, bytes_hbm, 1e12, 1e9)
    np.testing.assert_allclose(pred, [1e-3, 1e-3, 5e-12])


def test_predict_ops_real_v6e_loop_fusion_near_roofline(catalog):
    # roofline.md: broadcast_add_fusion moves 10.74 GB per run in 7.3-8.4 ms on a v6e whose trace peak is
    # 1637.99 GB/s => 78-89 % of peak, memory-bound.
    v6e = catalog["v6e"].with_trace_peaks(peak_flops_per_s=918e12, hbm_bytes_per_s=1637.99e9)
    ops = pd.DataFrame(
        {
            "name": ["broadcast_add_fusion", "broadcast_add_fusion.1"],
            "flops": [1.34e9, 1.34e9],  # ~1 FLOP per f32 output element: negligible next to the bytes
            "bytes_accessed": [10.74e9, 10.74e9],
            "dtype": ["f32", "f32"],
            "measured_s": [7.3e-3, 8.4e-3],
        }
    )
    out = predict_ops(ops, v6e)
    assert list(out["bound_by"]) == ["hbm", "hbm"]
    np.testing.assert_allclose(out["predicted_s"], 10.74e9 / 1637.99e9, rtol=1e-9)
    np.testing.assert_allclose(out["efficiency"], [0.8985, 0.7808], rtol=REL)
    assert (out["arithmetic_intensity"] < v6e.peak_flops_per_s("f32") / v6e.hbm_bytes_per_s).all()
    assert list(ops.columns) == ["name", "flops", "bytes_accessed", "dtype", "measured_s"]  # input untouched


def test_predict_ops_dtype_host_collective_and_unknown_rows(catalog):
    h100 = catalog["h100"]
    ops = pd.DataFrame(
        {
            "flops": [1.979e12, 1.979e12, 0.0, np.nan, 0.0, 0.0],
            "bytes_accessed": [1e6, 1e6, 5.37e9, np.nan, 0.0, 8e6],
            "hbm_bytes": [np.nan, 2e6, 0.0, np.nan, np.nan, np.nan],
            "host_bytes": [0.0, 0.0, 5.37e9, 0.0, 0.0, 0.0],
            "dtype": ["f8e4m3fn", "bf16", "f32", None, "pred", "bf16"],
            "measured_s": [2e-3, 4e-3, 0.2, 1e-5, 1e-6, 1e-4],
            "collective_predicted_s": [np.nan, np.nan, np.nan, np.nan, np.nan, 3e-5],
            "collective_bound_by": [None, None, None, None, None, "latency"],
        }
    )
    out = predict_ops(ops, h100)
    # fp8 matmul against the fp8 peak (1.979e15) -> 1 ms; the same FLOPs in bf16 -> 2 ms
    assert out.loc[0, "t_compute_s"] == pytest.approx(1e-3)
    assert out.loc[1, "t_compute_s"] == pytest.approx(1.979e12 / 9.89e14)
    assert out.loc[1, "t_memory_s"] == pytest.approx(2e6 / 3.35e12)  # hbm_bytes preferred
    assert list(out["bound_by"]) == ["compute", "compute", "host", "unknown", "latency", "latency"]
    # host transfer: 5.37 GB over PCIe Gen5 (6.4e10 B/s) = 83.9 ms, i.e. 42 % of the 200 ms measured
    assert out.loc[2, "t_host_s"] == pytest.approx(5.37e9 / 6.4e10)
    assert out.loc[2, "efficiency"] == pytest.approx(5.37e9 / 6.4e10 / 0.2)
    assert math.isnan(out.loc[3, "predicted_s"]) and math.isnan(out.loc[3, "efficiency"])
    assert out.loc[5, "predicted_s"] == 3e-5  # collective model wins over the 8 MB memory time
    assert out.loc[0, "efficiency"] == pytest.approx(0.5)


def test_predict_ops_minimal_columns(catalog):
    out = predict_ops(pd.DataFrame({"flops": [9.18e14], "bytes_accessed": [0.0]}), catalog["v6e"])
    assert out.loc[0, "predicted_s"] == pytest.approx(1.0)
    assert out.loc[0, "bound_by"] == "compute"
    assert math.isnan(out.loc[0, "efficiency"])
    assert len(predict_ops(pd.DataFrame({"flops": [], "bytes_accessed": []}), catalog["v6e"])) == 0


def test_step_roofline_mfu_and_ideal_step():
    # 4 chips at 1e14 FLOP/s, 0.5 s step, 1e14 useful FLOPs per step => MFU 1e14 / (0.5 * 4e14) = 50 %
    ops = pd.DataFrame({"predicted_s": [0.01, 0.02, np.nan], "occurrences": [30, 10, 5]})
    result = step_roofline(0.5, 1e14, model_flops=1e14, num_chips=4, ops=ops, steps=2)
    assert result.mfu == pytest.approx(0.5)
    assert result.ideal_step_s == pytest.approx((0.01 * 30 + 0.02 * 10) / 2)
    assert result.roofline_fraction == pytest.approx(0.25 / 0.5)
    bare = step_roofline(0.5, 1e14)
    assert math.isnan(bare.mfu) and math.isnan(bare.ideal_step_s)

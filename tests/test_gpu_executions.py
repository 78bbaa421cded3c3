"""An HLO op that launches several GPU kernels per execution is one execution, not several.

The bundled MI300 capture runs each `cudnn-conv.1` as Im3d2Col then a GEMM (two kernels): counted as two
executions its FLOPs doubled (MFU 4.35 % where it is about 2.2 %). The H100 recordings launch two kernels per
cuBLAS GEMM custom call and three per FFT: counted per kernel, each kernel's time looked like a whole op's and
the GEMMs' FLOPs were dropped as faster than the chip.
"""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import GPU_SAMPLE, SAMPLES, diagnosed
from xladiag.analyzer.capture.gpu_cpu_ops import kernel_metadata, one_event_per_execution


def _events(rows):
    return pd.DataFrame(rows, columns=["device", "module", "program_id", "op_name", "start_ps", "duration_ps",
                                       "span_ps", "line", "launch_ps"])


def test_kernels_of_one_execution_merge_and_keep_their_summed_time():
    rows = [(0, "m", "1", "conv", 0, 10, 10, "s", 5), (0, "m", "1", "conv", 30, 100, 100, "s", 6),  # execution 1
            (0, "m", "1", "add", 140, 5, 5, "s", 7),
            (0, "m", "1", "conv", 200, 10, 10, "s", 8), (0, "m", "1", "conv", 215, 100, 100, "s", -1),  # execution 2
            (0, "m", "1", "add", 400, 5, 5, "s", 9), (0, "m", "1", "add", 410, 5, 5, "s", 10)]  # one kernel: two runs
    kernels = pd.Series(["im2col", "gemm", "add_k", "im2col", "gemm", "add_k", "add_k"])
    out = one_event_per_execution(_events(rows), kernels)
    conv = out[out["op_name"] == "conv"]
    assert conv["start_ps"].tolist() == [0, 200] and conv["duration_ps"].tolist() == [110, 110]
    assert conv["span_ps"].tolist() == [130, 115] and conv["launch_ps"].tolist() == [5, 8]
    assert (out["op_name"] == "add").sum() == 3  # an op with one kernel is unchanged, however often it runs
    assert out["duration_ps"].sum() == _events(rows)["duration_ps"].sum()


def test_mi300_convolution_runs_once_per_step_and_mfu_halves():
    report = diagnosed(GPU_SAMPLE)
    ops = report.analysis.ops
    conv = ops[ops["op_name"].astype(str) == "cudnn-conv.1"].iloc[0]
    assert conv["occurrences_per_step"] == pytest.approx(1.0)
    assert report.analysis.mfu == pytest.approx(0.0221, abs=0.001)


def test_h100_gemms_and_ffts_count_executions_and_keep_their_flops():
    ops = diagnosed(SAMPLES / "gpu_h100_attention_pair_nocb" / "before").analysis.ops
    step = ops[ops["in_step"]]
    gemms = step[step["op_name"].astype(str).str.startswith("custom-call")]
    ffts = step[step["op_name"].astype(str).str.startswith("fft")]
    assert len(gemms) >= 8 and len(ffts) >= 6  # forward, backward and remat FFTs of two layers
    assert (gemms["occurrences_per_step"] == 1.0).all() and (ffts["occurrences_per_step"] == 1.0).all()
    assert gemms["flops"].notna().all()  # no longer read as faster than the chip


def test_missing_names_merge_as_pandas_compares_them():
    # A kernel with no op name (NaN) never continues an execution; a missing program id takes the execution's
    # first present one; a kernel with no name continues its op's execution (NaN equals no first kernel).
    nan = float("nan")
    rows = [(0, "m", nan, "conv", 0, 10, 10, "s", -1), (0, "m", "1", "conv", 20, 10, 10, "s", 4),
            (0, "m", "1", nan, 40, 5, 5, "s", 7), (0, "m", "1", nan, 50, 5, 5, "s", 8),
            (0, "m", "1", "dot", 60, 5, 5, "s", -1), (0, "m", nan, "dot", 70, 5, 5, "s", -1)]
    kernels = pd.Series(["im2col", "gemm", "k", "k2", "d1", None])
    out = one_event_per_execution(_events(rows), kernels)
    assert out["start_ps"].tolist() == [0, 40, 50, 60]
    assert out["program_id"].tolist() == ["1", "1", "1", "1"] and out["launch_ps"].tolist() == [4, 7, 8, -1]
    assert out["duration_ps"].tolist() == [20, 5, 5, 10] and out["span_ps"].tolist() == [30, 5, 5, 15]
    per_kernel = _events(rows).assign(_kernel=kernels.fillna("").to_numpy())
    listed = kernel_metadata(per_kernel, out)
    # Keyed by (program id, op): the kernel without a program id is its own op; kernels without an op are left out.
    assert list(zip(listed["program_id"], listed["op_name"], listed["kernels"])) == [
        ("", "conv", "im2col 10 ps"), ("1", "conv", "gemm 10 ps"), ("1", "dot", "d1 5 ps")]

"""Framework-aware fixes: the program's framework is read from what XLA kept of it, and every rule's fix names
that framework's levers: no Layout.AUTO, MaxText key or cudnn_flash_te for PyTorch/XLA or TensorFlow, no
MaxText Qwix recipe for TransformerEngine, and every name a fix prints is a verified lever."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from builders import scenarios as xb
from conftest import SAMPLES
from test_levers import _names
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hlo.framework import detect_framework
from xladiag.api import diagnose
from xladiag.rules import levers
from xladiag.rules.registry import run_rules

JAX_ONLY = ("Layout.AUTO", "cudnn_flash_te", "jax.", "PartitionSpec", "MaxText ")  # "MaxText's" (a source) may stay
# Every MaxText key and JAX API of the verified list: none may be named to another framework's program.
JAX_LEVERS = {n for n, lv in levers.LEVERS.items() if lv.kind in ("maxtext", "jax")}
# Captures and dumps on which, between them, every rule with a framework-specific lever fires.
HLO_CASES = [("hlo_rules_attention_naive", "h100"), ("hlo_rules_attention_naive", "v6e"),
             ("hlo_rules_dot_k200_n72", "v6e"), ("hlo_rules_matmul_compute_bound", "h100"),
             ("hlo_rules_hbm_near_full", "v6e"), ("hlo_rules_hbm_remat", "v6e"), ("hlo_rules_fsdp_256_tokens", "v6e")]
SCENARIOS = (xb.layout_copies, xb.remat_fusions, xb.tiny_all_gathers, xb.host_offload_exposed, xb.exposed_all_gather)


def _ops(**columns) -> pd.DataFrame:
    n = len(next(iter(columns.values())))
    base = {"module": [""] * n, "tf_op": [""] * n, "source": [""] * n, "hlo_text": [""] * n}
    return pd.DataFrame({**base, **columns})


@pytest.mark.parametrize("columns,measured,name,libraries", [
    ({"module": ["SyncTensorsGraph.1042"]}, True, "pytorch_xla", []),
    ({"module": ["IrToHlo.7"]}, False, "pytorch_xla", []),
    ({"tf_op": ["aten__mm"]}, False, "pytorch_xla", []),
    ({"module": ["jit_train_step"], "source": ["/app/MaxText/layers/attentions.py:310"]}, True, "jax", ["maxtext"]),
    ({"module": ["jit_step"], "source": ["/usr/lib/python3/site-packages/flax/linen/linear.py:250"]}, True, "jax",
     ["flax"]),
    ({"module": ["jit_step"], "hlo_text": ['%cc = bf16[8,8] custom-call(), custom_call_target="te_gemm_ffi"']},
     True, "jax", ["transformer_engine"]),
    ({"module": ["a_inference_train_step_1234__.567"]}, True, "tensorflow", []),
    ({"op_name": ["volta_sgemm_128x64_nn"]}, True, "tensorflow", []),  # TF ops only, no XLA program
    ({"op_name": ["fusion.1"]}, False, "unknown", []),
])
def test_the_framework_is_read_from_the_program(columns, measured, name, libraries):
    found = detect_framework(_ops(**columns), measured)
    assert found["name"] == name and found["libraries"] == libraries and found["evidence"]


def test_a_pytorch_xla_capture_says_so_in_the_json(tmp_path):
    template = [xb.matmul_fusion("fusion.1", 4096, 4096, 4096), xb.loop_fusion("add_fusion", [4096, 4096])]
    b, _ = xb.build_train_steps(template, program_name="SyncTensorsGraph.7")
    b.write(tmp_path)
    data = diagnose(tmp_path).to_dict()
    assert data["framework"]["name"] == "pytorch_xla" and "SyncTensorsGraph.7" in data["framework"]["evidence"]
    assert data["steps"]["program"] == "SyncTensorsGraph.7"


@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    out = [analyze(hlo_dir=SAMPLES / folder, chip=chip) for folder, chip in HLO_CASES]
    for scenario in SCENARIOS:
        path = tmp_path_factory.mktemp(scenario.__name__)
        scenario()[0].write(path)
        out.append(analyze(path))
    return out


def _findings_as(analyses, name, libraries=()):
    framework = {"name": name, "libraries": list(libraries), "evidence": "test"}
    return [f for a in analyses for f in run_rules(dataclasses.replace(a, framework=framework))]


@pytest.mark.parametrize("framework", ["pytorch_xla", "tensorflow"])
def test_other_frameworks_get_their_own_levers(analyses, framework):
    findings = _findings_as(analyses, framework)
    fired = {f.rule for f in findings}
    assert {"retiling-copy", "materialized-attention", "mxu-padding", "remat-overhead", "hbm-headroom",
            "low-precision", "sharding-intensity", "exposed-collective", "latency-bound-collective"} <= fired
    for f in findings:
        assert not [w for w in JAX_ONLY if w in f.fix], (f.rule, f.fix)
        assert not _names(f.fix) & JAX_LEVERS, (f.rule, f.fix)
        assert {n for n in _names(f.fix) if n not in levers.LEVERS} == set(), (f.rule, f.fix)
    jax = {f.rule: f.fix for f in _findings_as(analyses, "jax")}
    assert "Layout.AUTO" in jax["retiling-copy"] and "MaxText" in jax["mxu-padding"]  # JAX keeps its levers
    if framework == "pytorch_xla":
        text = " ".join(f.fix for f in findings)
        assert "torch_xla.utils.checkpoint.checkpoint" in text and "mark_sharding" in text
        assert "torch_xla.experimental.custom_kernel.flash_attention" in text  # the TPU attention case


def test_transformer_engine_gets_fp8_autocast_not_qwix(analyses):
    findings = _findings_as(analyses, "jax", ["transformer_engine"])
    lp = [f for f in findings if f.rule == "low-precision"]
    assert lp and all("fp8_autocast" in f.fix and "qwix" not in f.fix.lower() and "fp8_gpu" not in f.fix
                      for f in lp)
    gpu_attention = [f for f in findings if f.rule == "materialized-attention" and "DotProductAttention" in f.fix]
    assert gpu_attention and all("cudnn_flash_te" not in f.fix for f in gpu_attention)
    for f in findings:
        assert {n for n in _names(f.fix) if n not in levers.LEVERS} == set(), (f.rule, f.fix)

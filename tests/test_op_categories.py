"""Categories from opcodes and fusion kinds; from whole words of the name only when there is no HLO."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from conftest import GPU_SAMPLE
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hlo.op_categories import category_from_hlo, category_from_name
from xladiag.parsers.hlo_text import parse_instruction


@pytest.mark.parametrize("name,category", [
    ("loop_convert_fusion", "fusion"),  # 'convert' is not 'conv'
    ("tensorflow::functor::TensorConversionOp<float>", "other"),
    ("cudnn-conv.1", "convolution"),
    ("sm90_xmma_gemm_f32f32_tn", "convolution"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128", "other"),
    ("input_transpose_fusion.1", "data formatting"),
    ("copy.3", "data formatting"),
    ("convert_reduce_fusion", "fusion"),
])
def test_names_are_read_by_whole_words(name, category):
    assert category_from_name(name) == category


def test_hlo_wins_over_the_name():
    fusion = parse_instruction("%loop_convert_fusion = bf16[8]{0} fusion(f32[8]{0} %p), kind=kLoop, calls=%c")
    assert category_from_hlo(fusion, is_matmul=False) == "loop fusion"
    conv = parse_instruction("%conv_like = f32[8]{0} convert(bf16[8]{0} %p)")
    assert category_from_hlo(conv, is_matmul=False) == "convert"
    dot = parse_instruction("%fusion.7 = f32[8,8]{1,0} fusion(f32[8,8]{1,0} %a), kind=kOutput, calls=%c")
    assert category_from_hlo(dot, is_matmul=True) == "convolution fusion"


_CONVERTS = """
import sys, jax, jax.numpy as jnp
f = jax.jit(lambda x: (x.astype(jnp.bfloat16), jnp.sin(x).astype(jnp.int32)))
x = jnp.ones((256, 256))
jax.block_until_ready(f(x))
with jax.profiler.trace(sys.argv[1]):
    for _ in range(3):
        jax.block_until_ready(f(x))
"""


@pytest.mark.slow
def test_convert_ops_of_a_real_capture_are_not_convolutions(tmp_path):
    """A real JAX CPU capture (no dump) of dtype converts: its ops ('sine_convert_fusion', 'wrapped_convert')
    contain 'conv', which the old substring test called 'convolution'."""
    subprocess.run([sys.executable, "-c", _CONVERTS, str(tmp_path)], check=True, timeout=120,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops = analyze(tmp_path).ops
    convert = ops[ops["op_name"].str.contains("convert")]
    assert len(convert) == 2 and not convert["category"].str.contains("convolution").any()
    gpu = analyze(GPU_SAMPLE).ops.set_index("op_name")["category"]
    assert gpu["cudnn-conv.1"] == "convolution" and gpu["input_transpose_fusion"] == "data formatting"

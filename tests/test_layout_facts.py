"""Per-op layout facts kept from the parse: layout changes, fused opcodes, result bytes, recomputation."""

from __future__ import annotations

import pandas as pd

from xladiag.analyzer.hlo.layouts import is_recomputed, layout_change
from xladiag.parsers.hlo_text import parse_shape as s


def test_layout_change_classification():
    assert layout_change(s("bf16[8,128]{0,1:T(8,128)}"), s("bf16[8,128]{1,0:T(8,128)}")) == "layout"
    assert layout_change(s("bf16[16,128]{1,0:T(4,128)}"), s("bf16[16,128]{1,0:T(8,128)(2,1)}")) == "tiling"
    # A TPU copy that also converts counts only when the dimension order changes (tiles follow the dtype).
    assert layout_change(s("bf16[1024,4,14336]{2,0,1:T(8,128)(2,1)}"),
                         s("f32[1024,4,14336]{2,1,0:T(4,128)}")) == "layout"
    assert layout_change(s("bf16[8,128]{1,0:T(8,128)(2,1)}"), s("f32[8,128]{1,0:T(8,128)}")) is None
    assert layout_change(s("bf16[128,8]{1,0}"), s("bf16[8,128]{1,0}")) == "transpose"
    assert layout_change(s("bf16[8,128]{1,0:S(1)}"), s("bf16[8,128]{1,0}")) is None  # memory space
    assert layout_change(s("f32[8,128]{1,0}"), s("bf16[8,128]{1,0}")) is None  # a convert


def test_recomputation_by_clone_name_or_jax_path():
    names = pd.Series(["fusion.12.remat2", "fusion.12", "copy.remat", "fusion.3"])
    paths = pd.Series([None, "jit(f)/checkpoint/rematted_computation/dot", None, "jit(f)/dot"])
    assert is_recomputed(names, paths).tolist() == [True, True, True, False]

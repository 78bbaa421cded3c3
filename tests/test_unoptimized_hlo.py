# ruff: noqa: E501 (HLO lines as XLA writes them)
"""An HLO module XLA has not optimized (a before-optimizations dump: unscheduled, no fusions) is priced with a
warning naming its after-optimizations file; an optimized module gets none."""

from __future__ import annotations

from xladiag.api import diagnose

BEFORE = """HloModule jit_mlp, entry_computation_layout={(f32[256,512]{1,0}, f32[512,1024]{1,0})->f32[256,1024]{1,0}}

ENTRY %main.6 (x.1: f32[256,512], w.2: f32[512,1024]) -> f32[256,1024] {
  %x.1 = f32[256,512]{1,0} parameter(0)
  %w.2 = f32[512,1024]{1,0} parameter(1)
  %dot.3 = f32[256,1024]{1,0} dot(f32[256,512]{1,0} %x.1, f32[512,1024]{1,0} %w.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %constant.4 = f32[] constant(0)
  %broadcast.5 = f32[256,1024]{1,0} broadcast(f32[] %constant.4), dimensions={}
  ROOT %maximum.6 = f32[256,1024]{1,0} maximum(f32[256,1024]{1,0} %dot.3, f32[256,1024]{1,0} %broadcast.5)
}
"""

AFTER = """HloModule jit_mlp, is_scheduled=true, entry_computation_layout={(f32[256,512]{1,0}, f32[512,1024]{1,0})->f32[256,1024]{1,0}}

%fused_relu (p.0: f32[256,1024]) -> f32[256,1024] {
  %p.0 = f32[256,1024]{1,0} parameter(0)
  %constant.1 = f32[] constant(0)
  %broadcast.2 = f32[256,1024]{1,0} broadcast(f32[] %constant.1), dimensions={}
  ROOT %maximum.3 = f32[256,1024]{1,0} maximum(f32[256,1024]{1,0} %p.0, f32[256,1024]{1,0} %broadcast.2)
}

ENTRY %main.6 (x.1: f32[256,512], w.2: f32[512,1024]) -> f32[256,1024] {
  %x.1 = f32[256,512]{1,0} parameter(0)
  %w.2 = f32[512,1024]{1,0} parameter(1)
  %dot.3 = f32[256,1024]{1,0} dot(f32[256,512]{1,0} %x.1, f32[512,1024]{1,0} %w.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %relu_fusion = f32[256,1024]{1,0} fusion(f32[256,1024]{1,0} %dot.3), kind=kLoop, calls=%fused_relu
}
"""


def _warning(warnings) -> list[str]:
    return [w for w in warnings if "unoptimized HLO module" in w]


def test_a_before_optimizations_module_is_priced_with_a_warning(tmp_path):
    before = tmp_path / "module_0001.jit_mlp.before_optimizations.txt"
    before.write_text(BEFORE)
    data = diagnose(hlo_dir=before, chip="h100").to_dict()
    [warning] = _warning(data["warnings"])
    assert warning.startswith(before.name) and "*after_optimizations*" in warning
    assert data["ops"], "still priced"
    # With the after-optimizations file beside it, the warning names that file.
    after = tmp_path / "module_0001.jit_mlp.sm_9.0_gpu_after_optimizations.txt"
    after.write_text(AFTER)
    beside = tmp_path / "module_0001.jit_mlp.after_optimizations.txt"
    beside.write_text(AFTER)
    [warning] = _warning(diagnose(hlo_dir=before, chip="h100").to_dict()["warnings"])
    assert f"use {beside.name} beside it" in warning


def test_an_optimized_module_gets_no_such_warning(tmp_path):
    after = tmp_path / "module_0001.jit_mlp.sm_9.0_gpu_after_optimizations.txt"
    after.write_text(AFTER)
    assert _warning(diagnose(hlo_dir=tmp_path, chip="h100").to_dict()["warnings"]) == []
    # Scheduled or fused alone is enough to count as optimized (a small scheduled module may hold no fusion).
    after.write_text(AFTER.replace(", is_scheduled=true", ""))
    assert _warning(diagnose(hlo_dir=tmp_path, chip="h100").to_dict()["warnings"]) == []

"""remat-overhead: recomputed ops, their share of the step and what fits in HBM instead."""

from __future__ import annotations

import shutil
import warnings

import pytest

from builders import hlo_snippets, scenarios
from conftest import CPU_SAMPLE, HLO_SAMPLE
from rule_helpers import REL, analyze_scenario, only
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hlo.layouts import recomputed_instructions
from xladiag.parsers.hlo_text import parse_hlo_file
from xladiag.rules import remat_overhead


@pytest.mark.parametrize("x_pct", [8.0, 20.0, 35.0])
def test_remat_share_matches_injection(tmp_path, x_pct):
    analysis, exp = analyze_scenario(tmp_path, scenarios.remat_fusions, x_pct)
    f = only(remat_overhead.check(analysis), "remat-overhead")
    assert f.time_s_per_step == pytest.approx(exp["remat_s_per_step"], rel=REL)
    assert f.fraction_of_step == pytest.approx(x_pct / 100, rel=REL)
    assert {o.name for o in f.ops} == set(exp["remat_ops"])
    # Keeping the three recomputed results: bf16[1024,14336] + 2 x bf16[1024,4096].
    kept = hlo_snippets.array_bytes("bf16", [1024, 14336]) + 2 * hlo_snippets.array_bytes("bf16", [1024, 4096])
    assert f.details["extra_hbm_bytes"] == kept
    assert f.details["step_bound_by"] == "compute"
    assert f.details["hbm_headroom_bytes"] is None and f.confidence == "medium"  # no memory report: unknown
    assert f.est_savings_s_per_step == pytest.approx(f.time_s_per_step)
    assert "save_dot_with_context_except_mlp" in f.fix and "remat_policy" in f.fix
    assert f.severity == ("high" if x_pct >= 10 else "medium")


def test_remat_keeps_what_fits_when_hbm_is_short(tmp_path, monkeypatch):
    analysis, exp = analyze_scenario(tmp_path, scenarios.remat_fusions, 20.0)
    capacity = analysis.chip.hbm_capacity_bytes
    headroom = 17_000_000  # room for the two bf16[1024,4096] results (8.4 MB each), not bf16[1024,14336]
    monkeypatch.setattr(remat_overhead, "peak_memory_bytes", lambda a: capacity - headroom)
    f = only(remat_overhead.check(analysis), "remat-overhead")
    # Most seconds per byte first: fusion.14.remat2 (8.4 MB), convert_reduce_fusion.3.remat (8.4 MB); then
    # fusion.12.remat (29 MB) no longer fits.
    assert set(f.details["ops_that_fit"]) == {"fusion.14.remat2", "convert_reduce_fusion.3.remat"}
    per_op = exp["op_self_s_per_step"]
    fits = per_op["fusion.14.remat2"] + per_op["convert_reduce_fusion.3.remat"]
    assert f.est_savings_s_per_step == pytest.approx(fits, rel=REL)
    assert f.time_s_per_step == pytest.approx(exp["remat_s_per_step"], rel=REL)
    assert f.confidence == "high" and "offload" in f.fix and "pinned_host" in f.fix


def test_memory_report_of_another_module_is_not_used(tmp_path):
    """Only the analysed program's report counts: a report of another module (100x the bytes), or of a
    same-named module compiled with another id that the trace never ran, is ignored; without the program's
    own report the peak is unknown."""
    sample = tmp_path / "run"
    shutil.copytree(CPU_SAMPLE, sample)
    own = next((sample / "hlo").glob("*jit_train_step*memory-usage-report*"))
    hlo = next((sample / "hlo").glob("*jit_train_step*after_optimizations.txt"))
    other = own.with_name(own.name.replace("module_0000.jit_train_step", "module_0007.jit_eval_step"))
    other.write_text(own.read_text().replace("Total bytes: 8475728", "Total bytes: 847572800"))
    # The same program compiled again under id 9 (a recompile): not the traced program (id 0).
    shutil.copy(hlo, hlo.with_name(hlo.name.replace("module_0000.", "module_0009.")))
    shutil.copy(other, own.with_name(own.name.replace("module_0000.", "module_0009.")))
    analysis = analyze(sample)
    assert remat_overhead.peak_memory_bytes(analysis) == 8475728
    assert analysis.dump.analysed == ("jit_train_step (module_0000)",)
    own.unlink()
    assert remat_overhead.peak_memory_bytes(analyze(sample)) is None


def _rematted_instruction_lines(path) -> int:
    return sum(1 for line in path.read_text().splitlines()
               if " = " in line and "rematted_computation" in line)


def test_v6e_dump_counts_its_rematted_instructions():
    path = next(HLO_SAMPLE.glob("*.txt"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dump is cut off mid-computation
        module = parse_hlo_file(path)
    assert recomputed_instructions(module) == _rematted_instruction_lines(path) == 186

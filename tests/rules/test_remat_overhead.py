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
    # XLA's clones are real recomputation. Matmuls are 90 % of it, so the fix names a dots-saving policy, which
    # keeps the two matmul fusions' outputs (one more write each at HBM bandwidth) and still recomputes the rest.
    assert f.details["unverified_ops"] == 0
    assert f.details["ops_that_fit"] == ["fusion.12.remat", "fusion.14.remat2"]
    dots = hlo_snippets.array_bytes("bf16", [1024, 14336]) + hlo_snippets.array_bytes("bf16", [1024, 4096])
    assert f.details["keep_cost_s_per_step"] == pytest.approx(dots / analysis.chip.hbm_bytes_per_s)
    per_op = exp["op_self_s_per_step"]
    assert f.est_savings_s_per_step == pytest.approx(
        per_op["fusion.12.remat"] + per_op["fusion.14.remat2"] - f.details["keep_cost_s_per_step"], rel=REL)
    assert "save_dot_with_context_except_mlp" in f.fix and "remat_policy" in f.fix
    assert f.severity == ("high" if x_pct >= 10 else "medium")


def test_remat_keeps_what_fits_when_hbm_is_short(tmp_path, monkeypatch):
    analysis, exp = analyze_scenario(tmp_path, scenarios.remat_fusions, 20.0)
    capacity = analysis.chip.hbm_capacity_bytes
    headroom = 17_000_000  # room for bf16[1024,4096] results (8.4 MB each), not for bf16[1024,14336]
    monkeypatch.setattr(remat_overhead, "peak_memory_bytes", lambda a: capacity - headroom)
    f = only(remat_overhead.check(analysis), "remat-overhead")
    # The dots-saving policy's candidates are the two matmul fusions; most seconds per byte first:
    # fusion.14.remat2 (8.4 MB) fits, then fusion.12.remat (29 MB) no longer does.
    assert set(f.details["ops_that_fit"]) == {"fusion.14.remat2"}
    per_op = exp["op_self_s_per_step"]
    fits = per_op["fusion.14.remat2"]
    write = hlo_snippets.array_bytes("bf16", [1024, 4096]) / analysis.chip.hbm_bytes_per_s
    assert f.est_savings_s_per_step == pytest.approx(fits - write, rel=REL)
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


def test_recomputation_merged_by_cse_is_not_counted():
    """Ops named as recomputation count only while forward ops of their kind remain: when every instance of a
    kind carries the name (XLA's CSE merged the recomputation into the forward pass), none is recomputation."""
    analysis = analyze(CPU_SAMPLE)
    ops = analysis.ops
    remat = remat_overhead.recomputed_ops(analysis)
    assert remat_overhead.verified(analysis, remat).all()  # the sample's jax.checkpoint ops have forward twins
    # Name every in-step op of one recomputed kind as recomputation: no forward op of that kind is left.
    row = remat.sort_values("time_s").iloc[-1]
    same = ops["in_step"] & (ops["opcode"] == row["opcode"]) & (ops["result_bytes"] == row["result_bytes"])
    if row["is_matmul"]:
        same &= ops["flops"] == row["flops"]
    ops.loc[same, "is_recomputed"] = True
    merged = remat_overhead.recomputed_ops(analysis)
    ok = remat_overhead.verified(analysis, merged)
    assert not ok[same[same].index.intersection(merged.index)].any()
    f = only(remat_overhead.check(analysis), "remat-overhead")
    assert f.details["unverified_ops"] == int(same.sum()) and "CSE" in f.evidence
    assert row["op_name"] not in f.details["ops_that_fit"]

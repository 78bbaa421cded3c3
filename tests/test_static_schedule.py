"""The predicted step follows the schedule (analyzer/hlo/schedule.py): transfers add what nothing beside them hides,
and a collective's scheduler-flag saving is the independent work of its schedule window, on constructed layer
loops (builders/hlo_snippets.layer_loop_module) and the HLO samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders.hlo_snippets import layer_loop_module
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hlo.schedule import Transfer, static_waits
from xladiag.parsers.hlo_text import parse_hlo_module
from xladiag.rules import exposed_collective
from xladiag.rules.claims import recoverable_s_per_step
from xladiag.rules.registry import run_rules

SAMPLES = Path(__file__).resolve().parents[1] / "sample_profiles"


def _loop(tmp_path, chip: str | None = "v6e", **kwargs):
    (tmp_path / "module_0001.jit_layers.after_optimizations.txt").write_text(layer_loop_module(**kwargs))
    analysis = analyze(hlo_dir=tmp_path, chip=chip)
    return analysis, analysis.ops.set_index("op_name")


def _kind(analysis, kind):
    return next(f for f in exposed_collective.check(analysis) if f.kind == kind)


def test_async_collectives_add_to_the_predicted_step_what_the_work_between_does_not_hide(tmp_path):
    analysis, ops = _loop(tmp_path, side="between")
    t = ops["predicted_s_per_step"]
    # The all-gather (4 layers) runs beside the independent matmul; the all-reduce has nothing beside it.
    assert t["ag-done"] > t["side"] > 0 and t["ar-done"] > 0
    assert ops.loc["ag-done", "exposed_s_per_step"] == pytest.approx(t["ag-done"] - t["side"], rel=1e-9)
    assert ops.loc["ar-done", "exposed_s_per_step"] == pytest.approx(t["ar-done"], rel=1e-9)
    compute = float(t[~ops["transfer_kind"].notna()].sum())
    transfers = t["ag-done"] + t["ar-done"]
    waits = ops.loc["ag-done", "exposed_s_per_step"] + ops.loc["ar-done", "exposed_s_per_step"]
    assert analysis.step_s == pytest.approx(compute + waits, rel=1e-9)
    assert analysis.step_s >= max(compute, transfers)  # at least the compute path and the transfer path
    assert sum(analysis.breakdown.values()) == pytest.approx(analysis.step_s, rel=1e-9)
    # Before, the step left the done ops out (0.30 ms) while the findings priced them whole (0.84 ms): 280 %.
    findings = run_rules(analysis)
    assert all(f.time_s_per_step <= analysis.step_s and f.fraction_of_step <= 1.0 for f in findings)
    assert recoverable_s_per_step(findings, float("inf")) <= analysis.step_s


def test_collectives_xla_made_synchronous_overlap_nothing(tmp_path):
    analysis, ops = _loop(tmp_path, side="between", is_sync=True)
    t = ops["predicted_s_per_step"]
    assert ops.loc[["ag-start", "ag-done", "ar-start", "ar-done"], "transfer_is_sync"].all()
    assert ops.loc["ag-done", "exposed_s_per_step"] == pytest.approx(t["ag-done"], rel=1e-9)
    compute = float(t[~ops["transfer_kind"].notna()].sum())
    assert analysis.step_s == pytest.approx(compute + t["ag-done"] + t["ar-done"], rel=1e-9)
    f = _kind(analysis, "all-gather")
    assert f.details["ops"][0]["synchronous"] and "made synchronous (is_sync)" in f.ops[0].detail
    assert "made synchronous by XLA" in f.evidence
    # Made asynchronous again, the gather could run beside the matmul between its start and done: that is the
    # independent work of its window, and what a flag can save.
    side = t["side"]
    assert ops.loc["ag-done", "schedule_independent_s_per_step"] == pytest.approx(side, rel=1e-9)
    assert f.est_savings_s_per_step == pytest.approx(side, rel=1e-9)


def test_the_flag_saving_is_the_independent_work_in_the_window(tmp_path):
    # The independent matmul sits before the start: a better schedule moves the start up and hides that much.
    analysis, ops = _loop(tmp_path, side="before")
    side = ops.loc["side", "predicted_s_per_step"]
    assert ops.loc["ag-done", "schedule_independent_s_per_step"] == pytest.approx(side, rel=1e-9)
    f = _kind(analysis, "all-gather")
    assert f.time_s_per_step > side
    assert f.est_savings_s_per_step == pytest.approx(side, rel=1e-9)
    assert "program must change" in f.fix and "one layer ahead" in f.fix


def test_a_collective_consumed_at_once_saves_nothing_by_a_flag(tmp_path):
    analysis, ops = _loop(tmp_path, side="none")
    assert ops.loc["ag-done", "schedule_independent_s_per_step"] == 0.0
    f = _kind(analysis, "all-gather")
    assert f.est_savings_s_per_step == 0.0 and f.severity == "info"
    assert f.details["restructure_s_per_step"] > 0
    assert "consumed at once" in f.evidence and "consumed at once" in f.fix and "collective matmul" in f.fix
    # Work already between start and done is hidden; a flag adds nothing more.
    between, _ = _loop(tmp_path, side="between")
    assert _kind(between, "all-gather").est_savings_s_per_step == 0.0


def test_priced_on_a_cpu_chip_the_finding_is_a_note(tmp_path):
    analysis, _ = _loop(tmp_path, chip=None, side="before")  # no --chip: the generic host
    assert analysis.chip.key == "cpu"
    findings = exposed_collective.check(analysis)
    assert findings and all(f.est_savings_s_per_step == 0.0 and f.severity == "info" for f in findings)
    assert all("synchronous rendezvous" in f.evidence for f in findings)


def test_transfers_on_one_link_queue_behind_each_other():
    text = "\n".join([
        "HloModule m, is_scheduled=true", "", "ENTRY %e (p: f32[8]) -> f32[8] {", "  %p = f32[8]{0} parameter(0)",
        "  %s1 = (f32[8]{0}, f32[8]{0}) all-gather-start(%p), dimensions={0}",
        "  %s2 = (f32[8]{0}, f32[8]{0}) all-gather-start(%p), dimensions={0}",
        "  %work = f32[8]{0} negate(%p)",
        "  %d1 = f32[8]{0} all-gather-done(%s1)", "  %d2 = f32[8]{0} all-gather-done(%s2)",
        "  ROOT %r = f32[8]{0} add(%d1, %d2)", "}", ""])
    module = parse_hlo_module(text)
    transfers = {"d1": Transfer("s1", 3.0, "ici"), "d2": Transfer("s2", 3.0, "ici")}
    waits, spans = static_waits(module, ["e"], {"work": 2.0, "r": 1.0}, transfers)
    # The second transfer starts when the first ends (t=3) and ends at 6: the core, done with work at 2,
    # waits 1 for the first and 3 more for the second.
    assert waits == {"d1": pytest.approx(1.0), "d2": pytest.approx(3.0)}
    assert spans["e"] == pytest.approx(2.0 + 1.0 + 3.0 + 1.0)


@pytest.mark.parametrize("name,chip", [("hlo_maxtext_llama3_8b_v6e4", "v6e"), ("hlo_maxtext_llama3_8b_v6e4", None),
                                       ("hlo_rules_fsdp_256_tokens", "v6e"), ("hlo_rules_fsdp_16k_tokens", "tpu7x"),
                                       ("hlo_rules_attention_naive", "v6e")])
def test_samples_recover_at_most_their_predicted_step(name, chip):
    program = "jit_train_step" if name.startswith("hlo_maxtext") else None
    analysis = analyze(hlo_dir=SAMPLES / name, chip=chip, program=program)
    findings = run_rules(analysis)
    assert all(f.fraction_of_step <= 1.0 + 1e-9 and f.est_savings_s_per_step <= analysis.step_s for f in findings)
    assert recoverable_s_per_step(findings, float("inf")) <= analysis.step_s
    for f in findings:
        if f.rule == exposed_collective.RULE_ID and f.kind != "host-offload":
            ops = f.details["ops"]
            assert all(o["independent_work_s_per_step"] is not None for o in ops)
            # The flag saving never passes the independent work in the windows.
            window = sum(min(o["exposed_s_per_step"], o["independent_work_s_per_step"]) for o in ops)
            assert f.est_savings_s_per_step <= window + 1e-15

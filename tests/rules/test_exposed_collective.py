"""exposed-collective: waits for transfers, from injected scenarios and the real samples."""

from __future__ import annotations

import json

import pytest

from builders import scenarios, xspace_encoder
from rule_helpers import REL, analyze_scenario, cpu, only, per_device_step, ring_all_gather_s, tpu  # noqa: F401 (fixtures)
from xladiag.rules import exposed_collective, exposed_host_transfer
from xladiag.rules.registry import run_rules


@pytest.mark.parametrize("n_us", [60.0, 250.0, 2000.0])
def test_exposed_all_gather_is_found_with_its_wait(tmp_path, n_us):
    analysis, exp = analyze_scenario(tmp_path, scenarios.exposed_all_gather, n_us)
    f = only(exposed_collective.check(analysis), "exposed-collective", kind="all-gather")
    assert f.time_s_per_step == pytest.approx(exp["exposed_all_gather_s_per_step"], rel=REL)
    assert f.fraction_of_step == pytest.approx(exp["exposed_collective_s_per_step"] / exp["step_s"], rel=REL)
    assert [o.name for o in f.ops] == exp["exposed_ops"]
    # The gather needs (N-1)/N * V / W1 on a ring of 4 without wraparound, or what it took (start to done) if
    # that was less; the step's other ops can hide either.
    in_flight = (xspace_encoder.START_OP_PS + n_us * xspace_encoder.PS_PER_US) / xspace_encoder.PS_PER_S
    needed = min(ring_all_gather_s(exp["all_gather_bytes"], exp["replica_group_size"]), in_flight)
    compute = sum(t for op, t in exp["op_self_s_per_step"].items() if "all-gather" not in op)
    assert needed < compute
    assert f.details["needed_transfer_s_per_step"] == pytest.approx(needed, rel=REL)
    assert f.details["compute_s_per_step"] == pytest.approx(compute, rel=REL)
    assert f.est_savings_s_per_step == pytest.approx(f.time_s_per_step, rel=1e-9)
    assert f.details["hidden_fraction"] == pytest.approx(0.0, abs=1e-3)
    assert "C/W = 5,100 tokens" in f.fix and "--xla_enable_async_all_gather=true" in f.fix
    assert f.severity == ("high" if n_us / 1e6 / exp["step_s"] >= 0.10 else "medium")


def test_hidden_all_gather_has_no_exposed_time(tmp_path):
    analysis, exp = analyze_scenario(tmp_path, scenarios.hidden_all_gather)
    table = analysis.ops.set_index("op_name")
    assert table.loc["all-gather-done", "exposed_s_per_step"] == pytest.approx(exp["exposed_collective_s_per_step"],
                                                                            abs=1e-10)
    assert table.loc["all-gather-done", "in_flight_s_per_step"] == pytest.approx(
        exp["hidden_collective_span_s_per_step"], rel=REL)
    assert table.loc["all-gather-done", "hidden_fraction"] > 0.999
    assert exposed_collective.check(analysis) == []


def test_exposed_host_offload_names_host_offload(tmp_path):
    analysis, exp = analyze_scenario(tmp_path, scenarios.host_offload_exposed, 1500.0)
    assert exposed_collective.check(analysis) == []  # host copies are not collectives: their own rule
    findings = exposed_host_transfer.check(analysis)
    f = only(findings, "exposed-host-transfer", kind="host-offload")
    assert [g.details["kind"] for g in findings] == ["host-offload"]  # nothing else is exposed
    assert f.time_s_per_step == pytest.approx(exp["exposed_host_transfer_s_per_step"], rel=REL)
    assert f.ops[0].name == exp["exposed_ops"][0]
    assert f.details["bytes_per_step"] == pytest.approx(exp["host_transfer_bytes_per_step"], rel=1e-9)
    assert "host offload" in f.fix.lower() and "pinned_host" in f.fix and "remat_policy" in f.fix
    # Overlap alone can only move the compute that no transfer is in flight over under a transfer: here the
    # broadcast_add_fusion between the reload's done and the offload's start.
    free_compute = exp["op_self_s_per_step"]["broadcast_add_fusion"]
    assert f.details["overlap_recoverable_s_per_step"] == pytest.approx(free_compute, rel=REL)
    assert f.est_savings_s_per_step == pytest.approx(f.time_s_per_step)  # offloading less removes the wait


def test_v6e_top_finding_is_the_exposed_host_offload(tpu):
    findings = run_rules(tpu)
    top = findings[0]
    assert top.rule == "exposed-host-transfer" and top.details["kind"] == "host-offload"
    waited = per_device_step(tpu, r"^copy-done")
    assert 0.74 < waited < 0.78  # ~0.76 s of waiting in each ~0.78 s run of jit_f
    assert tpu.steps.program == "jit_f" and tpu.step_s == pytest.approx(0.78, rel=0.01)
    assert top.time_s_per_step == pytest.approx(waited, rel=REL)
    assert top.fraction_of_step == pytest.approx(waited / tpu.step_s, rel=REL)
    assert top.severity == "high"
    assert all(o.name.startswith("copy-done") for o in top.ops)
    assert "host offload" in top.fix.lower() and "pinned_host" in top.fix
    # 6 copies of 5.37 GB per run cross PCIe.
    assert top.details["bytes_per_step"] == pytest.approx(6 * 5.368709e9, rel=0.01)
    # What the copies could hide behind: the three broadcast_add fusions, the program's only other work.
    fusions = per_device_step(tpu, r"^broadcast_add_fusion")
    assert 0.02 < fusions < 0.03
    assert top.details["compute_s_per_step"] == pytest.approx(fusions, rel=REL)
    assert "24 ms of non-transfer work" in top.evidence
    # No collective, recomputation or layout copy in this program: the offload is the only finding.
    assert [f.rule for f in findings] == ["exposed-host-transfer"]


def test_v6e_async_copies_report_their_hidden_fraction(tpu):
    table = tpu.ops[tpu.ops["exposed_s_per_step"].notna()].set_index("op_name")
    # copy-done.1 and copy-done.3 complete in nanoseconds: their transfers ran entirely behind other work.
    assert table.loc["copy-done.1", "hidden_fraction"] > 0.999
    assert table.loc["copy-done.3", "hidden_fraction"] > 0.999
    assert table.loc["copy-done.2", "hidden_fraction"] < 0.9
    # Spans are recorded on /device:TPU:0 only: exposed and in-flight time come from the same device-steps,
    # so no op waits longer than it was in flight (copy-done.5 waits 182 ms of its 183 ms).
    assert set(tpu.async_spans["device"]) == {0}
    both = table[table["in_flight_s_per_step"].notna()]
    assert len(both) == 6
    assert (both["exposed_where_in_flight_measured_s_per_step"] <= both["in_flight_s_per_step"]).all()
    assert (both["exposed_s_per_step"] <= both["in_flight_s_per_step"]).all()
    waited_on_0 = tpu.step_ops.query("device == 0 and op_name == 'copy-done.5'")["duration_ps"].sum() / 1e12 \
        / (tpu.steps.after_warmup["device"] == 0).sum()
    exposed = table.loc["copy-done.5", "exposed_where_in_flight_measured_s_per_step"]
    assert exposed == pytest.approx(waited_on_0, rel=1e-9)
    assert table.loc["copy-done.5", "in_flight_s_per_step"] >= waited_on_0


def test_cpu_synchronous_collectives_are_exposed(cpu):
    findings = run_rules(cpu)
    exposed = {f.details["kind"]: f for f in findings if f.rule == "exposed-collective"}
    assert set(exposed) == {"all-gather", "reduce-scatter", "all-reduce"}
    patterns = {"all-gather": r"^all[-_]gather", "reduce-scatter": r"^reduce[-_]scatter",
                "all-reduce": r"^(?:all-reduce|psum)"}
    for kind, f in exposed.items():
        assert f.time_s_per_step == pytest.approx(per_device_step(cpu, patterns[kind]), rel=REL), kind
        assert all(o["synchronous"] for o in f.details["ops"])
    for f in findings:  # details feed the JSON report: plain numbers, no NaN
        json.dumps(f.details, allow_nan=False)
    remat = next(f for f in findings if f.rule == "remat-overhead")
    assert remat.details["remat_ops"] > 0 and remat.details["peak_memory_bytes"] == 8475728  # memory report


def test_an_old_host_offload_key_still_names_the_same_finding(tpu):
    """Host-offload waits were an exposed-collective kind: an old baseline accepts them and compare pairs an old
    report's finding with the new one, instead of calling it new."""
    from xladiag.compare.ops import compare_findings
    from xladiag.config import selection

    top = run_rules(tpu)[0]
    assert top.key == "exposed-host-transfer:host-offload:"
    kept, dropped = selection(baseline=["exposed-collective:host-offload:"]).split([top])
    assert kept == [] and [d.by for d in dropped] == ["baseline"]
    old = {"rule": "exposed-collective", "kind": "host-offload", "key": "exposed-collective:host-offload:",
           "time_s_per_step": top.time_s_per_step}
    new = dict(old, rule=top.rule, key=top.key)
    rows = compare_findings([old], [new], base_step_s=tpu.step_s)
    assert list(rows["status"]) == ["unchanged"] and list(rows["rule"]) == ["exposed-host-transfer"]

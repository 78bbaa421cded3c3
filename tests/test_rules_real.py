"""The rules on the real samples: what each must report, with numbers measured independently from the events."""

from __future__ import annotations

import json
import warnings

import pytest

from conftest import CPU_SAMPLE, GPU_SAMPLE, HLO_SAMPLE, TPU_SAMPLE
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.layout_facts import recomputed_instructions
from xladiag.parsers.hlo_text import parse_hlo_file
from xladiag.rules import exposed_collective, latency_bound_collective, remat_overhead
from xladiag.rules.registry import run_rules

REL = 0.05


def _per_device_step(analysis, name_pattern: str) -> float:
    """Seconds per device-step of the step events whose op name matches (straight from step_ops)."""
    ev = analysis.step_ops
    hits = ev[ev["op_name"].astype(str).str.match(name_pattern)]
    return float(hits["duration_ps"].sum()) / 1e12 / len(analysis.steps.after_warmup)


@pytest.fixture(scope="module")
def tpu():
    return analyze(TPU_SAMPLE)


@pytest.fixture(scope="module")
def gpu():
    return analyze(GPU_SAMPLE)


@pytest.fixture(scope="module")
def cpu():
    return analyze(CPU_SAMPLE)


def test_v6e_top_finding_is_the_exposed_host_offload(tpu):
    findings = run_rules(tpu)
    top = findings[0]
    assert top.rule == "exposed-collective" and top.details["kind"] == "host-offload"
    waited = _per_device_step(tpu, r"^copy-done")
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
    fusions = _per_device_step(tpu, r"^broadcast_add_fusion")
    assert 0.02 < fusions < 0.03
    assert top.details["compute_s_per_step"] == pytest.approx(fusions, rel=REL)
    assert "24 ms of non-transfer work" in top.evidence
    # No collective, recomputation or layout copy in this program: the offload is the only finding.
    assert [f.rule for f in findings] == ["exposed-collective"]


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
    assert table.loc["copy-done.5", "exposed_where_in_flight_measured_s_per_step"] == pytest.approx(waited_on_0, rel=1e-9)
    assert table.loc["copy-done.5", "in_flight_s_per_step"] >= waited_on_0


def test_mi300_transposes_around_the_convolution_cost_more_than_it(gpu):
    f = next(f for f in run_rules(gpu) if f.rule == "retiling-copy")
    names = {o["op"] for o in f.details["ops"]}
    assert {"input_transpose_fusion", "input_transpose_fusion.1", "loop_transpose_fusion"} <= names
    transposes = _per_device_step(gpu, r".*transpose_fusion")
    conv = _per_device_step(gpu, r"^cudnn-conv\.1$")
    assert transposes > conv > 0  # measured: ~375 us of transposes against ~313 us of convolution
    assert f.time_s_per_step == pytest.approx(transposes, rel=REL)
    assert f.details["convolution_s_per_step"] == pytest.approx(conv, rel=REL)
    assert {c["op"] for c in f.details["convolutions"]} == {"cudnn-conv.1"}
    where = {o["op"]: o["relative_to_convolution"] for o in f.details["ops"]}
    assert where["input_transpose_fusion.1"] == "before" and where["input_transpose_fusion"] == "after"
    assert f.confidence == "medium"  # recognised by name: the capture has no HLO
    assert "NDHWC" in f.fix


def test_cpu_synchronous_collectives_are_exposed(cpu):
    findings = run_rules(cpu)
    exposed = {f.details["kind"]: f for f in findings if f.rule == "exposed-collective"}
    assert set(exposed) == {"all-gather", "reduce-scatter", "all-reduce"}
    patterns = {"all-gather": r"^all[-_]gather", "reduce-scatter": r"^reduce[-_]scatter",
                "all-reduce": r"^(?:all-reduce|psum)"}
    for kind, f in exposed.items():
        assert f.time_s_per_step == pytest.approx(_per_device_step(cpu, patterns[kind]), rel=REL), kind
        assert all(o["synchronous"] for o in f.details["ops"])
    for f in findings:  # details feed the JSON report: plain numbers, no NaN
        json.dumps(f.details, allow_nan=False)
    remat = next(f for f in findings if f.rule == "remat-overhead")
    assert remat.details["remat_ops"] > 0 and remat.details["peak_memory_bytes"] == 8475728  # memory report


def test_memory_report_of_another_module_is_not_used(tmp_path):
    """Only the analysed program's report counts: a report of another module (100x the bytes), or of a
    same-named module compiled with another id that the trace never ran, is ignored; without the program's
    own report the peak is unknown."""
    import shutil
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


def test_v6e_hlo_only_runs_every_static_part():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = analyze(hlo_dir=HLO_SAMPLE, chip="v6e")
    assert analysis.platform == "hlo"
    findings = run_rules(analysis)
    by_rule = {f.rule: f for f in findings}
    for f in findings:
        assert f.confidence == "low" and "predicted" in f.evidence, f.rule
        json.dumps(f.details, allow_nan=False)
    # Remat ops counted: every instruction under jax.checkpoint recomputation, fused ones included.
    assert by_rule["remat-overhead"].details["remat_instructions_in_dump"] == 186
    # Layout copies listed: the five f32 -> bf16 weight copies that also change the dimension order
    # (e.g. copy.237: f32[1024,4,14336]{2,1,0:T(4,128)} -> bf16{2,0,1:T(8,128)(2,1)}), inside fusions.
    listed = by_rule["retiling-copy"].details["dump_layout_changes"]
    assert {c["name"] for c in listed} == {f"copy.{i}" for i in range(235, 240)}
    assert all(c["change"] == "layout" and "kernel" in c["op_name"] for c in listed)
    # Collective payloads classified: the seven FSDP weight all-gathers over 4 devices move megabytes per hop.
    table = latency_bound_collective.classify_collectives(analysis)
    assert len(table) == 7 and set(table["collective_kind"]) == {"all-gather"}
    assert (table["collective_per_hop_bytes"] > 90e3).all() and not table["latency_bound"].any()
    assert "latency-bound-collective" not in by_rule
    gathers = by_rule["exposed-collective"]
    assert gathers.details["kind"] == "all-gather" and len(gathers.details["ops"]) == 7
    assert gathers.time_s_per_step == pytest.approx(float(table["predicted_s_per_step"].sum()), rel=1e-9)

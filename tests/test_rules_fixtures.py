"""Each rule finds the problem injected into a synthetic TPU capture, with the injected size.

The captures come from ``xspace_builder`` scenarios; every expected number is derived here from what the
scenario injected (its ``expected`` dict and op durations) and the chip's published figures, not from the
rules' own output.
"""

from __future__ import annotations


import pytest

import xspace_builder as xb
from xladiag.analyzer.analysis import analyze
from xladiag.rules import exposed_collective, latency_bound_collective, remat_overhead, retiling_copy
from xladiag.rules.registry import run_rules

REL = 0.05  # the tolerance: numbers within 5 %
V6E_LINK_ONEWAY_B_PER_S = 9.0e10  # TPU v6e ICI, one way per link (hardware.md)
V6E_HOP_LATENCY_S = 1e-6


def _analyze(tmp_path, scenario, *args, **kwargs):
    builder, expected = scenario(*args, **kwargs)
    builder.write(tmp_path)
    return analyze(tmp_path), expected


def _only(findings, rule, **detail):
    hits = [f for f in findings if f.rule == rule and all(f.details.get(k) == v for k, v in detail.items())]
    assert len(hits) == 1, [(f.rule, f.title) for f in findings]
    return hits[0]


def _one_way_ring_s(gathered_bytes: float, n: int) -> float:
    """All-gather over the 4 chips of a v6e-4, a 2x2 torus without wraparound: a chip takes the (N-1)/N V it
    lacks over its two inbound links (one per axis), in one hop per axis."""
    assert n == 4
    return max((n - 1) * gathered_bytes / n / (2 * V6E_LINK_ONEWAY_B_PER_S), 2 * V6E_HOP_LATENCY_S)


# ------------------------------------------------------------------------------------------ exposed-collective

@pytest.mark.parametrize("n_us", [60.0, 250.0, 2000.0])
def test_exposed_all_gather_is_found_with_its_wait(tmp_path, n_us):
    analysis, exp = _analyze(tmp_path, xb.exposed_all_gather, n_us)
    f = _only(exposed_collective.check(analysis), "exposed-collective", kind="all-gather")
    assert f.time_s_per_step == pytest.approx(exp["exposed_all_gather_s_per_step"], rel=REL)
    assert f.fraction_of_step == pytest.approx(exp["exposed_collective_s_per_step"] / exp["step_s"], rel=REL)
    assert [o.name for o in f.ops] == exp["exposed_ops"]
    # The gather needs (N-1)/N * V / W1 on a ring of 4 without wraparound, or what it took (start to done) if
    # that was less; the step's other ops can hide either.
    in_flight = (xb.START_OP_PS + n_us * xb.PS_PER_US) / xb.PS_PER_S
    needed = min(_one_way_ring_s(exp["all_gather_bytes"], exp["replica_group_size"]), in_flight)
    compute = sum(t for op, t in exp["op_self_s_per_step"].items() if "all-gather" not in op)
    assert needed < compute
    assert f.details["needed_transfer_s_per_step"] == pytest.approx(needed, rel=REL)
    assert f.details["compute_s_per_step"] == pytest.approx(compute, rel=REL)
    assert f.est_savings_s_per_step == pytest.approx(f.time_s_per_step, rel=1e-9)
    assert f.details["hidden_fraction"] == pytest.approx(0.0, abs=1e-3)
    assert "C/W = 5,100 tokens" in f.fix and "--xla_enable_async_all_gather=true" in f.fix
    assert f.severity == ("high" if n_us / 1e6 / exp["step_s"] >= 0.10 else "medium")


def test_hidden_all_gather_has_no_exposed_time(tmp_path):
    analysis, exp = _analyze(tmp_path, xb.hidden_all_gather)
    table = analysis.ops.set_index("op_name")
    assert table.loc["all-gather-done", "exposed_s_per_step"] == pytest.approx(exp["exposed_collective_s_per_step"],
                                                                            abs=1e-10)
    assert table.loc["all-gather-done", "in_flight_s_per_step"] == pytest.approx(exp["hidden_collective_span_s_per_step"],
                                                                         rel=REL)
    assert table.loc["all-gather-done", "hidden_fraction"] > 0.999
    assert exposed_collective.check(analysis) == []


def test_exposed_host_offload_names_host_offload(tmp_path):
    analysis, exp = _analyze(tmp_path, xb.host_offload_exposed, 1500.0)
    findings = exposed_collective.check(analysis)
    f = _only(findings, "exposed-collective", kind="host-offload")
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


# ------------------------------------------------------------------------------------ latency-bound-collective

@pytest.mark.parametrize("k", [4, 16])
def test_tiny_all_gathers_are_latency_bound_and_combinable(tmp_path, k):
    analysis, exp = _analyze(tmp_path, xb.tiny_all_gathers, k)
    f = _only(latency_bound_collective.check(analysis), "latency-bound-collective")
    assert f.details["latency_bound_count_per_step"] == exp["num_tiny_all_gathers_per_step"]
    assert f.time_s_per_step == pytest.approx(exp["tiny_all_gather_s_per_step"], rel=REL)
    # 32 KiB per hop is under the v6e threshold W1 * T_min = 90 kB.
    assert exp["all_gather_shard_bytes"] < V6E_LINK_ONEWAY_B_PER_S * V6E_HOP_LATENCY_S
    combined = _one_way_ring_s(k * exp["all_gather_bytes"], exp["replica_group_size"])
    assert f.details["combined_predicted_s_per_step"] == pytest.approx(combined, rel=REL)
    assert f.est_savings_s_per_step == pytest.approx(exp["tiny_all_gather_s_per_step"] - combined, rel=REL)
    assert f.details["groups"][0]["kind"] == "all-gather"
    # The same waits are exposed all-gather time too.
    g = _only(exposed_collective.check(analysis), "exposed-collective", kind="all-gather")
    assert g.time_s_per_step == pytest.approx(exp["exposed_collective_s_per_step"], rel=REL)


def test_gpu_combiner_flag_is_given_once_per_kind(tmp_path):
    """Gathers over two replica-group sizes form two groups of one kind: one XLA flag, large enough for both."""
    import dataclasses
    analysis, exp = _analyze(tmp_path, xb.tiny_all_gathers, 4)
    ops = analysis.ops.copy()
    gathers = ops.index[ops["collective_kind"].eq("all-gather") & ~ops["is_async_start"].astype(bool)]
    assert len(gathers) == 4
    ops.loc[gathers[:1], "replica_group_size"] = 2  # one gather over 2 devices, three over 4
    f = _only(latency_bound_collective.check(dataclasses.replace(analysis, ops=ops, platform="gpu")),
              "latency-bound-collective")
    assert len(f.details["groups"]) == 2
    flag = "--xla_gpu_all_gather_combine_threshold_bytes="
    assert f.fix.count(flag) == 1
    assert f"XLA_FLAGS='{flag}{3 * exp['all_gather_bytes']}'" in f.fix  # the three gathers over 4 devices


def test_bandwidth_bound_gather_is_not_latency_bound(tmp_path):
    analysis, _ = _analyze(tmp_path, xb.exposed_all_gather, 250.0)
    table = latency_bound_collective.classify_collectives(analysis)
    assert len(table) == 1 and not table["latency_bound"].any()
    assert latency_bound_collective.check(analysis) == []


# ------------------------------------------------------------------------------------------------ remat-overhead

@pytest.mark.parametrize("x_pct", [8.0, 20.0, 35.0])
def test_remat_share_matches_injection(tmp_path, x_pct):
    analysis, exp = _analyze(tmp_path, xb.remat_fusions, x_pct)
    f = _only(remat_overhead.check(analysis), "remat-overhead")
    assert f.time_s_per_step == pytest.approx(exp["remat_s_per_step"], rel=REL)
    assert f.fraction_of_step == pytest.approx(x_pct / 100, rel=REL)
    assert {o.name for o in f.ops} == set(exp["remat_ops"])
    # Keeping the three recomputed results: bf16[1024,14336] + 2 x bf16[1024,4096].
    kept = xb.array_bytes("bf16", [1024, 14336]) + 2 * xb.array_bytes("bf16", [1024, 4096])
    assert f.details["extra_hbm_bytes"] == kept
    assert f.details["step_bound_by"] == "compute"
    assert f.details["hbm_headroom_bytes"] is None and f.confidence == "medium"  # no memory report: unknown
    assert f.est_savings_s_per_step == pytest.approx(f.time_s_per_step)
    assert "save_dot_with_context_except_mlp" in f.fix and "remat_policy" in f.fix
    assert f.severity == ("high" if x_pct >= 10 else "medium")


def test_remat_keeps_what_fits_when_hbm_is_short(tmp_path, monkeypatch):
    analysis, exp = _analyze(tmp_path, xb.remat_fusions, 20.0)
    capacity = analysis.chip.hbm_capacity_bytes
    headroom = 17_000_000  # room for the two bf16[1024,4096] results (8.4 MB each), not bf16[1024,14336]
    monkeypatch.setattr(remat_overhead, "peak_memory_bytes", lambda a: capacity - headroom)
    f = _only(remat_overhead.check(analysis), "remat-overhead")
    # Most seconds per byte first: fusion.14.remat2 (8.4 MB), convert_reduce_fusion.3.remat (8.4 MB); then
    # fusion.12.remat (29 MB) no longer fits.
    assert set(f.details["ops_that_fit"]) == {"fusion.14.remat2", "convert_reduce_fusion.3.remat"}
    per_op = exp["op_self_s_per_step"]
    fits = per_op["fusion.14.remat2"] + per_op["convert_reduce_fusion.3.remat"]
    assert f.est_savings_s_per_step == pytest.approx(fits, rel=REL)
    assert f.time_s_per_step == pytest.approx(exp["remat_s_per_step"], rel=REL)
    assert f.confidence == "high" and "offload" in f.fix and "pinned_host" in f.fix


# ------------------------------------------------------------------------------------------------- retiling-copy

@pytest.mark.parametrize("variant,change", [("copy", "layout"), ("transpose_fusion", "transpose")])
def test_layout_copies_are_found_with_their_time(tmp_path, variant, change):
    analysis, exp = _analyze(tmp_path, xb.layout_copies, 120.0, variant=variant)
    f = _only(retiling_copy.check(analysis), "retiling-copy")
    assert f.time_s_per_step == pytest.approx(exp["layout_change_s_per_step"], rel=REL)
    assert [o.name for o in f.ops] == exp["layout_ops"]  # 60 % / 40 % of the injected time, in that order
    assert {o["change"] for o in f.details["ops"]} == {change}
    assert {o["source"] for o in f.details["ops"]} == {"maxtext/layers/linears.py:140"}
    assert "Layout.AUTO" in f.fix and f.confidence == "high"


# ---------------------------------------------------------------------------------------------------- clean

def test_clean_profile_fires_no_rule(tmp_path):
    analysis, exp = _analyze(tmp_path, xb.clean_profile)
    findings = run_rules(analysis)
    assert [f for f in findings if f.severity == "high"] == [] and exp["high_severity_findings"] == 0
    assert findings == []

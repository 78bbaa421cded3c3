"""latency-bound-collective: collectives below the hop-latency threshold, and what combining saves."""

from __future__ import annotations

import dataclasses

import pytest

from builders import scenarios
from rule_helpers import (  # noqa: F401 (fixtures)
    REL,
    V6E_HOP_LATENCY_S,
    V6E_LINK_ONEWAY_B_PER_S,
    analyze_scenario,
    cpu,
    only,
    ring_all_gather_s,
)
from xladiag.rules import exposed_collective, latency_bound_collective


def _fixed_cost(analysis) -> float:
    """The modelled fixed cost of one of the scenario's (identical) gathers: hops x per-hop latency."""
    lat = analysis.ops["collective_latency_s"].dropna()
    assert lat.nunique() == 1 and lat.iloc[0] > 0
    return float(lat.iloc[0])


@pytest.mark.parametrize("k", [4, 16])
def test_tiny_all_gathers_are_latency_bound_and_combinable(tmp_path, k):
    analysis, exp = analyze_scenario(tmp_path, scenarios.tiny_all_gathers, k)
    f = only(latency_bound_collective.check(analysis), "latency-bound-collective")
    assert f.details["latency_bound_count_per_step"] == exp["num_tiny_all_gathers_per_step"]
    assert f.time_s_per_step == pytest.approx(exp["tiny_all_gather_s_per_step"], rel=REL)
    # 32 KiB per hop is under the v6e threshold W1 * T_min = 90 kB.
    assert exp["all_gather_shard_bytes"] < V6E_LINK_ONEWAY_B_PER_S * V6E_HOP_LATENCY_S
    combined = ring_all_gather_s(k * exp["all_gather_bytes"], exp["replica_group_size"])
    assert f.details["combined_predicted_s_per_step"] == pytest.approx(combined, rel=REL)
    # Combining folds away k - 1 fixed costs (hops x latency each), not the rest of the measured wait.
    fixed = _fixed_cost(analysis)
    assert f.est_savings_s_per_step == pytest.approx(
        min(exp["tiny_all_gather_s_per_step"] - combined, (k - 1) * fixed), rel=REL)
    assert f.est_savings_s_per_step < exp["tiny_all_gather_s_per_step"] - combined
    assert f.details["groups"][0]["kind"] == "all-gather"
    # The same waits are exposed all-gather time too.
    g = only(exposed_collective.check(analysis), "exposed-collective", kind="all-gather")
    assert g.time_s_per_step == pytest.approx(exp["exposed_collective_s_per_step"], rel=REL)


def test_gpu_combiner_flag_is_given_once_per_kind(tmp_path):
    """Gathers over two replica-group sizes form two groups of one kind: one XLA flag, large enough for both."""
    import dataclasses
    analysis, exp = analyze_scenario(tmp_path, scenarios.tiny_all_gathers, 4)
    ops = analysis.ops.copy()
    gathers = ops.index[ops["collective_kind"].eq("all-gather") & ~ops["is_async_start"].astype(bool)]
    assert len(gathers) == 4
    ops.loc[gathers[:1], "replica_group_size"] = 2  # one gather over 2 devices, three over 4
    f = only(latency_bound_collective.check(dataclasses.replace(analysis, ops=ops, platform="gpu")),
              "latency-bound-collective")
    assert len(f.details["groups"]) == 2
    flag = "--xla_gpu_all_gather_combine_threshold_bytes="
    assert f.fix.count(flag) == 1
    assert f"XLA_FLAGS='{flag}{3 * exp['all_gather_bytes']}'" in f.fix  # the three gathers over 4 devices


def test_bandwidth_bound_gather_is_not_latency_bound(tmp_path):
    analysis, _ = analyze_scenario(tmp_path, scenarios.exposed_all_gather, 250.0)
    table = latency_bound_collective.classify_collectives(analysis)
    assert len(table) == 1 and not table["latency_bound"].any()
    assert latency_bound_collective.check(analysis) == []


def test_a_lone_collective_per_group_has_nothing_to_combine(tmp_path):
    """Found by recording the fix (sample_profiles/jax_fsdp_buckets/after): three collectives, each the only
    one of its kind and group, were still 'combinable', with nearly their whole time as the saving."""
    analysis, exp = analyze_scenario(tmp_path, scenarios.tiny_all_gathers, 4)
    ops = analysis.ops.copy()
    gathers = ops.index[ops["collective_kind"].eq("all-gather") & ~ops["is_async_start"].astype(bool)]
    ops.loc[gathers[:1], "replica_group_size"] = 2  # one gather alone over 2 devices, three over 4
    f = only(latency_bound_collective.check(dataclasses.replace(analysis, ops=ops)), "latency-bound-collective")
    lone = ops.loc[gathers[:1], "measured_s_per_step"].sum()
    three = ring_all_gather_s(3 * exp["all_gather_bytes"], exp["replica_group_size"])
    assert lone > 0
    assert f.est_savings_s_per_step == pytest.approx(
        min(exp["tiny_all_gather_s_per_step"] - lone - three, 2 * _fixed_cost(analysis)), rel=REL)
    ops.loc[gathers, "replica_group_size"] = [2, 4, 8, 16]  # every gather alone in its group
    assert latency_bound_collective.check(dataclasses.replace(analysis, ops=ops)) == []


def test_collectives_of_a_loop_body_merge_per_iteration_not_across_them(tmp_path):
    """Found on sample_profiles/jax_scan_rnn: collectives inside a scan run once per time step, and one
    iteration's collectives cannot wait for the next one's, so combining leaves one per iteration."""
    analysis, exp = analyze_scenario(tmp_path, scenarios.tiny_all_gathers, 4)
    ops = analysis.ops.copy()
    gathers = ops.index[ops["collective_kind"].eq("all-gather") & ~ops["is_async_start"].astype(bool)]
    ops.loc[gathers, "occurrences_per_step"] = 8.0  # as if each gather ran in an 8-iteration loop body
    f = only(latency_bound_collective.check(dataclasses.replace(analysis, ops=ops)), "latency-bound-collective")
    per_iteration = ring_all_gather_s(4 * exp["all_gather_bytes"], exp["replica_group_size"])
    assert f.details["combined_predicted_s_per_step"] == pytest.approx(8 * per_iteration, rel=REL)
    assert f.est_savings_s_per_step == pytest.approx(
        min(exp["tiny_all_gather_s_per_step"] - 8 * per_iteration, 8 * 3 * _fixed_cost(analysis)), rel=REL)


def test_collectives_of_different_computations_do_not_merge(tmp_path):
    """Two gathers in ENTRY and two in a loop body run once per step each (one trip), yet only the two of one
    computation can merge: two combined collectives remain, and each pair folds away one fixed cost."""
    from builders.hlo_snippets import small_gathers_module
    from xladiag.analyzer.analysis import analyze

    (tmp_path / "module_0001.jit_small.after_optimizations.txt").write_text(small_gathers_module(trips=1))
    analysis = analyze(hlo_dir=tmp_path, chip="v6e")
    gathers = analysis.ops[analysis.ops["collective_kind"].eq("all-gather")].set_index("op_name")
    assert dict(gathers["hlo_computation"]) == {"ag.0": "main", "ag.1": "main", "ag.body.0": "body",
                                                "ag.body.1": "body"}
    assert (gathers["occurrences_per_step"] == 1.0).all()
    f = only(latency_bound_collective.check(analysis), "latency-bound-collective")
    member = gathers.iloc[0]
    pair = max(2 * member["collective_bandwidth_s"], member["collective_latency_s"])
    assert f.details["combined_predicted_s_per_step"] == pytest.approx(2 * pair, rel=1e-9)
    assert f.est_savings_s_per_step == pytest.approx(2 * member["collective_latency_s"], rel=1e-9)


def test_on_a_cpu_host_wait_and_fixed_cost_are_not_told_apart(cpu):
    f = only(latency_bound_collective.check(cpu), "latency-bound-collective")
    assert f.confidence == "low"
    assert "cannot tell apart" in f.evidence and "upper bound" in f.evidence

"""Closed loop on a real recording: apply the fix a finding names, record again, compare with the claim.

sample_profiles/jax_fsdp_buckets (make_jax_fsdp_buckets.py) is one FSDP train step on 8 host devices
recorded twice: "before" gathers and reduce-scatters each of 24 parameters on its own, "after" applies
the `latency-bound-collective` fix (one flat bucket: one collective per kind and replica group).

What the claim is worth on CPU: it prices the combined collectives with the placeholder host's link
model (microseconds), but a CPU collective is a thread rendezvous that also absorbs the devices' arrival
skew, and the bucket adds concatenate/split copies. So the claim is an upper bound on the real saving;
in the committed pair it is about twice the real one (9.86 ms claimed, 5.23 ms measured).
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from conftest import SAMPLES, compared, diagnosed

PAIR = SAMPLES / "jax_fsdp_buckets"
RULE = "latency-bound-collective"
# The real saving must reach this share of the claim: the fix is real, only its size is overstated.
MIN_SHARE_OF_CLAIM = 0.4


@cache
def report(variant):
    return diagnosed(PAIR / variant).to_dict()


@cache
def comparison():
    return compared(PAIR / "before", PAIR / "after").to_dict()


def finding(variant, rule=RULE):
    return [f for f in report(variant)["findings"] if f["rule"] == rule]


def test_the_pair_differs_only_by_the_fix():
    answers = {v: json.loads((PAIR / v / "known_answers.json").read_text()) for v in ("before", "after")}
    assert answers["before"]["collectives_in_hlo"] == {"all-gather": 24, "reduce-scatter": 24, "all-reduce": 1}
    assert answers["after"]["collectives_in_hlo"] == {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 1}
    for v in ("before", "after"):
        assert report(v)["devices"] == 8 and report(v)["steps"]["count"] >= 4


def test_finding_in_before_is_gone_after_the_fix():
    (before,) = finding("before")
    # mean over devices and steps: an execution cut by the capture's edge can leave it a little under 49
    assert before["details"]["latency_bound_count_per_step"] == pytest.approx(49, abs=0.5)
    assert before["est_savings_s_per_step"] > 0.5 * report("before")["step_s"]
    assert finding("after") == []  # one collective per kind and group is left: nothing to combine
    (row,) = [f for f in comparison()["findings"] if f["rule"] == RULE]
    assert row["status"] == "disappeared"


def test_measured_saving_is_real_and_the_claim_is_its_upper_bound():
    claim = finding("before")[0]["est_savings_s_per_step"]
    step = comparison()["step"]
    assert step["verdict"] == "faster" and step["noise_test"]["beyond_noise"]
    saved = -step["delta_s"]
    assert saved == pytest.approx(report("before")["step_s"] - report("after")["step_s"])
    # Upper bound even at the CI's most favourable end; a real share of it at the least favourable one.
    assert -step["noise_test"]["ci_low_s"] <= claim * 1.1
    assert saved <= claim
    assert saved >= MIN_SHARE_OF_CLAIM * claim


def test_why_the_claim_overshoots_the_combined_collectives_are_not_free_on_cpu():
    """The claim priced each combined group at its predicted time; the recorded ones take far longer."""
    groups = {(g["kind"], g["replica_group_size"]): g for g in finding("before")[0]["details"]["groups"]}
    after_ops = report("after")["ops"]
    for kind in ("all-gather", "reduce-scatter"):
        predicted = groups[(kind, 8)]["combined_predicted_s"]
        measured = sum(o["measured_s_per_step"] or 0.0 for o in after_ops if o.get("collective_kind") == kind)
        assert measured > 100 * predicted
    collective = {r["class"]: r for r in comparison()["breakdown"]}["collective"]
    claim = finding("before")[0]["est_savings_s_per_step"]
    assert -collective["delta_s"] < claim  # the collective time that really went away is less than claimed

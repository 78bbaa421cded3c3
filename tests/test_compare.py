"""`diagnose compare` / `xladiag.compare` on pairs of captures that differ by a known change (tests/builders/
compare_pairs.py): each delta and verdict against what the builders injected."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import xladiag
from builders import compare_pairs as pairs
from conftest import compared, diagnosed, report_data
from xladiag.compare.noise import ALPHA, t_critical, t_two_sided_p, welch
from xladiag.errors import InputError

REL = 1e-6


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """name -> (base dir, new dir, expected), each pair written once."""
    root = tmp_path_factory.mktemp("pairs")
    out = {}
    for name, make in (("slower", pairs.one_op_slower), ("noise", pairs.only_noise),
                       ("exposed", pairs.collective_exposed), ("remat", pairs.remat_removed),
                       ("renamed", pairs.renamed_ops),
                       ("slower_noisy", lambda: pairs.one_op_slower(1.5, jitter=0.01)),
                       ("slightly_slower", lambda: pairs.one_op_slower(1.1))):
        base, new, expected = make()
        out[name] = (base.write(root / name / "base").parents[3], new.write(root / name / "new").parents[3], expected)
    return out


def _compare(written, name, **kwargs):
    base, new, expected = written[name]
    return compared(base, new, **kwargs), expected


def _op(comparison, name):
    rows = comparison.ops[comparison.ops["name"] == name]
    assert len(rows) == 1, comparison.ops
    return rows.iloc[0]


def test_one_op_twice_as_slow_is_that_op_and_a_regression(written):
    c, exp = _compare(written, "slower", fail_on_regression=0.05)
    assert c.verdict == "slower" and c.regressed
    step = c.data["step"]
    assert step["delta_s"] == pytest.approx(exp["step_delta_s"], rel=REL)
    assert step["ratio"] == pytest.approx(exp["new_step_s"] / exp["base_step_s"], rel=REL)
    op = _op(c, "fusion.2")
    assert op["status"] == "slower" and op["matched_by"] == "name"
    assert op["delta_s_per_step"] == pytest.approx(exp["op_delta_s"], rel=REL)
    assert op["ratio"] == pytest.approx(2.0, rel=1e-4)
    assert (c.ops["status"] == "slower").sum() == 1 and set(c.ops["status"]) == {"slower", "unchanged"}
    assert c.data["mfu"]["ratio"] == pytest.approx(exp["base_step_s"] / exp["new_step_s"], rel=1e-4)
    compute = next(r for r in c.data["breakdown"] if r["class"] == "compute")
    assert compute["delta_s"] == pytest.approx(exp["op_delta_s"], rel=1e-4)


def test_a_slowdown_under_the_threshold_is_reported_not_gated(written):
    c, exp = _compare(written, "slightly_slower", fail_on_regression=0.05)
    change = exp["step_delta_s"] / exp["base_step_s"]
    assert 0.02 < change < 0.05
    assert c.verdict == "slower" and not c.regressed
    assert compared(*written["slightly_slower"][:2], fail_on_regression=0.02).regressed


def test_noise_alone_is_within_noise_and_never_a_regression(written):
    c, exp = _compare(written, "noise", fail_on_regression=0.0)
    assert c.verdict == "within noise" and not c.regressed
    # The per-step distributions the test ran on are the builder's jitter, step by step.
    base_steps = np.array(c.data["base"]["per_step_s"])
    np.testing.assert_allclose(base_steps, exp["template_step_s"] * np.array(exp["base_scales"]), rtol=1e-5)
    assert c.data["step"]["noise_test"]["p_value"] >= ALPHA
    assert (c.ops["status"] == "unchanged").all()
    spread = np.std(np.array(c.data["new"]["per_step_s"]), ddof=1), np.std(base_steps, ddof=1)
    assert c.data["ops_summary"]["rel_tol"] == pytest.approx(max(0.05, 2 * max(spread) / base_steps.mean()), rel=1e-6)


def test_a_real_change_under_jitter_is_beyond_noise(written):
    c, exp = _compare(written, "slower_noisy", fail_on_regression=0.05)
    test = c.data["step"]["noise_test"]
    assert c.verdict == "slower" and c.regressed
    assert test["p_value"] < ALPHA and abs(c.data["step"]["delta_s"]) > test["spread_s"] > 0
    assert test["ci_low_s"] < exp["step_delta_s"] < test["ci_high_s"]


def test_collective_made_exposed(written):
    c, exp = _compare(written, "exposed")
    op = _op(c, "all-gather-done")
    assert op["status"] == "slower" and op["delta_s_per_step"] == pytest.approx(exp["op_delta_s"], rel=REL)
    assert c.data["step"]["delta_s"] == pytest.approx(exp["step_delta_s"], rel=REL)
    f = c.findings.set_index("key").loc[exp["finding_key"]]
    assert f["status"] == "appeared" and f["new_s_per_step"] == pytest.approx(exp["exposed_new_s"], rel=1e-3)
    collective = next(r for r in c.data["breakdown"] if r["class"] == "collective")
    assert collective["delta_s"] == pytest.approx(exp["op_delta_s"], rel=1e-3)


def test_remat_removed(written):
    c, exp = _compare(written, "remat")
    assert c.verdict == "faster" and not c.regressed
    removed = c.ops[c.ops["status"] == "removed"]
    assert sorted(removed["name"]) == exp["removed_ops"]
    assert removed["delta_s_per_step"].sum() == pytest.approx(exp["step_delta_s"], rel=REL)
    assert c.data["step"]["delta_s"] == pytest.approx(exp["step_delta_s"], rel=REL)
    f = c.findings.set_index("key").loc[exp["finding_key"]]
    assert f["status"] == "disappeared" and f["base_s_per_step"] == pytest.approx(exp["remat_s"], rel=1e-3)
    # a clone keeps its original's time class (matmul clones are compute, not "other")
    classes = c.ops.set_index("name")["time_class"]
    for name in exp["removed_ops"]:
        assert classes[name] == classes[re.sub(r"\.remat\d*$", "", name)] != "other", name


def test_renamed_ops_match_by_framework_op_and_source(written):
    c, exp = _compare(written, "renamed")
    assert c.verdict == "unchanged"
    assert not (c.ops["status"].isin(["new", "removed"])).any()
    group = c.ops[c.ops["matched_by"] == "framework op"]
    assert len(group) == 1
    assert set(group.iloc[0]["base_name"].split(", ")) == set(exp["renamed"])
    assert set(group.iloc[0]["name"].split(", ")) == set(exp["renamed"].values())
    assert group.iloc[0]["delta_s_per_step"] == 0.0


def test_json_report_against_capture(written, tmp_path):
    base, new, exp = written["slower"]
    saved = tmp_path / "base.json"
    diagnosed(base).to_json(saved)
    from_json = xladiag.compare(saved, new)
    from_capture = compared(base, new)
    assert from_json.data["base"]["input_kind"] == "json report"
    for key in ("step", "ops", "findings", "breakdown", "mfu"):
        assert from_json.data[key] == from_capture.data[key]


def test_old_or_unknown_json_is_read_or_refused_with_one_line(written, tmp_path):
    base, new, exp = written["slower"]
    data = report_data(base)
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**data, "schema_version": 3}))
    with pytest.raises(InputError, match="schema_version 3, this xladiag reads 2: upgrade xladiag") as err:
        xladiag.compare(newer, new)
    assert "\n" not in str(err.value)
    # schema 1 counted a finding's saving after the overlap (now counted_s_per_step): refused, not misread.
    older = tmp_path / "older.json"
    older.write_text(json.dumps({**data, "schema_version": 1}))
    with pytest.raises(InputError, match="schema_version 1, this xladiag reads 2"):
        xladiag.compare(older, new)
    # A report written before per-step times were kept: read, step change untested, threshold alone.
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**data, "steps": {k: v for k, v in data["steps"].items() if k != "per_step_s"}}))
    c = xladiag.compare(old, new, fail_on_regression=0.05)
    assert c.verdict == "untested" and c.regressed
    assert any("no per-step times" in w for w in c.data["warnings"])
    compare_json = tmp_path / "compare.json"
    c.to_json(compare_json)
    with pytest.raises(InputError, match="a compare report"):
        xladiag.compare(compare_json, new)


def test_json_output_is_versioned_and_strict(written):
    c, _ = _compare(written, "exposed")
    data = json.loads(c.to_json())
    assert data["compare_schema_version"] == 1 and data["headline"] == c.headline
    assert data["step"]["noise_test"]["name"] == "Welch's t-test (two-sided)"
    assert len(repr(c)) < 400 and "slower" in repr(c)


def test_welch_matches_the_t_table_and_scipy():
    # t = 2.776 with 4 degrees of freedom is the two-sided 5 % point of every t table.
    assert t_two_sided_p(2.776445, 4) == pytest.approx(0.05, abs=1e-6)
    assert t_critical(4) == pytest.approx(2.776445, rel=1e-5)
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    for na, nb in ((3, 3), (5, 9), (60, 40)):
        a, b = rng.normal(1.0, 0.05, na), rng.normal(1.03, 0.09, nb)
        ours, ref = welch(a, b), stats.ttest_ind(b, a, equal_var=False)
        assert ours.t == pytest.approx(ref.statistic, rel=1e-9)
        assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-7)


def test_welch_edge_cases():
    assert welch([1.0], [2.0, 2.1]).beyond_noise is None  # one step: no spread
    steady = welch([1.0, 1.0, 1.0], [1.1, 1.1, 1.1])
    assert steady.beyond_noise and steady.p_value == 0.0
    assert welch([1.0, 1.0], [1.0, 1.0]).beyond_noise is False
    # Significant by the test but below one step's jitter: within noise.
    rng = np.random.default_rng(5)
    a, b = rng.normal(1.0, 0.05, 2000), rng.normal(1.01, 0.05, 2000)
    big = welch(a, b)
    assert big.p_value < ALPHA and big.beyond_noise is False and "spread" in big.reason


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "xladiag.cli", *map(str, args)], capture_output=True, text=True,
                          env=env)


@pytest.mark.slow
def test_cli_exit_codes_and_share_parsing(written, tmp_path):
    base, new, _ = written["slower"]
    tripped = _cli("compare", base, new, "--format", "json", "-o", tmp_path / "c.json", "--fail-on-regression", "5%")
    assert tripped.returncode == 3, tripped.stderr
    assert "gate: regression" in tripped.stderr
    assert json.loads((tmp_path / "c.json").read_text())["regression"]["tripped"] is True
    ok = _cli("compare", base, new, "--format", "markdown", "-o", "-", "-q", "--fail-on-regression", "0.5")
    assert ok.returncode == 0 and ok.stdout.startswith("## xladiag compare") and ok.stderr == ""
    for ambiguous in ("5", "1"):
        bad = _cli("compare", base, new, "--fail-on-regression", ambiguous)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "ambiguous" in bad.stderr
    missing = _cli("compare", base, tmp_path / "nope")
    assert missing.returncode == 1 and "no such file" in missing.stderr
    helped = _cli("--help")
    assert "diagnose compare BASE NEW" in helped.stdout


@pytest.mark.slow
def test_cli_on_github_actions_annotates_the_regression_and_appends_the_summary(written, tmp_path):
    import os

    base, new, _ = written["slower"]
    summary = tmp_path / "summary.md"
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    run = _cli("compare", base, new, "--format", "json", "-o", "-", "-q", "--fail-on-regression", "5%",
               "--step-summary", env=env)
    assert run.returncode == 3
    json.loads(run.stdout)  # the report alone on stdout: the annotation went to stderr
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("::error")]
    assert len(errors) == 1 and "fail-on-regression" in errors[0]
    assert summary.read_text().startswith("## xladiag compare: slower beyond noise")
    unset = {k: v for k, v in env.items() if k != "GITHUB_STEP_SUMMARY"}
    refused = _cli("compare", base, new, "--step-summary", env=unset)
    assert refused.returncode == 2 and "GITHUB_STEP_SUMMARY" in refused.stderr


def test_a_real_recording_against_itself_and_its_own_json(tmp_path):
    from conftest import SAMPLES

    sample = SAMPLES / "jax_fsdp_tp_train"
    saved = tmp_path / "r.json"
    report = diagnosed(sample)
    report.to_json(saved)
    c = xladiag.compare(saved, sample)
    in_step = sum(1 for o in report.to_dict()["ops"] if o["in_step"])
    assert c.verdict == "unchanged" and c.data["step"]["delta_s"] == 0.0
    assert len(c.ops) == len({(o["module"], o["name"]) for o in report.to_dict()["ops"] if o["in_step"]}) <= in_step
    assert (c.ops["matched_by"] == "name").all() and (c.ops["delta_s_per_step"] == 0).all()
    assert list(c.findings["key"]) and (c.findings["status"] == "unchanged").all()
    assert c.data["base"]["per_step_s"] == report.to_dict()["steps"]["per_step_s"]
    assert len(c.data["base"]["per_step_s"]) == report.analysis.steps.count


def test_every_top_level_field_of_the_compare_json_is_documented(written):
    from conftest import REPO

    doc = (REPO / "docs" / "compare.md").read_text(encoding="utf-8")
    section = doc.split("## The compare JSON", 1)[1].split("### side", 1)[0]
    documented = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            documented.update(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    c, _ = _compare(written, "slower", fail_on_regression=0.05)
    data = c.to_dict()
    assert set(data) == documented
    side_doc = doc.split("### side", 1)[1].split("###", 1)[0]
    assert set(data["base"]) == set(re.findall(r"`([a-z_]+)`", side_doc)) - {"capture"}


def test_a_predicted_report_is_not_compared_with_a_measured_one(written, tmp_path):
    from conftest import SAMPLES

    predicted = tmp_path / "hlo.json"
    diagnosed(hlo_dir=SAMPLES / "hlo_rules_dot_aligned_1024", chip="v6e").to_json(predicted)
    with pytest.raises(InputError, match="one report is measured and the other predicted"):
        xladiag.compare(predicted, written["slower"][1])
    both = xladiag.compare(predicted, predicted)  # two static diagnoses compare on predicted times
    assert both.verdict == "unchanged" and both.data["ops_summary"]["time"] == "predicted"
    assert both.data["step"]["noise_test"]["beyond_noise"] is None  # nothing measured: no noise test
    assert len(both.ops) and (both.ops["status"] == "unchanged").all()


def test_two_findings_sharing_a_key_are_one_change_not_every_pairing():
    """A key repeated on both sides (two findings of one rule and kind with no main op) pairs once: the
    comparison has one row for it, with both findings' time summed per side."""
    from xladiag.compare.ops import compare_findings

    def finding(t):
        return {"rule": "retiling-copy", "kind": "", "key": "retiling-copy::", "title": "copies",
                "severity": "low", "time_s_per_step": t, "est_savings_s_per_step": t}

    out = compare_findings([finding(1e-3), finding(2e-3)], [finding(1e-3), finding(1e-3)], base_step_s=0.1)
    assert len(out) == 1
    row = out.iloc[0]
    assert row["base_s_per_step"] == pytest.approx(3e-3) and row["new_s_per_step"] == pytest.approx(2e-3)
    assert row["status"] == "shrank"


def test_closed_loop_shows_the_claim_alone_and_counted():
    """A base finding whose ops another finding also names claims more alone than it counts in the total:
    compare carries both, and the Markdown says so when they differ."""
    from xladiag.compare.ops import compare_findings
    from xladiag.compare.reports import _closed_loop
    from xladiag.report.compare_markdown import _closed_loop_lines

    base = [{"key": "remat-overhead::f.remat", "rule": "remat-overhead", "title": "Recomputation", "severity": "high",
             "time_s_per_step": 0.030, "est_savings_s_per_step": 0.025, "counted_s_per_step": 0.0085},
            {"key": "input-bound::", "rule": "input-bound", "title": "Input", "severity": "medium",
             "time_s_per_step": 0.010, "est_savings_s_per_step": 0.008, "counted_s_per_step": 0.008}]
    rows = _closed_loop(compare_findings(base, [], base_step_s=0.1), step_delta_s=-0.02)
    by_rule = rows.set_index("rule")
    assert by_rule.loc["remat-overhead", "claimed_s_per_step"] == pytest.approx(0.025)
    assert by_rule.loc["remat-overhead", "claimed_counted_s_per_step"] == pytest.approx(0.0085)
    lines = "\n".join(_closed_loop_lines(rows.to_dict("records"), 200))
    assert "claimed 25 ms alone (8.5 ms counted in the base's total" in lines
    assert "claimed 8 ms;" in lines  # equal numbers: said once

"""Rule selection as a CI user configures it: --select/--ignore, [tool.xladiag] in pyproject.toml, baselines.

Each changes exactly what it should (the findings of the named rules or keys, nothing else), the left-out
findings are listed with why in every format, and the gates follow the kept findings only.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import CPU_SAMPLE
from xladiag.analyzer.analysis import analyze
from xladiag.api import build_report
from xladiag.cli import main
from xladiag.config import baseline_keys, baseline_text, load_project_config, read_baseline, selection
from xladiag.errors import InputError, UsageError
from xladiag.rules.registry import RULE_IDS
from xladiag.rules.selection import band_of, baseline_entry, size_band


@pytest.fixture(scope="module")
def cpu():
    return analyze(CPU_SAMPLE)


@pytest.fixture(scope="module")
def full(cpu):
    return build_report(cpu)


def run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, **kwargs)


def _keys(report):
    return [f.key for f in report.findings]


def test_the_sample_has_findings_of_several_rules(full):
    # The premise of every test below: more than one rule fires, more than one finding per rule for some.
    rules = [f.rule for f in full.findings]
    assert len(set(rules)) >= 3 and len(rules) > len(set(rules)), rules


def test_select_keeps_exactly_the_named_rules(cpu, full):
    chosen = sorted({f.rule for f in full.findings})[:2]
    report = build_report(cpu, selection(select=",".join(chosen)))
    assert {f.rule for f in report.findings} == set(chosen)
    assert sorted(_keys(report)) == sorted(f.key for f in full.findings if f.rule in chosen)
    left = {d.finding.key: d.why for d in report.dropped}
    assert set(left) == {f.key for f in full.findings if f.rule not in chosen}
    assert set(left.values()) == {"rule not in --select"}
    data = report.to_dict()["selection"]
    assert data["select"] == chosen
    assert {r["rule"] for r in data["rules_left_out"]} == set(RULE_IDS) - set(chosen)


def test_ignore_drops_a_rule_before_the_accounting(cpu, full):
    # latency-bound-collective outranks remat-overhead and exposed-collective on the collectives they also
    # name: ignoring it hands those ops back (remat first), and the total still counts each op once.
    by_key = {f.key: f for f in full.findings}
    remat = by_key["remat-overhead::"]
    assert any(k == "latency-bound-collective::" for _, k in remat.related)
    report = build_report(cpu, selection(ignore=["latency-bound-collective"]))
    assert sorted(_keys(report)) == sorted(k for k in by_key if not k.startswith("latency-bound-collective"))
    assert not any(k.startswith("latency-bound-collective") for f in report.findings for _, k in f.related)
    again = {f.key: f for f in report.findings}
    assert again[remat.key].counted_s_per_step > remat.counted_s_per_step  # it counts the ops handed back
    assert again[remat.key].est_savings_s_per_step == remat.est_savings_s_per_step  # alone: the same fix
    assert again[remat.key].time_s_per_step == remat.time_s_per_step  # the cost is the rule's, whatever is kept
    assert report.recoverable_s_per_step == pytest.approx(sum(f.counted for f in report.findings))
    assert report.recoverable_s_per_step <= cpu.step_s


def test_baseline_leaves_out_exactly_its_keys_and_the_gate_follows(cpu, full, tmp_path):
    accepted = full.findings[0]
    report = build_report(cpu, selection(baseline=[accepted.key]))
    assert sorted(_keys(report)) == sorted(k for k in _keys(full) if k != accepted.key)
    assert [d.finding.key for d in report.dropped] == [accepted.key]

    # The CLI: write a baseline, then only new findings trip --fail-on.
    base = tmp_path / "baseline.txt"
    first = run(CPU_SAMPLE, "-q", "--format", "json", "-o", tmp_path / "a.json", "--fail-on", "low",
                "--write-baseline", base)
    assert first.exit_code == 3, first.stderr
    assert read_baseline(base) == {baseline_entry(f) for f in full.findings}  # each key at its size band
    second = run(CPU_SAMPLE, "-q", "--format", "json", "-o", tmp_path / "b.json", "--fail-on", "low",
                 "--baseline", base)
    assert second.exit_code == 0, second.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["findings"] == [] and data["recoverable"]["s_per_step"] == 0
    assert {d["key"] for d in data["selection"]["ignored_findings"]} == {f.key for f in full.findings}
    assert all(d["why"] == f"accepted in baseline {base}" for d in data["selection"]["ignored_findings"])

    # One key taken out of the baseline: exactly that finding is new, and the gate names it (a fix: a note that
    # saves nothing never trips a gate).
    newest = [f for f in full.findings if f.severity != "info"][-1]
    base.write_text("\n".join(k for k in _keys(full) if k != newest.key) + "\n")
    third = run(CPU_SAMPLE, "-q", "--format", "json", "-o", tmp_path / "c.json", "--fail-on", "low",
                "--baseline", base)
    assert third.exit_code == 3
    assert [f["key"] for f in json.loads((tmp_path / "c.json").read_text())["findings"]] == [newest.key]


def test_the_severity_gate_follows_the_selection(full, tmp_path):
    high = sorted({f.rule for f in full.findings if f.severity == "high"})
    assert high and any(f.severity != "high" for f in full.findings)
    out = tmp_path / "r.json"
    assert run(CPU_SAMPLE, "-q", "--format", "json", "-o", out, "--fail-on", "high").exit_code == 3
    kept = run(CPU_SAMPLE, "-q", "--format", "json", "-o", out, "--fail-on", "high", "--ignore", ",".join(high))
    assert kept.exit_code == 0, kept.stderr
    data = json.loads(out.read_text())
    assert data["findings"] and all(f["severity"] != "high" for f in data["findings"])
    assert run(CPU_SAMPLE, "-q", "--format", "json", "-o", out, "--fail-on", "high", "--select", high[0]).exit_code == 3


def test_a_json_report_is_a_baseline(full, tmp_path):
    path = tmp_path / "report.json"
    full.to_json(path)
    assert read_baseline(path) == {baseline_entry(f) for f in full.findings}
    path.write_text(json.dumps(_keys(full)[:2]))
    assert read_baseline(path) == set(_keys(full)[:2])



@pytest.mark.parametrize("content", [
    {"compare_schema_version": 1, "findings": []},  # a comparison, not a report: its keys are not accepted ones
    {"schema_version": 1, "findings": ["exposed-collective::"]},  # findings that are not objects
    {"schema_version": 1},
])
def test_a_json_that_is_not_a_report_or_key_list_is_refused_in_one_line(tmp_path, content):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputError, match="a JSON baseline is a diagnose report") as err:
        read_baseline(path)
    assert "\n" not in str(err.value)


def test_pyproject_table_is_found_upward_and_the_command_line_wins(full, tmp_path, monkeypatch):
    first, second = sorted({f.rule for f in full.findings})[:2]
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[tool.xladiag]\nignore = ["{first}"]\n')
    nested = tmp_path / "src" / "pkg"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    assert load_project_config().ignore == (first,)

    out = tmp_path / "r.json"
    assert run(CPU_SAMPLE, "-q", "--format", "json", "-o", out).exit_code == 0
    data = json.loads(out.read_text())
    assert first not in {f["rule"] for f in data["findings"]} and second in {f["rule"] for f in data["findings"]}
    why = f"in {tmp_path / 'pyproject.toml'} [tool.xladiag] ignore"
    assert data["selection"]["rules_left_out"] == [{"rule": first, "why": why}]

    assert run(CPU_SAMPLE, "-q", "--format", "json", "-o", out, "--ignore", second).exit_code == 0
    rules = {f["rule"] for f in json.loads(out.read_text())["findings"]}
    assert first in rules and second not in rules


def test_markdown_and_html_list_what_was_left_out(cpu, full):
    dropped = full.findings[0]
    report = build_report(cpu, selection(baseline=[dropped.key], ignore=["mxu-padding"]))
    md = report.to_markdown()
    section = md[md.index("## Left out"):]
    assert dropped.rule in section and "accepted in baseline" in section and "mxu-padding" in section
    html = report.to_html()
    assert 'id="left-out"' in html and "accepted in baseline" in html
    assert 'id="left-out"' not in full.to_html() and "## Left out" not in full.to_markdown()


@pytest.mark.parametrize("args,needle", [
    (("--select", "exposed-collective,no-such-rule"), "--select: unknown rule 'no-such-rule'"),
    (("--ignore", "remat"), "--ignore: unknown rule 'remat'"),
])
def test_an_unknown_rule_is_a_usage_error_listing_the_valid_ones(tmp_path, args, needle):
    result = run(CPU_SAMPLE, "-o", tmp_path / "r.html", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and ", ".join(RULE_IDS) in lines[0]
    assert not (tmp_path / "r.html").exists()


def test_a_bad_pyproject_key_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.xladiag]\nselec = ["remat-overhead"]\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="unknown key selec in \\[tool.xladiag\\]; valid keys: select, ignore"):
        load_project_config()


def test_notes_that_save_nothing_never_trip_fail_on(full, tmp_path):
    """On the CPU capture the exposed collectives save nothing (synchronous rendezvous): notes, not fixes."""
    notes = [f for f in full.findings if f.rule == "exposed-collective"]
    assert notes and all(f.severity == "info" and f.est_savings_s_per_step == 0 for f in notes)
    out = tmp_path / "r.json"
    result = run(CPU_SAMPLE, "-q", "--format", "json", "-o", out, "--fail-on", "low", "--select", "exposed-collective")
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert {f["severity"] for f in data["findings"]} == {"info"} and "biggest fix" not in data["headline"]


def test_size_bands_are_powers_of_two_of_the_saving_share():
    # saving 5 ms of a 100 ms step (cost 10 ms, 10 % of the step): 1/20 lies in [1/32, 1/16)
    assert band_of(0.005, 0.010, 0.10) == -5
    assert band_of(0.007, 0.010, 0.10) == -4  # 7 % of the step: [1/16, 1/8)
    assert band_of(0.0, 0.010, 0.10) == band_of(0.001, 0.0, 0.0) == -20  # nothing to save, or no cost


def test_a_finding_that_grows_past_its_band_is_new_again(cpu, full):
    f = next(f for f in full.findings if f.severity != "info")
    band = size_band(f)
    assert build_report(cpu, selection(baseline=[f"{f.key} band={band}"])).dropped[0].finding.key == f.key
    assert f.key in _keys(build_report(cpu, selection(baseline=[f"{f.key} band={band - 1}"])))  # grew past it
    # accepted at a larger band: smaller than accepted, still accepted
    assert f.key not in _keys(build_report(cpu, selection(baseline=[f"{f.key} band={band + 2}"])))


def test_an_old_baseline_without_bands_still_matches_and_asks_to_be_rewritten(cpu, full, tmp_path):
    base = tmp_path / "old.txt"
    base.write_text("# written before size bands\n" + "\n".join(_keys(full)) + "\n")
    report = build_report(cpu, selection(baseline=base))
    assert report.findings == () and len(report.dropped) == len(full.findings)
    warned = [w for w in report.analysis.warnings if str(base) in w]
    assert len(warned) == 1 and "no size band" in warned[0] and "--write-baseline" in warned[0]
    notes = sum(f.severity == "info" for f in full.findings)
    assert f"no new findings; {len(full.findings)} accepted by baseline" in report.headline, report.headline
    assert notes == 0 or "accepted by baseline" in report.headline
    fresh = tmp_path / "new.txt"
    fresh.write_text(baseline_text(baseline_keys(report)))
    assert not [w for w in build_report(cpu, selection(baseline=fresh)).analysis.warnings if str(fresh) in w]


def test_gates_in_pyproject_apply_unless_the_command_line_says_otherwise(full, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.xladiag]\nfail_on = "high"\nmax_exposed_host_transfer = 0.5\n')
    monkeypatch.chdir(tmp_path)
    assert dict(load_project_config().gates) == {"fail_on": "high", "max_exposed_host_transfer": 0.5}
    out = tmp_path / "r.json"
    tripped = run(CPU_SAMPLE, "-q", "--format", "json", "-o", out)
    assert tripped.exit_code == 3, tripped.stderr  # the sample has high findings
    assert [g["name"] for g in json.loads(out.read_text())["gates"]] == ["fail-on", "max-exposed-host-transfer"]
    ignored = ",".join(sorted({f.rule for f in full.findings if f.severity == "high"}))
    assert run(CPU_SAMPLE, "-q", "--format", "json", "-o", out, "--ignore", ignored).exit_code == 0
    (tmp_path / "pyproject.toml").write_text('[tool.xladiag]\nmax_exposed_collective = 5\n')
    with pytest.raises(UsageError, match=r"pyproject.toml \[tool.xladiag\] max_exposed_collective '5' is ambiguous"):
        load_project_config()

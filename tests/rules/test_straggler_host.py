"""straggler-host and the per-host step times: multi-host TPU-shaped captures with one host injected slow."""

from __future__ import annotations

import json

import pytest

from builders import scenarios as xb
from builders.annotated_steps import annotated_tpu_steps
from builders.scenarios import HostsCapture
from rule_helpers import REL, analyze_scenario, only
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hosts.step_times import host_step_times
from xladiag.api import build_report
from xladiag.rules import straggler_host


@pytest.mark.parametrize("hosts", [2, 4])
def test_one_host_slow_by_2ms_is_found_with_that_lag(tmp_path, hosts):
    analysis, exp = analyze_scenario(tmp_path, xb.multi_host_steps, hosts, slow_host=1, slow_ms=2.0)
    report = build_report(analysis)
    finding = only(report.findings, "straggler-host")
    assert finding.details["slowest_host"] == exp["slow_host"]
    assert finding.time_s_per_step == pytest.approx(exp["lag_s"], rel=REL)
    assert finding.details["median_step_s"] == pytest.approx(exp["step_s"], rel=REL)
    # The injected time is compute on that host's devices: busy lag, not recoverable by a setting.
    assert finding.details["busy_lag_s"] == pytest.approx(exp["lag_s"], rel=REL)
    assert finding.est_savings_s_per_step == 0.0 and "busy" in finding.fix.split(".")[0]
    assert [h["host"] for h in finding.details["hosts"]][0] == exp["slow_host"]
    assert len(finding.details["hosts"]) == hosts and exp["slow_host"] in finding.evidence
    # The report shows the hosts in every format.
    data = json.loads(report.to_json())["host_steps"]
    assert data["slowest_host"] == exp["slow_host"] and data["lag_s"] == pytest.approx(exp["lag_s"], rel=REL)
    assert [h["devices"] for h in data["hosts"]] == [exp["devices_per_host"]] * hosts
    assert "## Hosts" in report.to_markdown() and 'id="hosts-table"' in report.to_html()


def test_equal_hosts_give_nothing(tmp_path):
    analysis, exp = analyze_scenario(tmp_path, xb.multi_host_steps, 4)
    assert straggler_host.check(analysis) == []
    hs = host_step_times(analysis.device_steps, analysis.devices)
    assert hs.hosts == 4 and hs.lag_s == pytest.approx(0.0, abs=1e-12)
    assert hs.table["step_s"].to_numpy() == pytest.approx([exp["step_s"]] * 4, rel=1e-9)


def test_a_lag_under_three_percent_is_shown_but_not_a_finding(tmp_path):
    analysis, exp = analyze_scenario(tmp_path, xb.multi_host_steps, 4, slow_host=3, slow_ms=0.01 * 0.0686)
    assert straggler_host.check(analysis) == []
    data = json.loads(build_report(analysis).to_json())["host_steps"]
    assert data["slowest_host"] == exp["slow_host"] and 0 < data["lag_fraction"] < 0.03
    assert "## Hosts" in build_report(analysis).to_markdown()


def test_one_host_has_no_straggler(tmp_path):
    analysis, _ = analyze_scenario(tmp_path, xb.multi_host_steps, 1)
    hs = host_step_times(analysis.device_steps, analysis.devices)
    assert hs.hosts == 1 and hs.slowest_host is None and straggler_host.check(analysis) == []
    report = build_report(analysis)
    assert json.loads(report.to_json())["host_steps"]["lag_s"] is None and "## Hosts" not in report.to_markdown()


def test_per_host_times_are_the_same_when_hosts_are_reduced_in_worker_processes(tmp_path):
    """The per-host map (--workers) reduces each host where it is read: the per-(device, step) table, and so the
    per-host step times and the straggler, must come out the same as in one process."""
    builder, exp = xb.multi_host_steps(4, slow_host=0, slow_ms=1.0)
    builder.write(tmp_path)
    one, two = analyze(tmp_path, workers=1), analyze(tmp_path, workers=2)
    a, b = host_step_times(one.device_steps, one.devices), host_step_times(two.device_steps, two.devices)
    assert a.table.equals(b.table)
    assert (a.slowest_host, a.lag_s) == (b.slowest_host, b.lag_s) == (exp["slow_host"],
                                                                      pytest.approx(exp["lag_s"], rel=REL))


def test_a_host_whose_loader_waits_3ms_longer_lags_in_idle_time_and_that_is_the_saving(tmp_path):
    """Annotated steps (the input-bound shape) on three hosts; t1v-n-2's loader waits 4 ms instead of ~1 ms."""
    loaders_us = [1000, 1010, 4000]  # the two typical hosts differ a little: real hosts never match exactly
    HostsCapture([annotated_tpu_steps(loader_ps=us * 10**6, host=f"t1v-n-{i}")[0]
                  for i, us in enumerate(loaders_us)]).write(tmp_path)
    finding = only(build_report(analyze(tmp_path)).findings, "straggler-host")
    lag = (loaders_us[2] - (loaders_us[0] + loaders_us[1]) / 2) * 1e-6
    assert finding.details["slowest_host"] == "t1v-n-2"
    assert finding.time_s_per_step == pytest.approx(lag, rel=REL)
    assert finding.details["idle_lag_s"] == pytest.approx(lag, rel=REL)
    assert finding.est_savings_s_per_step == pytest.approx(lag, rel=REL)  # host-side: a fix recovers it
    assert "input pipeline" in finding.fix.split(". ")[0] and "grain_worker_count" in finding.fix

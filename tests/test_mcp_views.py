"""``diagnose mcp`` without the SDK: the server's cache of analyses (one per capture and options, refreshed when
the files change, shared by rule selections) and the answers' paging and refusals, on the CPU sample's report.
The tools over a real MCP session: tests/test_mcp_server.py."""

from __future__ import annotations

import copy
import os
import shutil
import sys

import pytest

from conftest import CPU_SAMPLE, SAMPLES, report_data
from xladiag import mcp_views as views
from xladiag.cli import main
from xladiag.errors import InputError, UsageError
from xladiag.mcp_cache import Diagnoses


@pytest.fixture(scope="module")
def data() -> dict:
    return report_data(CPU_SAMPLE)


@pytest.mark.slow
def test_one_analysis_per_capture_until_its_files_change(tmp_path):
    logdir = tmp_path / "logdir"
    shutil.copytree(CPU_SAMPLE, logdir)
    cache = Diagnoses()
    first = cache.entry(cache.options(str(logdir)))
    assert cache.entry(cache.options(str(logdir))) is first  # asked again: the cached report
    cache.last = first.id  # as the diagnose tool sets it
    assert cache.find(None) is first and cache.find(str(logdir)) is first and cache.find("r1") is first
    narrow = cache.entry(cache.options(str(logdir), select="exposed-collective"))
    assert narrow.id == "r2" and narrow.report.analysis is first.report.analysis  # a selection: no new analysis
    assert {f["rule"] for f in narrow.data["findings"]} == {"exposed-collective"}
    xplane = next(logdir.glob("plugins/profile/*/*.xplane.pb"))
    later = max(p.stat().st_mtime for p in logdir.rglob("*")) + 60  # newer than every file the copy kept
    os.utime(xplane, (later, later))  # captured again into the same folder
    again = cache.find("r1")
    assert again.id == "r1" and again.report.analysis is not first.report.analysis
    assert again.data["step_s"] == first.data["step_s"]
    assert cache.entry(cache.options(str(logdir)), refresh=True).report.analysis is not again.report.analysis


def test_refusals_name_what_is_wrong(tmp_path):
    cache = Diagnoses()
    with pytest.raises(UsageError, match="give a profile directory"):
        cache.options()
    with pytest.raises(InputError, match="nowhere: no such file or directory"):
        cache.options(str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match="no report yet"):
        cache.find(None)
    with pytest.raises(UsageError, match="no-such-rule"):
        cache.entry(cache.options(str(CPU_SAMPLE), select="no-such-rule"))  # before minutes of work


def test_ops_pages_cap_and_refuse_a_column_that_is_not_one(data):
    page = views.ops_page("r1", data, {}, limit=1000)
    assert page["returned"] == views.MAX_PAGE == len(page["ops"]) and page["next_offset"] == views.MAX_PAGE
    last = views.ops_page("r1", data, {}, offset=len(data["ops"]) - 3)
    assert last["returned"] == 3 and last["next_offset"] is None
    by_efficiency = views.ops_page("r1", data, {}, sort="efficiency", limit=100)["ops"]
    values = [o["efficiency"] for o in by_efficiency if o["efficiency"] is not None]
    assert values == sorted(values, reverse=True) and values
    by_name = [o["name"] for o in views.ops_page("r1", data, {}, sort="name", limit=5)["ops"]]
    assert by_name == sorted(o["name"] for o in data["ops"])[:5]  # text: alphabetical
    with pytest.raises(UsageError, match="no op column 'speed'"):
        views.ops_page("r1", data, {}, sort="speed")


def test_an_op_name_in_two_programs_asks_which(data):
    two = copy.deepcopy(data)
    twin = {**two["ops"][0], "module": "jit_eval_step", "program_id": "7"}
    two["ops"].append(twin)
    name = twin["name"]
    both = views.op("r1", two, name)
    assert [m["module"] for m in both["matches"]] == [data["ops"][0]["module"], "jit_eval_step"]
    assert views.op("r1", two, name, program="7")["op"]["module"] == "jit_eval_step"
    assert views.op("r1", two, name, program="jit_eval_step")["op"]["program_id"] == "7"
    long = copy.deepcopy(data)
    long["ops"][0]["hlo_text"] = "x" * (views.HLO_TEXT_CHARS + 10)
    cut = views.op("r1", long, name)["op"]
    assert len(cut["hlo_text"]) == views.HLO_TEXT_CHARS and cut["hlo_text_chars"] == views.HLO_TEXT_CHARS + 10


def test_a_finding_prefix_must_name_one_finding(data):
    rules = [f["rule"] for f in data["findings"]]
    repeated = next(r for r in rules if rules.count(r) > 1)
    with pytest.raises(UsageError, match="names several findings"):
        views.finding("r1", data, repeated)
    single = next(r for r in rules if rules.count(r) == 1)
    assert views.finding("r1", data, single)["finding"]["rule"] == single


def test_without_the_sdk_the_command_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp raises ImportError
    with pytest.raises(SystemExit) as exit_:
        main(["mcp"])
    assert exit_.value.code == 2
    assert "pip install 'xladiag[mcp]'" in capsys.readouterr().err


def test_without_a_trace_the_ops_rank_by_predicted_time():
    static = report_data(hlo_dir=SAMPLES / "hlo_rules_matmul_memory_bound", chip="v6e")
    predicted = sorted((o["predicted_s_per_step"] for o in static["ops"]), reverse=True)
    assert [o["predicted_s_per_step"] for o in static["ops"]] != predicted  # the report's own order differs
    top = views.summary("r1", static)["top_ops"]
    assert [o["predicted_s_per_step"] for o in top] == predicted[:views.TOP_OPS]
    page = views.ops_page("r1", static, {}, limit=100)
    assert page["sort"] == "predicted_s_per_step"
    assert [o["predicted_s_per_step"] for o in page["ops"]] == predicted[:100]


def test_a_sections_long_lists_come_a_page_at_a_time(data):
    many = copy.deepcopy(data)
    many["run"]["xplane_files"] = [f"plugins/profile/run/host{i}.xplane.pb" for i in range(250)]
    first = views.section("r1", many, "run", limit=100)
    assert first["value"]["xplane_files"] == many["run"]["xplane_files"][:100]
    assert first["paged"] == {"xplane_files": {"total": 250, "offset": 0, "returned": 100, "next_offset": 100}}
    assert first["value"]["name"] == many["run"]["name"]  # the rest whole
    last = views.section("r1", many, "run", offset=200, limit=100)
    assert last["paged"]["xplane_files"]["next_offset"] is None and len(last["value"]["xplane_files"]) == 50
    assert "paged" not in views.section("r1", data, "run")  # nothing long: as written
    assert views.section("r1", data, "step_s") == {"report": "r1", "field": "step_s", "value": data["step_s"]}

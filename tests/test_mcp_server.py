"""``diagnose mcp``: a real MCP client session over stdio (the SDK's stdio_client + ClientSession) against
``python -m xladiag.cli mcp``, every tool called on the CPU sample, each answer checked against the JSON
report of the same capture diagnosed in this process (``xladiag.diagnose(...).to_dict()``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import CPU_SAMPLE, REPO, report_data

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

import xladiag  # noqa: E402
from xladiag.rules.catalog import rule_catalog  # noqa: E402
from xladiag.rules.registry import RULE_IDS  # noqa: E402

pytestmark = pytest.mark.slow
CPU = str(CPU_SAMPLE)
TOOLS = {"diagnose", "finding", "ops", "op", "scopes", "section", "compare", "explain_rule"}


def _server() -> StdioServerParameters:
    # The folder holding this checkout's `xladiag` (not resolved: it may be a link named xladiag).
    here = str(Path(xladiag.__file__).parent.parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    return StdioServerParameters(command=sys.executable, args=["-m", "xladiag.cli", "mcp"],
                                 env={**os.environ, "PYTHONPATH": path}, cwd=str(REPO))


def _answer(result) -> tuple[bool, str]:
    error = getattr(result, "is_error", None)
    error = getattr(result, "isError", False) if error is None else error
    return bool(error), "".join(getattr(c, "text", "") for c in result.content)


async def _session(calls: list[tuple[str, str, dict]]) -> dict:
    """{label: answer} for each (label, tool, arguments), in one server process; 'tools' the names listed.
    An answer is the parsed JSON, or ('error', text) when the tool refused."""
    out = {}
    async with stdio_client(_server()) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = (await session.list_tools()).tools
        out["tools"] = {tool.name for tool in listed}
        out["descriptions"] = [tool.description for tool in listed]
        for label, tool, arguments in calls:
            failed, text = _answer(await session.call_tool(tool, arguments))
            out[label] = ("error", text) if failed else json.loads(text)
    return out


@pytest.fixture(scope="module")
def expected() -> dict:
    return report_data(CPU)


@pytest.fixture(scope="module")
def saved_json(tmp_path_factory, expected) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "base.json"
    path.write_text(json.dumps(expected), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def answers(expected, saved_json) -> dict:
    first_key = expected["findings"][0]["key"]
    top = expected["ops"][0]["name"]
    calls = [
        ("diagnose", "diagnose", {"path": CPU}),
        ("again", "diagnose", {"path": CPU}),
        ("selected", "diagnose", {"path": CPU, "select": "exposed-collective"}),
        ("as_list", "diagnose", {"path": CPU, "select": ["exposed-collective"]}),
        ("finding", "finding", {"key": first_key, "report": "r1"}),
        ("by_rule", "finding", {"key": "remat-overhead", "report": "r1"}),
        ("no_finding", "finding", {"key": "no-such-rule::", "report": "r1"}),
        ("page1", "ops", {"report": "r1", "limit": 50}),
        ("page2", "ops", {"report": "r1", "limit": 50, "offset": 50}),
        ("gathers", "ops", {"report": CPU, "category": "all-gather", "sort": "+measured_s_per_step", "limit": 3,
                            "offset": 1}),
        ("by_rule_ops", "ops", {"report": "r1", "rule": "exposed-collective", "bound_by": "latency",
                                "program": expected["ops"][0]["module"], "limit": 100}),
        ("none", "ops", {"report": "r1", "category": "no such category"}),
        ("op", "op", {"name": top, "report": "r1"}),
        ("no_op", "op", {"name": top + "x", "report": "r1"}),
        ("scopes", "scopes", {"report": "r1", "depth": 1}),
        ("inside", "scopes", {"report": "r1", "under": expected["scopes"][1]["scope"],
                              "sort": "total_measured_s_per_step", "limit": 3}),
        ("no_scope", "scopes", {"report": "r1", "under": expected["scopes"][1]["scope"] + "x"}),
        ("steps", "section", {"field": "steps"}),
        ("devices", "section", {"field": "device_list", "offset": 5, "limit": 2}),
        ("no_field", "section", {"field": "no_such_field"}),
        ("compare", "compare", {"base": str(saved_json), "new": CPU}),
        ("same", "compare", {"base": "r1", "new": CPU}),
        ("rule", "explain_rule", {"rule": "remat-overhead"}),
        ("rules", "explain_rule", {}),
        ("missing", "diagnose", {"path": str(REPO / "no_such_logdir")}),
    ]
    return asyncio.run(_session(calls))


def test_the_server_lists_every_tool(answers):
    assert answers["tools"] == TOOLS
    assert all(text and "\n " not in text for text in answers["descriptions"])  # docstrings, dedented


def test_diagnose_answers_the_reports_numbers(answers, expected):
    got = answers["diagnose"]
    assert got["report"] == "r1" and got["headline"] == expected["headline"]
    for key in ("step_s", "mfu", "breakdown", "recoverable", "devices", "measured", "ideal_step_s"):
        assert got["verdict"][key] == expected[key], key
    assert got["verdict"]["chip"] == expected["chip"]["name"]
    assert got["verdict"]["steps"]["count"] == expected["steps"]["count"]
    assert [f["key"] for f in got["findings"]] == [f["key"] for f in expected["findings"]]
    for row, want in zip(got["findings"], expected["findings"]):
        assert row["est_savings_s_per_step"] == want["est_savings_s_per_step"]
        assert row["severity"] == want["severity"] and row["ops"] == len(want["ops"])
    assert len(got["top_ops"]) == 10 and got["ops_total"] == len(expected["ops"])
    for row, want in zip(got["top_ops"], expected["ops"]):
        assert {k: want[k] for k in row} == row
    assert "finding(" in got["next"] and "ops(" in got["next"]


def test_the_analysis_is_cached_and_a_selection_is_its_own_report(answers, expected):
    assert answers["again"] == answers["diagnose"]  # same id: the cached report
    selected = answers["selected"]
    assert selected["report"] == "r2" and answers["as_list"] == selected  # ids as a list: the same selection
    assert {f["rule"] for f in selected["findings"]} == {"exposed-collective"}
    assert selected["findings_left_out"] == sum(f["rule"] != "exposed-collective" for f in expected["findings"])
    assert selected["verdict"]["step_s"] == expected["step_s"]


def test_finding_is_the_json_findings_whole(answers, expected):
    assert answers["finding"]["finding"] == expected["findings"][0]
    remat = [f for f in expected["findings"] if f["rule"] == "remat-overhead"]
    assert answers["by_rule"]["finding"] == remat[0]
    kind, text = answers["no_finding"]
    assert kind == "error" and "no-such-rule::" in text and expected["findings"][0]["key"] in text


def test_ops_pages_filters_and_sorts(answers, expected):
    page1, page2 = answers["page1"], answers["page2"]
    assert page1["total"] == len(expected["ops"]) and page1["returned"] == 50 and page1["next_offset"] == 50
    names = [o["name"] for o in page1["ops"] + page2["ops"]]
    assert names == [o["name"] for o in expected["ops"][:100]]
    gathers = sorted((o for o in expected["ops"] if o["category"] == "all-gather"),
                     key=lambda o: o["measured_s_per_step"])
    got = answers["gathers"]
    assert got["total"] == len(gathers) and [o["name"] for o in got["ops"]] == [o["name"] for o in gathers[1:4]]
    assert got["report"] == "r1"  # the path, diagnosed with default options, is the cached r1
    # The exposed-collective findings count the collectives; their ops are among those the findings name.
    named = {op["name"] for f in expected["findings"] if f["rule"] == "exposed-collective" for op in f["ops"]}
    rows = answers["by_rule_ops"]["ops"]
    assert rows and {o["name"] for o in rows} <= named and all(o["bound_by"] == "latency" for o in rows)
    none = answers["none"]
    assert none["total"] == 0 and "all-gather" in none["categories"] and "exposed-collective" in none["rules_with_ops"]
    assert none["programs"] == sorted({o["module"] for o in expected["ops"]})


def test_op_is_the_json_op_with_the_findings_that_count_it(answers, expected):
    got = answers["op"]
    assert got["op"] == expected["ops"][0]
    for key in got["findings"]:
        finding = next(f for f in expected["findings"] if f["key"] == key)
        assert finding  # a real finding's key
    named_by = [f["key"] for f in expected["findings"] if expected["ops"][0]["name"] in {o["name"] for o in f["ops"]}]
    assert set(named_by) <= set(got["findings"])
    kind, text = answers["no_op"]
    assert kind == "error" and "close:" in text and expected["ops"][0]["name"] in text


def test_scopes_are_the_jsons_scopes_below_a_scope(answers, expected):
    rows = expected["scopes"]
    assert answers["scopes"]["scopes"] == [r for r in rows if r["depth"] <= 1][:20]
    inner = rows[1]["scope"]
    below = [r for r in rows if r["scope"] == inner or r["scope"].startswith(inner + "/")]
    heaviest = sorted(below, key=lambda r: -r["total_measured_s_per_step"])
    got = answers["inside"]
    assert got["total"] == len(below) > 3 and got["scopes"] == heaviest[:3]
    kind, text = answers["no_scope"]
    assert kind == "error" and "close:" in text and inner in text


def test_section_is_the_json_field_paged(answers, expected):
    steps = answers["steps"]
    assert steps["report"] == "r2" and steps["value"] == expected["steps"]  # the last report diagnosed
    devices = answers["devices"]
    assert devices["items"] == expected["device_list"][5:7] and devices["total"] == len(expected["device_list"])
    assert devices["next_offset"] == (7 if len(expected["device_list"]) > 7 else None)
    kind, text = answers["no_field"]
    assert kind == "error" and "no_such_field" in text and "headline" in text


def test_compare_answers_the_comparisons_numbers(answers, saved_json):
    want = xladiag.compare(saved_json, CPU_SAMPLE).to_dict()
    got = answers["compare"]
    assert got["headline"] == want["headline"] and got["step"] == want["step"]
    assert got["ops_summary"] == want["ops_summary"] and got["findings_summary"] == want["findings_summary"]
    changed = [o for o in want["ops"] if o["status"] != "unchanged"]
    assert [o["name"] for o in got["op_changes"]] == [o["name"] for o in changed[:10]]


def test_compare_takes_a_report_id(answers, expected):
    same = answers["same"]  # r1 is this capture: the same analysis on both sides
    assert same["step"]["base_s"] == same["step"]["new_s"] == expected["step_s"]
    assert same["op_changes"] == [] and same["ops_summary"]["counts"]["unchanged"] == len(expected["ops"])


def test_explain_rule_is_the_rules_docstring(answers):
    row = next(r for r in rule_catalog() if r["id"] == "remat-overhead")
    got = answers["rule"]
    assert {k: got[k] for k in ("summary", "what", "why", "cost", "fix")} == \
        {k: row[k] for k in ("summary", "what", "why", "cost", "fix")}
    assert [d["name"] for d in got["details"]] == [d.name for d in row["details"]]
    assert [r["id"] for r in answers["rules"]["rules"]] == list(RULE_IDS)


def test_a_bad_path_is_one_line_refusal(answers):
    kind, text = answers["missing"]
    assert kind == "error" and "no_such_logdir: no such file or directory" in text

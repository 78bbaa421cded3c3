"""The compare renderers: Markdown that GitHub parses (tables intact, no prose line over 200 characters,
long lists folded), self-contained HTML, profile text shown as text in both."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import xladiag  # noqa: E402
from builders import compare_pairs as pairs  # noqa: E402
from test_report_html import EVIL_OP, EVIL_SOURCE  # noqa: E402
from test_report_markdown import check_tables, parse  # noqa: E402
from xladiag.report.compare_markdown import MAX_LINE, TOP_OPS  # noqa: E402


@pytest.fixture(scope="module")
def hostile_pair(tmp_path_factory):
    """The 'one op slower' pair as JSON reports, the slower op renamed to markup on the NEW side (so it is
    new and the old name removed), and many renamed ops so the tables need folding."""
    root = tmp_path_factory.mktemp("hostile")
    base_b, new_b, _ = pairs.one_op_slower()
    base = xladiag.diagnose(base_b.write(root / "base").parents[3]).to_dict()
    new = xladiag.diagnose(new_b.write(root / "new").parents[3]).to_dict()
    for op in new["ops"]:
        if op["name"] == "fusion.2":
            op["name"], op["source"], op["tf_op"] = EVIL_OP, EVIL_SOURCE, None
    filler = [dict(base["ops"][0], name=f"extra_fusion.{i}", tf_op=None, source=None,
                   measured_s_per_step=1e-6 * (i + 1)) for i in range(40)]
    new["ops"] += filler
    paths = []
    for name, data in (("base.json", base), ("new.json", new)):
        (root / name).write_text(json.dumps(data))
        paths.append(root / name)
    return xladiag.compare(*paths, fail_on_regression=0.05)


def test_markdown_tables_parse_lines_are_short_and_names_are_text(hostile_pair):
    text = hostile_pair.to_markdown()
    tables = check_tables(text)
    # gates, step, breakdown, ops, more ops (folded), inputs (folded), and the findings table when findings exist
    # (the low-precision lever of the compute-bound matmuls, whose cost grows with the slower op)
    findings = hostile_pair.to_dict()["findings"]
    assert len(tables) == 6 + bool(findings)
    assert tables[0][1][0] == "`--fail-on-regression`" and tables[0][1][3] == "❌ tripped"
    prose = [ln for ln in text.split("\n") if not ln.startswith("|")]
    assert max(map(len, prose)) <= MAX_LINE
    assert "<script>" not in text and "<img" not in text
    md, tokens = parse(text)
    html = md.render(text)
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;" in html  # shown, as text
    # the ops beyond the first TOP_OPS are folded
    assert text.count("<details>") >= 2
    assert re.search(r"<summary>\d+ more changed ops</summary>", text)
    ops_table = next(t for t in tables if t[0][0] == "Status" and "Op (base → new)" in t[0][1])
    assert len(ops_table) == TOP_OPS + 1
    assert text.startswith("## xladiag compare: slower beyond noise")


def test_html_is_self_contained_and_escapes_profile_text(hostile_pair):
    html = hostile_pair.to_html()
    assert "<script" not in html.lower()  # the compare page needs no script at all
    assert "<img" not in html and "&lt;img src=x onerror=alert(3)&gt;" in html
    assert not re.search(r"(src|href)=\"?(https?:)?//", html)
    for element_id in ("breakdown-base", "breakdown-new", "op-waterfall", "step-strip", "ops-table"):
        assert f'id="{element_id}"' in html
    assert "&lt;script&gt;alert" in html


@pytest.mark.slow
def test_html_renders_in_chromium_offline(hostile_pair, tmp_path):
    import test_browser

    if test_browser.CHROMIUM is None:
        pytest.skip("headless Chromium not found on PATH (Debian: apt-get install chromium)")
    page = tmp_path / "compare.html"
    hostile_pair.to_html(page)
    log = tmp_path / "net.json"
    test_browser.ARTIFACTS.mkdir(exist_ok=True)
    result = test_browser.chromium(page, tmp_path, f"--log-net-log={log}", "--dump-dom",
                                   f"--screenshot={test_browser.ARTIFACTS / 'compare.png'}", "--window-size=1280,2200")
    dom = result.stdout
    assert "</html>" in dom, result.stderr[-2000:]
    assert test_browser.page_requests(log) == []
    for chart in ("breakdown-base", "breakdown-new", "op-waterfall", "step-strip"):
        assert re.search(rf'<svg id="{chart}" class="chart', dom)
    # Ops in both sides one row each; removed and new ops one row per kind, their counts adding up.
    rows = re.findall(r'<tr class="st-row"><td class="st-(\w+)">', dom)
    statuses = list(hostile_pair.ops["status"])
    assert rows == [s for s in statuses if s not in ("removed", "new")]
    groups = re.findall(r'<tr class="group-row"><td class="st-(\w+)">.*?<td class="num group-count">(\d+)<', dom, re.S)
    for status in ("removed", "new"):
        assert sum(int(n) for s, n in groups if s == status) == statuses.count(status)
    assert "<script" not in dom  # the crafted op name stayed text


def test_removed_ops_are_grouped_by_kind_and_the_waterfall_names_them_before_everything_else():
    """jax_fsdp_buckets: bucketing removes 71 small collectives and fusions; one row and one waterfall bar
    per kind, each larger than what no name explains ("everything else", drawn last)."""
    from xladiag.report.compare_html import op_groups, waterfall_items

    samples = Path(__file__).resolve().parents[1] / "sample_profiles" / "jax_fsdp_buckets"
    comparison = xladiag.compare(samples / "before", samples / "after")
    data = comparison.to_dict()
    groups = op_groups(data["ops"], data["step"]["base_s"])
    removed = [g for g in groups if g["status"] == "removed"]
    assert sum(g["count"] for g in removed) == data["ops_summary"]["counts"]["removed"] == 71
    assert len(removed) == len({g["kind"] for g in removed}) < 71  # one row per kind
    items = waterfall_items(data["ops"], groups)
    rest = data["step"]["delta_s"] - sum(d for _, d in items)
    assert abs(items[0][1]) > abs(rest) and items[0][0].endswith("ops removed")
    assert [abs(d) for _, d in items] == sorted((abs(d) for _, d in items), reverse=True)
    page = comparison.to_html()
    labels = re.findall(r'text-anchor="end" fill="#333">([^<]*)<title>', page.split('id="op-waterfall"', 1)[1])
    assert labels[0] == "base step" and labels[-1] == "new step" and labels[-2].startswith("everything else")
    assert page.count('<tr class="group-row">') == len(groups)

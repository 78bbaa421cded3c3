"""The HTML report: self-contained, verdict first, pictures with the analysis' numbers, everything escaped."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from html import escape, unescape
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_report_json import CAPTURES, HLO_SAMPLE, capture_analysis, crafted_report, hlo_analysis  # noqa: E402
from xladiag.report import html as html_report  # noqa: E402
from xladiag.report import svg  # noqa: E402
from xladiag.report.html import render_html  # noqa: E402
from xladiag.report.model import Report  # noqa: E402
from xladiag.rules.base import OpEvidence, Priced, make_finding  # noqa: E402

EVIL_OP = '<script>alert("op")</script>|x\ny'
EVIL_HLO = "%evil = f32[] custom-call(), backend_config=\"</pre><script>alert(2)</script>\""
EVIL_SOURCE = "<img src=x onerror=alert(3)>.py:1"


class Page(HTMLParser):
    """Elements by id, every tag with its attributes, and the text of each element id'd."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.ids: dict[str, dict] = {}
        self.script_count = 0
        self._stack: list[tuple[str, dict]] = []
        self.texts: list[tuple[str, str]] = []  # (enclosing tag, text)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids[a["id"]] = a
        if tag == "script":
            self.script_count += 1
        if tag not in ("meta", "br", "input", "img", "link", "hr", "line", "circle", "rect", "polyline"):
            self._stack.append((tag, a))

    def handle_endtag(self, tag):
        while self._stack:
            t, _ = self._stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        if data.strip():
            self.texts.append((self._stack[-1][0] if self._stack else "", data))

    def by_class(self, tag: str, cls: str) -> list[dict]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


def assert_self_contained(page: Page, text: str):
    assert page.script_count == 1  # our inline sorter, nothing else
    for tag, attrs in page.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed", "base"), tag
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name == "href" and tag == "a" and re.fullmatch(r"#[\w-]+", value or ""):
                continue  # a link within the page (the contents bar) loads nothing
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster"):
                raise AssertionError(f"<{tag} {name}={value!r}> would load something")
    assert "url(" not in text and "@import" not in text
    assert "http://" not in text and "https://" not in text


@pytest.mark.parametrize("name", CAPTURES)
def test_report_opens_with_the_verdict_and_has_every_part(name):
    a = capture_analysis(name)
    text = render_html(crafted_report(a))
    page = Page(text)
    assert_self_contained(page, text)
    for ident in ("headline", "verdict", "breakdown-bar", "fixes", "fix-list", "fix-1", "capture-table",
                  "roofline", "timeline", "ops-table", "ops-filter"):
        assert ident in page.ids, ident
    # The verdict comes before the fixes, which come before the capture details and the ops table.
    order = [text.index(f'id="{i}"')
             for i in ("verdict", "breakdown-bar", "fix-list", "capture", "roofline", "ops-table")]
    assert order == sorted(order)
    # Step time as measured: the mean over measured device-steps, recomputed here.
    measured = a.steps.table[~a.steps.table["is_warmup"]]
    mean_s = measured["duration_ps"].mean() / 1e12
    shown = f"{mean_s * 1e3:.3g} ms" if mean_s < 1 else f"{mean_s:.3g} s"
    assert f'<div class="value">{shown}</div>' in text
    # One ops-table row per op.
    assert len(page.by_class("tr", "in-step")) + len(page.by_class("tr", "other-program")) == len(a.ops)
    # The finding's evidence chart: one measured bar per op of the finding.
    assert len(page.by_class("svg", "evidence-chart")) == 1
    assert text.count('fill="#e15759"><title>') >= 3


@pytest.mark.parametrize("name", CAPTURES)
def test_breakdown_bar_segments_are_the_breakdown_shares(name):
    a = capture_analysis(name)
    page = Page(render_html(crafted_report(a)))
    total = sum(v for v in a.breakdown.values() if v > 0)
    widths = {}
    for attrs in page.tags:
        tag, at = attrs
        if tag == "rect" and "seg" in (at.get("class") or "").split():
            widths[at["class"].split()[1].removeprefix("seg-")] = float(at["width"])
    bar = sum(widths.values())
    for key, value in a.breakdown.items():
        if value / total > 0.01:  # sub-pixel segments are drawn at a minimum width
            assert widths[key] / bar == pytest.approx(value / total, rel=0.01), key


def test_cpu_breakdown_is_mostly_collective():
    """The CPU sample's synchronous collectives are most of its step: the bar shows it."""
    a = capture_analysis("cpu_jax_train_step")
    coll = a.ops[a.ops["collective_kind"].notna() & a.ops["in_step"]]["measured_s_per_step"].sum()
    assert coll / a.steps.mean_s > 0.5
    text = render_html(crafted_report(a))
    seg = text.split('class="seg seg-collective ', 1)[1].split("</rect>", 1)[0]
    assert f"({100 * a.breakdown['collective'] / sum(a.breakdown.values()):.1f}%)" in seg


def test_roofline_has_one_dot_per_costed_op_and_the_v6e_ridge():
    a = capture_analysis("tpu_v6e_host_offload")
    ops = a.ops
    costed = ops[ops["in_step"] & (ops["flops"] > 0) & (ops["arithmetic_intensity"] > 0) & (ops["mean_s"] > 0)]
    assert len(costed) >= 3  # the broadcast_add fusions
    text = render_html(crafted_report(a))
    page = Page(text)
    assert len(page.by_class("circle", "op-dot")) == len(costed)
    # v6e: 918 TFLOP/s over 1.64 TB/s (both from the trace) -> ridge at ~560 FLOP/byte.
    ridge = a.devices["peak_flops_per_s"].median() / a.devices["hbm_bytes_per_s"].median()
    assert 555 < ridge < 565
    assert "ridge 560 FLOP/B" in text and "compute roof 918 TFLOP/s (trace)" in text
    # Each dot's tooltip names its op and bound-by.
    for op in costed["op_name"]:
        assert f"<title>{op}\n" in text
    assert text.count("bound by hbm</title>") == (costed["bound_by"] == "hbm").sum()


def test_timeline_draws_the_median_step_with_exposed_waits():
    a = capture_analysis("tpu_v6e_host_offload")
    text = render_html(crafted_report(a))
    svg = text.split('id="timeline"', 1)[1].split("</svg>", 1)[0]
    assert svg.count('class="lane"') == len(a.devices) == 4
    # Device 0's median step, recomputed: exposed (host-transfer) share of the drawn span.
    m = a.steps.after_warmup
    d0 = m[m["device"] == 0].sort_values("duration_ps")
    step = d0.iloc[(len(d0) - 1) // 2]
    span = m.groupby("device")["duration_ps"].apply(lambda s: s.sort_values().iloc[(len(s) - 1) // 2]).max()
    ev = a.step_ops[(a.step_ops["device"] == 0) & (a.step_ops["step"] == step["step"])]
    waits = ev[ev["op_name"].str.startswith("copy-done")]["duration_ps"].sum()
    assert waits / step["duration_ps"] > 0.9  # the sample's host-offload copies dominate its step
    # Lanes are in device order; the first lane (device 0) starts at the top margin (y=26), and
    # exposed events are drawn at the lane's full height, so their y is the lane's y.
    exposed = 0.0
    for chunk in svg.split('class="ev ev-host_transfer exposed"')[1:]:
        head = chunk.split(">", 1)[0]
        if ' y="26" ' in head:
            exposed += float(head.split(' width="', 1)[1].split('"', 1)[0])
    plot_w = 1100 - 150 - 12
    assert exposed / plot_w == pytest.approx(waits / span, rel=0.02)


def test_gpu_without_a_dump_plots_its_ops_from_the_captured_hlo():
    # The MI300 capture has no dump; the HLO it carries (/host:metadata) gives FLOPs and bytes, so the
    # roofline chart has its ops and the ideal step is a number.
    a = capture_analysis("gpu_mi300_jax_conv")
    text = render_html(crafted_report(a))
    page = Page(text)
    assert len(page.by_class("circle", "op-dot")) >= 1
    assert "pass --hlo-dir" not in text
    card = text.split('<div class="label">Roofline ideal step</div>', 1)[1].split("</div>", 1)[0]
    assert card != '<div class="value">n/a' and "s" in card
    # Two kernels' streams of a device overlap: the timeline still has at least one lane per device.
    svg = text.split('id="timeline"', 1)[1].split("</svg>", 1)[0]
    assert svg.count('class="lane"') >= len(a.devices)


def test_hlo_only_report_says_times_are_predicted(tmp_path):
    a = hlo_analysis(tmp_path)
    text = render_html(crafted_report(a))
    page = Page(text)
    assert_self_contained(page, text)
    assert "predicted-banner" in page.ids and "every time in this report is predicted" in text
    assert "timeline" not in page.ids and "timeline-missing" in page.ids
    assert "roofline" in page.ids
    # Dots sit on the roof: achieved = FLOPs / predicted time.
    assert len(page.by_class("circle", "op-dot")) >= 1
    assert '<div class="src">predicted</div>' in text
    # The ops table: '<time> / step' carries the prediction, and no two columns share a heading.
    head = text.split('<table id="ops-table">', 1)[1].split("</thead>", 1)[0]
    headings = re.findall(r"<th[^>]*>([^<]*)</th>", head)
    assert len(headings) == len(set(headings)) and "predicted / step" in headings and "measured / occ." not in headings
    row = text.split('data-search="dot.1', 1)[1].split("</tr>", 1)[0]
    cells = dict(re.findall(r'<td class="num" data-col="(\w+)" data-v="[^"]*">([^<]*)', row))
    occ, per_step, per_occ = cells["occ"], cells["per_step"], cells["predicted"]
    # dot.1 runs once per step; bf16 1024³ matmul: 2·1024³ FLOPs vs three 1024² bf16 arrays (6 MiB) in HBM:
    # 2.34 µs at 918 TFLOP/s < 3.84 µs at 1.638 TB/s, so HBM-bound at 6 MiB ÷ HBM bandwidth.
    chip = a.chip
    expected_s = max(2 * 1024**3 / chip.peak_bf16_flops_per_s, 3 * 1024**2 * 2 / chip.hbm_bytes_per_s)
    assert expected_s == pytest.approx(3.84e-6, rel=1e-3)
    assert occ == "1" and per_step == per_occ == "3.84 µs"
    # The predicted step is the sum over the step's ops: dot.1 and fusion.1 (same 6 MiB), parameters 0 s.
    assert '<div class="value">7.68 µs' in text


def test_real_hlo_sample_report():
    a = capture_analysis(HLO_SAMPLE)
    text = render_html(crafted_report(a))
    page = Page(text)
    assert_self_contained(page, text)
    assert "predicted-banner" in page.ids and "timeline-missing" in page.ids
    rows = len(page.by_class("tr", "in-step")) + len(page.by_class("tr", "other-program"))
    assert rows == min(len(a.ops), html_report.MAX_HTML_OPS)
    costed = a.ops[(a.ops["flops"] > 0) & (a.ops["arithmetic_intensity"] > 0) & (a.ops["predicted_s"] > 0)]
    assert len(page.by_class("circle", "op-dot")) == len(costed) > 0


def hostile(a):
    """The analysis with its top op renamed to markup (names, HLO and paths come from the profile)."""
    ops = a.ops.copy()
    time_col = "measured_s_per_step" if a.measured else "predicted_s_per_step"
    first = ops[time_col].astype(float).idxmax()  # the top op: in every table and chart
    old = ops.at[first, "op_name"]
    ops["op_name"] = ops["op_name"].astype(object)
    ops["hlo_text"] = ops["hlo_text"].astype(object)
    ops["source"] = ops["source"].astype(object)
    ops.at[first, "op_name"] = EVIL_OP
    ops.at[first, "hlo_text"] = EVIL_HLO
    ops.at[first, "source"] = EVIL_SOURCE
    step_ops = a.step_ops.copy()
    if len(step_ops):
        step_ops["op_name"] = step_ops["op_name"].astype(object)
        step_ops.loc[step_ops["op_name"] == old, "op_name"] = EVIL_OP
    return dataclasses.replace(a, ops=ops, step_ops=step_ops)


@pytest.mark.parametrize("name", CAPTURES)
def test_markup_from_the_profile_is_shown_as_text(name):
    a = hostile(capture_analysis(name))
    base = crafted_report(a)
    evil = make_finding(
               rule="x<y>",
               priced=Priced(time_s_per_step=a.step_s / 4, est_savings_s_per_step=a.step_s / 8, step_s=a.step_s,
                             confidence="high", ops=(OpEvidence(EVIL_OP, a.step_s / 4, None, "<i>detail</i>"),)),
               title='<b onmouseover="alert(4)">bold</b>', evidence="</p><script>alert(5)</script>",
               fix="</pre><script>alert(6)</script>", details={"<k>": "<v>"})
    report = Report(analysis=a, findings=(evil,) + base.findings, headline="<script>alert(7)</script>")
    text = render_html(report)
    page = Page(text)
    assert_self_contained(page, text)
    assert "<script>alert" not in text and "onerror=" not in text.replace("onerror=alert(3)&gt;", "")
    assert "<b onmouseover" not in text and "<i>detail" not in text
    # The op name shows verbatim as text in the ops table, the fixes and the charts' tooltips.
    assert sum(1 for tag, t in page.texts if t == EVIL_OP) >= 3
    assert escape(EVIL_OP) in text.split('id="timeline"', 1)[1].split("</svg>", 1)[0]  # a timeline tooltip
    assert any(t == EVIL_HLO for _, t in page.texts)
    assert "&lt;script&gt;alert(&#34;op&#34;)" in text or "&lt;script&gt;alert(&quot;op&quot;)" in text


def test_ops_table_is_capped_with_a_note(monkeypatch):
    a = capture_analysis("cpu_jax_train_step")
    monkeypatch.setattr(html_report, "MAX_HTML_OPS", 5)
    text = render_html(crafted_report(a))
    page = Page(text)
    assert len(page.by_class("tr", "in-step")) == 5
    assert f"Showing the first 5 of {len(a.ops)} ops" in text
    # Rows carry sortable numbers: the top row's measured time per step, exactly.
    first = text.split('<tr class="in-step"', 1)[1].split("</tr>", 1)[0]
    assert f'data-v="{float(a.ops.iloc[0]["measured_s_per_step"])!r}"' in first


def test_capture_summary_names_number_sources():
    a = capture_analysis("tpu_v6e_host_offload")
    text = render_html(crafted_report(a))
    rows = text.split('id="capture-table"', 1)[1].split("</table>", 1)[0]
    peak_row = rows.split("<td>Peak compute</td>", 1)[1].split("</tr>", 1)[0]
    assert "918 TFLOP/s" in peak_row and ">trace<" in peak_row
    link_row = rows.split("<td>Interconnect link (one way)</td>", 1)[1].split("</tr>", 1)[0]
    assert "chip table" in link_row
    assert "99 measured (first execution excluded as warm-up)" in rows and "100 executions of jit_f" in rows


def test_no_findings_says_so():
    a = capture_analysis("gpu_mi300_jax_conv")
    text = render_html(Report(analysis=a, findings=(), headline="h"))
    assert 'id="no-findings"' in text and 'id="fix-1"' not in text
    assert math.isfinite(a.step_s) and np.isfinite(sum(a.breakdown.values()))


def test_timeline_merges_sub_pixel_ops_into_few_shapes():
    """10,000 back-to-back 1 µs ops in a 10 ms step: two runs of classes -> two rectangles, full width."""
    import pandas as pd

    n = 10_000
    events = pd.DataFrame({
        "lane": "device 0",
        "start_s": np.arange(n) * 1e-6,
        "duration_s": 1e-6,
        "time_class": np.where(np.arange(n) < n // 2, "compute", "collective"),
        "label": [f"op{i}" for i in range(n)],
    })
    out = svg.timeline_chart(events, ["device 0"], span_s=n * 1e-6, width=1000)
    rects = out.split('class="ev ')[1:]
    assert len(rects) == 2
    widths = [float(r.split(' width="', 1)[1].split('"', 1)[0]) for r in rects]
    assert sum(widths) == pytest.approx(1000 - 150 - 12, rel=1e-3)
    assert "op0 (+4999 more ops)" in out and "exposed" in rects[1].split(">", 1)[0]


def test_svg_labels_are_escaped():
    import pandas as pd

    points = pd.DataFrame({"label": ["<b>x</b>"], "intensity": [10.0], "achieved_flops_per_s": [1e12],
                           "weight_s": [1e-3], "bound_by": ["<i>"]})
    out = svg.roofline_chart(points, svg.Roof(1e15, 1e12, peak_label="<u>"))
    assert "<b>" not in out and "<i>" not in out and "<u>" not in out and "&lt;b&gt;x&lt;/b&gt;" in out
    bars = svg.bar_chart([("<script>", 1e-3, 5e-4)])
    assert "<script>" not in bars and "&lt;script&gt;" in bars
    assert "no time recorded" in svg.breakdown_bar({})


def test_finding_details_read_in_units():
    # Keys name their unit (house style), so the HTML can format them: 3.221e10 bytes is 32.2 GB.
    from xladiag.report.detail_labels import value_text

    def detail(key, value):
        return value_text(value, "", key)

    assert detail("bytes_per_step", 3.221e10) == "32.2 GB"
    assert detail("hbm_headroom_bytes", 2**30) == "1.07 GB"
    assert (detail("ops", [{"op": "x", "bytes": 4096.0, "s_per_step": 2.5e-4, "matmul_flops": 4.296e9}])
            == "op: x, bytes: 4.1 kB, time per step: 250 µs, matmul (FLOP): 4.3 GFLOP")
    assert detail("hbm_bytes_per_s", 1.64e12) == "1.64 TB/s"
    assert detail("remat_s_per_step", 0.0123) == "12.3 ms"
    assert detail("hidden_fraction", 0.25) == "25.0%"
    assert value_text(9.18e14, "flops") == "918 TFLOP" and value_text(12345.0, "count") == "12,345"


def test_rule_numbers_have_labels_and_explanations_not_raw_keys():
    """The 'Rule numbers' rows read as the rule's docstring words, each with its full line as a tooltip."""
    from xladiag.report.detail_labels import detail_rows
    from xladiag.rules.catalog import rule_catalog

    rows = detail_rows("exposed-collective", {"exposed_s_per_step": 0.00168, "platform": "tpu",
                                              "ops": [{"exposed_where_in_flight_measured_s_per_step": 1e-3}]})
    assert [r["label"] for r in rows] == ["Seconds per step the device waits for these transfers", "Platform", "Ops"]
    assert [r["value"] for r in rows] == ["1.68 ms", "tpu", "exposed where in flight measured (s/step): 1 ms"]
    assert rows[0]["explain"].startswith("seconds per step the device waits") and "details.exposed_s_per_step" \
        in rows[0]["explain"]
    for row in rule_catalog():  # every documented key gets a label that is words, not its snake_case name
        labels = [r["label"] for r in detail_rows(row["id"], {d.name: None for d in row["details"]})]
        assert all("_" not in label for label in labels), row["id"]


def test_v6e_numbers_read_the_same_in_headline_html_and_markdown():
    """The real v6e capture with the real rules: one MFU and one step time, whatever the format."""
    from xladiag.api import build_report
    from xladiag.report.markdown import render_markdown

    a = capture_analysis("tpu_v6e_host_offload")
    report = build_report(a)
    text, md = render_html(report), render_markdown(report)
    head = re.search(r": step ([\d.]+ \S+), MFU ([\d.<]+%)[;.]", report.headline)
    assert head, report.headline
    step, mfu = head.groups()
    # MFU = model FLOPs per step ÷ (step time × bf16 peak), all three from the trace: 4.03e9 FLOPs in a
    # 783 ms step at 918 TFLOP/s is ~5.6e-6 (the step is host-transfer bound), which reads '<0.1%'.
    expected_mfu = a.model_flops_per_step / (a.steps.mean_s * a.chip.peak_bf16_flops_per_s)
    assert a.mfu == pytest.approx(expected_mfu, rel=1e-9) and expected_mfu < 1e-3 and mfu == "<0.1%"
    value, unit = step.split()[:2]
    assert float(value) * {"s": 1, "ms": 1e-3, "µs": 1e-6}[unit] == pytest.approx(a.steps.mean_s, rel=5e-3)

    def card(label):
        return unescape(text.split(f'<div class="label">{label}</div><div class="value">', 1)[1].split("</div>", 1)[0])

    assert card("Step time") == step and card("MFU") == mfu
    assert re.search(r"^- \*\*Step time:\*\* (.+?) \(", md, re.M).group(1) == step
    assert re.search(r"^- \*\*MFU:\*\* (.+?) \(", md, re.M).group(1) == mfu
    for out in (text, md):
        assert not re.search(r"(?<![A-Za-z])nan(?![A-Za-z])", out, re.I)
        assert "1e+03" not in out


def test_page_title_names_the_program_and_the_logdir():
    """A tab or bookmark tells two reports apart: 'xladiag: <program> @ <logdir>', not the run's timestamp."""
    data = {"steps": {"program": "jit_f"}, "choices": {}, "ops": [], "chip": {"name": "TPU v6e"},
            "run": {"dir": "/logs/exp1/plugins/profile/2025_12_01_00_00_00", "hlo_files": []}}
    assert html_report.page_title(data) == "xladiag: jit_f @ /logs/exp1"
    hlo_only = {**data, "steps": {"program": None}, "choices": {"program": {"value": None}},
                "ops": [{"module": "jit_train_step"}], "run": {"dir": None, "hlo_files": ["/dump/module_1.txt"]}}
    assert html_report.page_title(hlo_only) == "xladiag: jit_train_step @ /dump"
    text = render_html(crafted_report(capture_analysis("tpu_v6e_host_offload")))
    assert re.search(r"<title>xladiag: jit_f @ [^<]*tpu_v6e_host_offload</title>", text)


def test_compiled_template_is_kept_between_runs_and_a_damaged_one_is_recompiled(tmp_path, monkeypatch):
    import jinja2

    def environment(cache):
        return jinja2.Environment(loader=jinja2.FunctionLoader(html_report._load_template), autoescape=True,
                                  bytecode_cache=cache)

    first = environment(html_report.bytecode_cache(str(tmp_path))).get_template("report.html.j2")
    kept = list(tmp_path.iterdir())
    assert len(kept) == 1 and kept[0].stat().st_size > 1000  # written whole, beside nothing half-written
    compiled = []
    original = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda self, *a, **k: compiled.append(1) or original(self, *a, **k))
    again = environment(html_report.bytecode_cache(str(tmp_path))).get_template("report.html.j2")
    assert compiled == [] and again.root_render_func.__code__.co_code == first.root_render_func.__code__.co_code
    kept[0].write_bytes(kept[0].read_bytes()[:200])  # a damaged entry: compiled again, no error
    environment(html_report.bytecode_cache(str(tmp_path))).get_template("report.html.j2")
    assert compiled == [1]
    missing = tmp_path / "missing" / "dir"  # a cache that cannot be written: the template compiles, no error
    environment(html_report.bytecode_cache(str(missing))).get_template("report.html.j2")
    assert compiled == [1, 1] and not missing.exists()


def test_the_page_written_as_it_is_made_is_the_rendered_page(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from conftest import TPU_SAMPLE
    from xladiag.api import diagnose
    from xladiag.cli import main as cli_main
    from xladiag.report import render as render_mod

    made = []
    pieces = render_mod.render_pieces
    monkeypatch.setattr("xladiag.cli.render_pieces", lambda *a: made.append(1) or pieces(*a))
    out = tmp_path / "page.html"
    result = CliRunner().invoke(cli_main, [str(TPU_SAMPLE), "-q", "--workers", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert made == [1] and out.read_text(encoding="utf-8") == diagnose(TPU_SAMPLE, workers=1).render("html")
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]  # no temporary file left beside it

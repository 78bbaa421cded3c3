"""The Markdown report: valid GFM tables whatever the names, always under 60 kB, verdict first."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_report_html import EVIL_OP, hostile  # noqa: E402
from test_report_json import ALL_SAMPLES, CAPTURES, capture_analysis, crafted_report, hlo_analysis  # noqa: E402
from xladiag.report.markdown import MAX_BYTES, escape_text, render_markdown  # noqa: E402
from xladiag.report.model import Report  # noqa: E402
from xladiag.rules.base import OpEvidence, Priced, make_finding  # noqa: E402

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py is a test dependency (pip install -e .[test])")

_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def parse(text: str):
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    return md, md.parse(text)


def check_tables(text: str) -> list[list[list[str]]]:
    """Every table row has the header's cell count, and no table row was broken off its table.

    markdown-it pads short rows and drops extra cells, so the cells are also counted in the source.
    Returns each table as rows of rendered cell texts.
    """
    md, tokens = parse(text)
    lines = text.split("\n")
    covered: set[int] = set()
    tables, current, row = [], None, None
    for i, tok in enumerate(tokens):
        if tok.type == "table_open":
            start, end = tok.map
            covered.update(range(start, end))
            source_rows = [ln for ln in lines[start:end] if ln.strip()]
            counts = [len(_CELL_SPLIT.split(ln.strip().strip("|"))) for ln in source_rows]
            assert len(set(counts)) == 1, (counts, source_rows)
            current = []
        elif tok.type == "tr_open":
            row = []
        elif tok.type in ("th_open", "td_open"):
            row.append(tokens[i + 1].content if tokens[i + 1].type == "inline" else "")
        elif tok.type == "tr_close":
            current.append(row)
        elif tok.type == "table_close":
            assert len(current) == len(source_rows) - 1  # all rows but the delimiter line
            assert all(len(r) == len(current[0]) for r in current)
            tables.append(current)
    stray = [n for n, ln in enumerate(lines) if ln.startswith("|") and n not in covered]
    assert stray == [], [lines[n] for n in stray]
    return tables


def evil_finding(a):
    return make_finding(
               rule="evil|rule",
               priced=Priced(time_s_per_step=a.step_s / 3, est_savings_s_per_step=a.step_s / 6, step_s=a.step_s,
                             confidence="high", ops=(OpEvidence(EVIL_OP, a.step_s / 3, None, "a | b\nc"),)),
               title="pipes | and\nnewlines <script>alert(1)</script>", evidence="`code` and <b>bold</b> | pipe",
               fix="```\nXLA_FLAGS=--xla_x=true | tee\n```")


@pytest.mark.parametrize("name", ALL_SAMPLES)
def test_tables_are_well_formed_and_text_is_escaped(name):
    a = hostile(capture_analysis(name))
    base = crafted_report(a)
    report = Report(analysis=a, findings=(evil_finding(a),) + base.findings, headline="head | line")
    text = render_markdown(report)
    assert len(text.encode()) < MAX_BYTES
    tables = check_tables(text)
    assert len(tables) >= 4  # breakdown, ranked fixes, finding ops, top ops
    md, _ = parse(text)
    rendered = md.render(text)
    assert "<script" not in rendered and "<b>" not in rendered  # raw HTML would pass through markdown-it
    # The hostile op name is one cell, newline flattened, pipes and markup kept as text.
    top_ops = next(t for t in tables if t[0][:3] == ["Op", "Category", "Bound by"])
    names = [r[0] for r in top_ops[1:]]
    assert any(md.renderInline(n) == md.renderInline(escape_text(EVIL_OP)) for n in names)
    assert md.renderInline(escape_text(EVIL_OP)) == '&lt;script&gt;alert(&quot;op&quot;)&lt;/script&gt;|x y'
    # The fix keeps its backticks inside a fence that is longer than any run in it.
    assert "````text\n```\nXLA_FLAGS=--xla_x=true | tee\n```\n````" in text


@pytest.mark.parametrize("name", CAPTURES)
def test_verdict_and_top_ops_carry_the_measured_numbers(name):
    a = capture_analysis(name)
    text = render_markdown(crafted_report(a))
    check_tables(text)
    assert text.index("## Verdict") < text.index("## Ranked fixes") < text.index("## Top ops")
    mean_s = a.steps.table.loc[~a.steps.table["is_warmup"], "duration_ps"].mean() / 1e12
    shown = f"{mean_s * 1e3:.3g} ms" if mean_s < 1 else f"{mean_s:.3g} s"
    assert f"- **Step time:** {shown} (measured, mean of {a.steps.count} steps" in text  # (, program's share)
    _, tokens = parse(text)
    tables = check_tables(text)
    breakdown = tables[0]
    assert breakdown[0][0] == "Where the step goes" and len(breakdown) == 7
    top = next(t for t in tables if t[0][:3] == ["Op", "Category", "Bound by"])
    in_step = a.ops[a.ops["in_step"].astype(bool)].sort_values("measured_s_per_step", ascending=False)
    first = in_step.iloc[0]
    v = float(first["measured_s_per_step"])
    assert top[1][3] == (f"{v * 1e3:.3g} ms" if v >= 1e-3 else f"{v * 1e6:.3g} µs")
    assert len(top) - 1 == min(len(in_step), 25)


def test_huge_reports_stay_under_60_kb_with_a_note():
    a = capture_analysis("cpu_jax_train_step")
    many_ops = tuple(OpEvidence(f"op|{i}\nname" * 5, 1e-3, 1e-4, "x" * 300) for i in range(40))
    findings = tuple(
        make_finding(
            rule=f"rule-{i}",
            priced=Priced(time_s_per_step=1e-3, est_savings_s_per_step=1e-3 - i * 1e-6, step_s=a.step_s,
                          confidence="low", ops=many_ops),
            title=f"finding {i} " + "long title | " * 40, evidence="evidence " * 300, fix="fix line\n" * 400)
        for i in range(400)
    )
    text = render_markdown(Report(analysis=a, findings=findings, headline="h " * 2000))
    size = len(text.encode())
    assert 10_000 < size < MAX_BYTES
    tables = check_tables(text)
    fixes = next(t for t in tables if t[0][0] == "#")
    assert 1 < len(fixes) - 1 < 400
    assert f"{400 - (len(fixes) - 1)} smaller findings left out" in text
    assert "more ops in the JSON report" in text


def test_hlo_only_says_predicted(tmp_path):
    a = hlo_analysis(tmp_path)
    text = render_markdown(crafted_report(a))
    check_tables(text)
    assert "every time below is predicted" in text
    assert "- **Step time:**" in text and "predicted: sum of per-op rooflines" in text
    top = next(t for t in check_tables(text) if t[0][:3] == ["Op", "Category", "Bound by"])
    assert top[0][3:5] == ["predicted / step", "% of step"] and "measured / step" not in top[0]
    dot = next(r for r in top[1:] if r[0] == "dot.1")
    predicted = a.ops.set_index("op_name").loc["dot.1", "predicted_s_per_step"]
    assert dot[3] == f"{predicted * 1e6:.3g} µs"
    assert float(dot[4].rstrip("%")) == pytest.approx(100 * predicted / a.ideal_step_s, rel=1e-3)


def test_escape_text_flattens_and_escapes():
    assert escape_text("a|b\r\n  c") == r"a\|b c"
    assert escape_text("<x> & *y* _z_ [l](u)") == r"&lt;x&gt; &amp; \*y\* \_z\_ \[l\](u)"
    assert escape_text("x" * 10, limit=5) == "xxxx…"

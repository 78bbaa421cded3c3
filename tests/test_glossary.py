"""Every term a reader may not know is explained once: tooltips in HTML, a glossary at the end of Markdown and text."""

from __future__ import annotations

import re

import pytest

from conftest import CPU_SAMPLE, HLO_PROGRAM, HLO_SAMPLE, diagnosed
from xladiag.report.glossary import GLOSSARY, used_terms


def test_terms_are_found_as_words_only():
    assert [t for t, _ in used_terms("MFU 3%; 1.2 ms exposed; C/W = 3,825 on ICI")] == ["MFU", "exposed", "C/W", "ICI"]
    assert used_terms("HBMX and unexposed, mfu") == []  # inside other words, or an acronym in lower case
    assert {"MFU", "roofline", "exposed", "recoverable", "counted", "C/W", "ICI", "HBM"} <= set(GLOSSARY)


@pytest.mark.parametrize("fmt", ["markdown", "text"])
def test_the_glossary_ends_the_report_and_explains_what_it_uses(fmt):
    report = diagnosed(hlo_dir=HLO_SAMPLE, program=HLO_PROGRAM)
    text = report.render(fmt)
    head, _, glossary = text.partition("## Glossary" if fmt == "markdown" else "\nGlossary\n")
    assert glossary, "no glossary"
    explained = [t for t in GLOSSARY if re.search(rf"(?m)^\s*(?:- \*\*)?{re.escape(t)}(?:\*\*)?:", glossary)]
    assert explained == [t for t, _ in used_terms(head)]
    assert {"MFU", "C/W", "roofline"} <= set(explained)  # the sharding finding's C/W, the verdict's MFU


def test_html_explains_terms_in_tooltips():
    html = diagnosed(CPU_SAMPLE).render("html")
    card = re.search(r'<div class="card" title="([^"]*)"><div class="label">MFU</div>', html)
    assert card and "model FLOPs utilization" in card.group(1)
    tips = re.findall(r'<p class="evidence" title="([^"]*)">', html)
    assert tips and all(line.split(":")[0] in GLOSSARY for t in tips for line in t.split("\n"))
    hlo = diagnosed(hlo_dir=HLO_SAMPLE, program=HLO_PROGRAM).render("html")
    assert "C/W: peak FLOP/s" in hlo  # the sharding finding's C/W, explained where it is used

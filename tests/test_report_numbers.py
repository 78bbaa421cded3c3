"""Numbers in the reports' prose read as a person writes them: SI prefixes, no scientific notation."""

from __future__ import annotations

import re

import pytest

from conftest import GPU_SAMPLE, HLO_PROGRAM, HLO_SAMPLE, SAMPLES, diagnosed
from xladiag.analyzer.chips.plausible import format_field, range_text
from xladiag.report.compare_model import mfu_ratio_text
from xladiag.units import format_number

SCIENTIFIC = re.compile(r"\b\d(?:\.\d+)?e[+-]?\d+\b")
# Not prose: quoted HLO (constants as XLA writes them), the page's data and scripts, tags and their attributes.
NOT_PROSE = re.compile(r"<pre[^>]*>.*?</pre>|```.*?```|<script.*?</script>|<style.*?</style>|<[^>]*>", re.S)


def test_format_number_never_writes_an_exponent():
    assert [format_number(v) for v in (1.87, 0.0123, 412.0, 12345.6, 3.2e9, 0.0, 2e-7, float("nan"))] == [
        "1.87", "0.0123", "412", "12,346", "3,200,000,000", "0", "<0.001", "n/a"]


def test_chip_numbers_carry_their_unit_and_prefix():
    assert format_field("hbm_bytes_per_s", 2.662e12) == "2.66 TB/s"
    assert format_field("peak_bf16_flops_per_s", 9.18e14) == "918 TFLOP/s"
    assert format_field("hbm_capacity_bytes", 192e9) == "192 GB"
    assert "e+" not in range_text("hbm_bytes_per_s") and range_text("hbm_bytes_per_s").endswith("PB/s")


@pytest.mark.parametrize("report", [
    pytest.param(lambda: diagnosed(GPU_SAMPLE), id="mi300-trace-bandwidth-warning"),
    pytest.param(lambda: diagnosed(hlo_dir=HLO_SAMPLE, program=HLO_PROGRAM), id="sharding-intensity-C-and-W"),
    pytest.param(lambda: diagnosed(SAMPLES / "gpu_h100_remat_pair_nocb" / "before"), id="low-precision-fp8-peak"),
])
def test_no_scientific_notation_in_prose(report):
    report = report()
    for fmt in ("text", "markdown", "html"):
        prose = NOT_PROSE.sub("", report.render(fmt))
        assert SCIENTIFIC.findall(prose) == [], fmt
    words = [f.evidence + f.fix + f.title for f in report.findings] + list(report.analysis.warnings)
    assert all(not SCIENTIFIC.search(w) for w in words), [w for w in words if SCIENTIFIC.search(w)][:1]


@pytest.mark.parametrize("base,new,shown", [
    (0.0004, 0.0008, "n/a"),  # '<0.1% → <0.1%': no visible change to put a ratio on
    (None, 0.3, "n/a"),
    (0.2, 0.3, "1.5×"),
])
def test_the_mfu_ratio_only_where_both_mfus_read_as_numbers(base, new, shown):
    ratio = new / base if base else None
    assert mfu_ratio_text({"base": base, "new": new, "ratio": ratio}) == shown


def test_markdown_rule_numbers_read_as_words_with_units():
    md = diagnosed(hlo_dir=HLO_SAMPLE, program=HLO_PROGRAM).to_markdown()
    assert "**Rule numbers:**" in md
    assert "| Matmul FLOPs per byte moved over the axis, per step |" in md and "intensity_flops_per_byte" not in md
    assert re.search(r"\| C, the chip's bf16 peak \| \d+ TFLOP/s \|", md)

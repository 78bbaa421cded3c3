"""The terminal report: fits 100 columns on every sample, colour only when asked (a TTY, no NO_COLOR)."""

from __future__ import annotations

import os
import re
import sys
from functools import cache

import pytest
from click.testing import CliRunner

from conftest import CPU_SAMPLE, HLO_PROGRAM, HLO_SAMPLE, SAMPLES, diagnosed
from xladiag import cli
from xladiag.api import diagnose
from xladiag.report.text import MAX_WIDTH, MIN_WIDTH, WIDTH, columns, fit, render_text, terminal_width

SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
SGR = re.compile(r"\x1b\[[0-9;]*m")


@cache
def sample(name: str):
    path = SAMPLES / name
    if any(path.glob("plugins/profile/*/*.xplane.pb")):
        return diagnosed(path)
    return diagnosed(hlo_dir=path, chip="v6e", program=HLO_PROGRAM if name == HLO_SAMPLE.name else None)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_sample_fits_the_terminal_and_says_what_matters(name):
    report = sample(name)
    text = report.to_text()
    lines = text.splitlines()
    too_wide = [(columns(line), line) for line in lines if columns(line) > WIDTH]
    assert too_wide == [], too_wide[:3]
    assert "\x1b" not in text
    assert "Verdict" in lines and "Ranked fixes" in lines
    # The verdict's numbers are the report's, and every fix is listed in rank order with its saving; the notes
    # (nothing to save here) after them, apart.
    assert any(line.startswith("  Step time") for line in lines)
    fixes = [f for f in report.findings if f.severity != "info"]
    at = [next(i for i, line in enumerate(lines) if line.startswith(f"{k:>2}. "))
          for k in range(1, len(fixes) + 1)]
    assert at == sorted(at)
    for k, f in enumerate(fixes, 1):
        assert lines[at[k - 1]].split()[2] == f.title.split()[0]  # '1. HIGH <title...>'
        assert f.severity.upper() in lines[at[k - 1]]
    notes = [f for f in report.findings if f.severity == "info"]
    if notes:
        start = lines.index("Notes (nothing to save on this capture)")
        assert start > max(at, default=0)
        assert all(any(n.title[:30] in line for line in lines[start:]) for n in notes)


def test_colour_wraps_the_same_text():
    report = sample("cpu_jax_train_step")
    plain, coloured = report.to_text(), report.render("text", color=True)
    assert SGR.search(coloured) and "\x1b[31m" in coloured  # a high finding in red
    assert SGR.sub("", coloured) == plain
    assert max(columns(SGR.sub("", line)) for line in coloured.splitlines()) <= WIDTH
    # Other formats ignore the request: colour belongs to the terminal only.
    assert report.render("markdown", color=True) == report.to_markdown()


def test_hostile_names_stay_inert_and_fit(tmp_path):
    from test_output_safety import EVIL_OP, _hostile_capture

    report = diagnose(_hostile_capture(tmp_path))
    for text in (report.to_text(), report.render("text", color=True)):
        assert "\x1b]8" not in text and "\x07" not in text and "\u202e" not in text
        assert set(re.findall(r"\x1b\[[0-9;]*m", text)) <= {"\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[33m",
                                                             "\x1b[36m", "\x1b[0m"}
        assert "\x1b" not in SGR.sub("", text)  # the name's own escape is spelled out, not live
        assert "\\u001b[31mred" in text
        assert all(columns(SGR.sub("", line)) <= WIDTH for line in text.splitlines())
    assert EVIL_OP in {o.name for f in report.findings for o in f.ops}


def test_fit_counts_wide_characters():
    assert fit("fusion.1", 20) == "fusion.1"
    assert fit("x" * 30, 10) == "x" * 9 + "…" and columns(fit("x" * 30, 10)) == 10
    wide = fit("融合" * 20, 11)
    assert columns(wide) <= 11 and wide.endswith("…")


def test_cli_text_goes_to_stdout_without_colour_when_piped(tmp_path):
    result = CliRunner().invoke(cli.main, [str(CPU_SAMPLE), "--format", "text"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "Ranked fixes" in result.stdout and "\x1b" not in result.stdout
    assert not (CPU_SAMPLE / "xladiag_report.txt").exists()  # stdout by default, no file
    assert "report:" not in result.stdout
    out = tmp_path / "r.txt"
    result = CliRunner().invoke(cli.main, [str(CPU_SAMPLE), "--format", "text", "-o", str(out), "-q"])
    assert result.exit_code == 0 and out.read_text(encoding="utf-8").startswith("xladiag · ")


@pytest.mark.parametrize("tty,env,wanted", [
    (True, {}, True),
    (False, {}, False),
    (True, {"NO_COLOR": "1"}, False),
    (True, {"NO_COLOR": ""}, True),  # no-color.org: present and not empty
    (True, {"TERM": "dumb"}, False),
])
def test_colour_only_on_a_tty_without_no_color(monkeypatch, tty, env, wanted):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty, raising=False)
    assert cli._colour_wanted() is wanted


def test_gates_are_listed_tripped_first():
    report = sample("cpu_jax_train_step").with_gates(min_mfu=0.001, fail_on="high")
    lines = report.to_text().splitlines()
    gates = lines[lines.index("Gates") + 1:lines.index("Gates") + 3]
    assert gates[0].startswith("  TRIPPED ") and "high" in gates[0]
    assert gates[1].startswith("  passed ") and "MFU" in gates[1].upper()


def test_each_saving_is_given_as_a_share_of_the_step_too():
    """Savings in seconds and as a share of the step: on an unsteady capture the share is what carries over."""
    from xladiag.units import format_percent, format_seconds

    report = diagnosed(CPU_SAMPLE)
    data = report.to_dict()
    f = next(f for f in data["findings"] if f["severity"] != "info")
    saves = (f"saves ~{format_seconds(f['est_savings_s_per_step'])}/step "
             f"({format_percent(f['est_savings_s_per_step'] / data['step_s'])})")
    assert saves in report.to_text()


class _Tty:
    def __init__(self, fd: int | None):
        self.fd = fd

    def isatty(self) -> bool:
        return self.fd is not None

    def fileno(self) -> int:
        return self.fd


@pytest.mark.parametrize("env,stream,wanted", [
    ({"COLUMNS": "132"}, _Tty(None), 132),
    ({"COLUMNS": "20"}, _Tty(None), MIN_WIDTH),  # clamped
    ({"COLUMNS": "999"}, _Tty(None), MAX_WIDTH),
    ({"COLUMNS": "wide"}, _Tty(None), WIDTH),  # not a number: as if unset
    ({}, _Tty(None), WIDTH),  # piped
])
def test_width_comes_from_columns_else_the_terminal_else_100(env, stream, wanted):
    assert terminal_width(env, stream) == wanted


def test_width_of_a_real_terminal(monkeypatch):
    monkeypatch.setattr("os.get_terminal_size", lambda fd: os.terminal_size((150, 40)))
    assert terminal_width({}, _Tty(1)) == 150


@pytest.mark.parametrize("width", [MIN_WIDTH, 100, MAX_WIDTH])
def test_every_fix_is_whole_at_any_width(width):
    """The fix is wrapped to the width, never cut: its words all appear, in order, and no line overflows."""
    report = sample("tpu_v6e_host_offload")
    text = render_text(report, width=width)
    assert all(columns(line) <= width for line in text.splitlines())
    flat = "".join(text.split())  # a word longer than the line is broken across lines, not cut
    for f in report.findings:
        if f.severity != "info":
            assert "".join(f.fix.split()) in flat, f.rule


def test_columns_env_sets_the_layout(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    text = sample("cpu_jax_train_step").to_text()
    assert max(columns(line) for line in text.splitlines()) > 100
    assert all(columns(line) <= 160 for line in text.splitlines())


def test_seconds_take_the_unit_their_rounded_value_fits():
    from xladiag.units import format_seconds, format_si

    # Rounded to 3 digits first: just under a unit's 1 reads as 1 of it, a hair less stays below.
    cases = {0.9995: "1 s", 0.99949: "999 ms", 0.999: "999 ms", 1.0: "1 s", 0.0009996: "1 ms",
             0.00099949: "999 µs", 1.5e-12: "1.5 ps", 3e-15: "0.003 ps", 0.0: "0 s", -0.0125: "-12.5 ms",
             float("nan"): "n/a", 12345.0: "1.23e+04 s"}
    assert {v: format_seconds(v) for v in cases} == cases
    assert [format_si(v, "B") for v in (999.4, 999.6, 999_500.0, 1.5e12)] == ["999 B", "1 kB", "1 MB", "1.5 TB"]

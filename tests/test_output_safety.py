"""Profile strings cannot drive a terminal or a PR comment (issue 11): controls, bidi, links, mentions.

A capture is built with a hostile op name, source path and device type; every place that text reaches a
person (Markdown, stderr lines, ``-o -``) must show it inert, while the JSON keeps it byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from builders import scenarios, xspace_encoder
from xladiag.api import diagnose
from xladiag.cli import main
from xladiag.report.render import FORMATS
from xladiag.text_safety import break_links, terminal_line, visible_controls

EVIL_OP = "copy https://evil.example/x @octocat #1 \x1b[31mred\x1b]8;;http://x\x07 \u202egnp.exe\x00end"
EVIL_SOURCE = "src/@team/www.evil.example/layers.py:7"
EVIL_DEVICE = "TPU v99 \x1b[2J\u202eevil https://evil.example @octocat"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _hostile_capture(tmp_path: Path, device_type: str = xspace_encoder.V6E_DEVICE_TYPE) -> Path:
    """layout_copies (a retiling-copy finding naming the op) with the first copy renamed and resourced."""
    template = []
    for op in _layout_template():
        template.append(dataclasses.replace(op, name=EVIL_OP, source=EVIL_SOURCE) if op.name == "copy" else op)
    builder, _ = scenarios.build_train_steps(template,
                                             builder=xspace_encoder.TpuCaptureBuilder(device_type=device_type))
    builder.write(tmp_path)
    return tmp_path


def _layout_template():
    """The layout_copies scenario's step template (caught on its way to the builder)."""
    captured = {}
    real_run = scenarios._run

    def keep(template, steps, warmup):
        captured["template"] = template
        return real_run(template, steps, warmup)

    scenarios._run, previous = keep, scenarios._run
    try:
        scenarios.layout_copies()
    finally:
        scenarios._run = previous
    return captured["template"]


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    report = diagnose(_hostile_capture(tmp_path_factory.mktemp("hostile")))
    assert EVIL_OP in set(report.ops["op_name"])  # the capture really carries the string
    assert any(EVIL_OP in [o.name for o in f.ops] for f in report.findings)
    return report


def test_markdown_shows_hostile_names_inert(hostile_report):
    text = hostile_report.to_markdown()
    assert "evil.example" in text and "octocat" in text  # still readable
    assert not RAW.search(text)
    for live in ("https://evil", "http://x", "@octocat", "@team", "www.evil", "#1 "):
        assert live not in text.replace("\\", ""), live
    # Controls are spelled out, not dropped: the reader sees that the name was crafted.
    assert "\\\\u001b\\[31m" in text and "\\\\u202e" in text and "\\\\u0000" in text
    assert "https:&#8203;//evil.example" in text and "@&#8203;octocat" in text


def test_every_format_has_no_raw_control_and_json_keeps_the_data(hostile_report):
    for name in FORMATS:
        text = hostile_report.render(name)
        assert not RAW.search(text), (name, RAW.search(text))
    data = json.loads(hostile_report.to_json())
    assert EVIL_OP in {op["name"] for op in data["ops"]}  # escaped in the text, identical once decoded


def test_cli_stderr_and_stdout_are_inert(tmp_path):
    capture = _hostile_capture(tmp_path, device_type=EVIL_DEVICE)
    result = CliRunner().invoke(main, [str(capture), "--format", "markdown", "-o", "-", "--fail-on", "low"],
                                catch_exceptions=False)
    assert result.exit_code == 3, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("diagnose: warning:")]
    assert any("unknown chip" in line and "evil.example" in line for line in warnings), result.stderr
    for stream in (result.stderr, result.stdout):
        assert not RAW.search(stream)
        assert "https://evil" not in stream and "@octocat" not in stream
    assert "[2J" in result.stderr and "202e" in result.stderr  # shown, escaped


def test_neutralizers():
    assert visible_controls("a\x00b\x1b[1m\u202ec\td\n", keep="\n") == "a\\u0000b\\u001b[1m\\u202ec\\u0009d\n"
    assert break_links("see https://a.b, www.c.d, @me, #12 and x@y.z", "|") == (
        "see https:|//a.b, www|.c.d, @|me, #|12 and x@|y.z")
    assert break_links("fusion.12 copy-start.3 %param_1 a/b:c") == "fusion.12 copy-start.3 %param_1 a/b:c"
    assert terminal_line("op\n\x1b[31mname\u202e https://x.y") == "op \\u001b[31mname\\u202e https:\u200b//x.y"
    assert terminal_line("gs://b/r @me #3 www.x\x1b]8;;", break_urls=False) == (
        "gs://b/r @\u200bme #\u200b3 www\u200b.x\\u001b]8;;")


def test_error_lines_keep_urls_whole_and_the_rest_inert(tmp_path):
    """A URL in an error (the log dir the user gave) can be copied back; mentions and controls stay inert."""
    missing = CliRunner().invoke(main, ["memory://xladiag-test/no/such/run"])
    assert missing.exit_code != 0 and "memory://" in missing.stderr and "\u200b" not in missing.stderr, missing.stderr
    capture = _hostile_capture(tmp_path)
    bad = CliRunner().invoke(main, [str(capture), "--program", "@octocat \x1b[2J https://evil.example/x"])
    line = bad.stderr.strip()
    assert bad.exit_code == 2 and line.startswith("diagnose: error: --program") and "\n" not in line, bad.stderr
    assert "https://evil.example/x" in line and "@octocat" not in line and "\\u001b[2J" in line
    assert not RAW.search(line)

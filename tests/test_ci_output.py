"""CI output on the bundled captures: gates in the JSON and Markdown, the host-transfer gate, share parsing,
GitHub workflow-command lines and the step summary, Markdown that GitHub can show (tables parse, folded
sections, wrapped lines, the size cap said), ``findings_frame()`` and short reprs."""

from __future__ import annotations

import json
import re
import sys
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from conftest import CPU_SAMPLE, GPU_SAMPLE, HLO_PROGRAM, HLO_SAMPLE, SAMPLES, TPU_SAMPLE, diagnosed  # noqa: E402
from test_report_markdown import check_tables, parse  # noqa: E402
from xladiag.cli import main  # noqa: E402
from xladiag.errors import UsageError  # noqa: E402
from xladiag.report.gates import parse_share  # noqa: E402
from xladiag.report.github import annotation, escape_data, escape_property, report_annotations  # noqa: E402
from xladiag.report.markdown import MAX_BYTES, render_markdown  # noqa: E402
from xladiag.report.md_blocks import wrap  # noqa: E402
from xladiag.report.model import Report  # noqa: E402
from xladiag.rules.base import OpEvidence, Priced, make_finding  # noqa: E402

# Neither variable leaks in from a CI job running these tests.
NOT_ON_GITHUB = {"GITHUB_ACTIONS": None, "GITHUB_STEP_SUMMARY": None}
SAMPLE_DIRS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False,
                              env={**NOT_ON_GITHUB, **(env or {})})


@cache
def sample_report(name: str):
    path = SAMPLES / name
    if any(path.glob("**/*.xplane.pb")):
        return diagnosed(path)
    return diagnosed(hlo_dir=path, chip="v6e", program=HLO_PROGRAM if path == HLO_SAMPLE else None)


def exposed_share(data: dict, host_offload: bool) -> float:
    """What the gates measure, recomputed from the JSON's findings."""
    rule = "exposed-host-transfer" if host_offload else "exposed-collective"
    exposed = sum(f["time_s_per_step"] for f in data["findings"] if f["rule"] == rule)
    return exposed / data["step_s"]


# --- gates -------------------------------------------------------------------------------------------

def test_host_transfer_gate_trips_where_the_collective_gate_holds(tmp_path):
    """The v6e capture waits ~97 % of its step on host-offload copies and runs no collective."""
    out = tmp_path / "r.json"
    result = run(TPU_SAMPLE, "--format", "json", "-o", out, "-q",
                 "--max-exposed-collective", "10%", "--max-exposed-host-transfer", "0.10")
    assert result.exit_code == 3, result.stderr
    data = json.loads(out.read_text())
    gates = {g["name"]: g for g in data["gates"]}
    assert list(gates) == ["max-exposed-collective", "max-exposed-host-transfer"]
    host = gates["max-exposed-host-transfer"]
    assert host["tripped"] and host["threshold"] == pytest.approx(0.10) and host["unit"] == "fraction"
    assert host["value"] == pytest.approx(exposed_share(data, host_offload=True)) and host["value"] > 0.9
    assert not gates["max-exposed-collective"]["tripped"] and gates["max-exposed-collective"]["value"] == 0.0
    assert [line for line in result.stderr.splitlines() if "gate" in line] == [f"diagnose: gate: {host['message']}"]
    assert "host-offload" in host["measures"] and host["option"] == "--max-exposed-host-transfer"
    assert "exposed-host-transfer" in host["measures"]  # the gate names the rule --ignore takes


def test_ignoring_exposed_host_transfer_hides_the_host_offload_finding(tmp_path):
    """Host-offload waits are their own rule: --ignore exposed-host-transfer leaves them out, and with them
    what the host-transfer gate measures; the collective rule is still run."""
    out = tmp_path / "r.json"
    result = run(TPU_SAMPLE, "--format", "json", "-o", out, "-q", "--ignore", "exposed-host-transfer",
                 "--max-exposed-host-transfer", "10%")
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert all(f["kind"] != "host-offload" for f in data["findings"])
    assert [d["key"] for d in data["selection"]["ignored_findings"]] == ["exposed-host-transfer:host-offload:"]
    assert data["gates"][0]["value"] == 0.0

def test_collective_gate_value_is_the_exposed_collective_findings_share(tmp_path):
    out = tmp_path / "r.json"
    result = run(CPU_SAMPLE, "--format", "json", "-o", out, "-q", "--max-exposed-collective", "5%",
                 "--max-exposed-host-transfer", "5%", "--fail-on", "high", "--min-mfu", "0.5%")
    data = json.loads(out.read_text())
    gates = {g["name"]: g for g in data["gates"]}
    share = exposed_share(data, host_offload=False)
    assert share > 0.05 and gates["max-exposed-collective"]["value"] == pytest.approx(share)
    assert gates["max-exposed-collective"]["tripped"] and not gates["max-exposed-host-transfer"]["tripped"]
    highs = [f for f in data["findings"] if f["severity"] == "high"]
    assert gates["fail-on"]["value"] == len(highs) > 0 and gates["fail-on"]["unit"] == "count"
    assert gates["min-mfu"]["value"] == pytest.approx(data["mfu"])
    assert gates["min-mfu"]["tripped"] == (data["mfu"] < 0.005)
    assert result.exit_code == 3


def test_gates_in_the_json_follow_the_shipped_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from xladiag.report.json_schema import load_schema

    validator = jsonschema.Draft202012Validator(load_schema())
    report = sample_report("cpu_jax_train_step").with_gates(fail_on="medium", max_exposed_collective=0.1,
                                                            max_exposed_host_transfer=0.1, min_mfu=0.3)
    data = report.to_dict()
    assert len(data["gates"]) == 4 and not list(validator.iter_errors(data))
    for field, bad in (("value", "12%"), ("unit", "percent"), ("name", "max-anything"), ("threshold", 1.5)):
        broken = {**data, "gates": [{**data["gates"][1], field: bad}]}
        assert list(validator.iter_errors(broken)), field


def test_gates_without_options_are_an_empty_list_and_no_section(tmp_path):
    out = tmp_path / "r.md"
    assert run(GPU_SAMPLE, "--format", "markdown", "-o", out, "-q").exit_code == 0
    assert "## Gates" not in out.read_text()
    assert sample_report("gpu_mi300_jax_conv").to_dict()["gates"] == []


def test_markdown_lists_every_gate_with_its_verdict(tmp_path):
    out = tmp_path / "r.md"
    run(TPU_SAMPLE, "--format", "markdown", "-o", out, "-q", "--max-exposed-collective", "10%",
        "--max-exposed-host-transfer", "10%")
    text = out.read_text()
    gates = next(t for t in check_tables(text) if t[0][0] == "Gate")
    rows = {r[0].strip("`"): r for r in gates[1:]}
    assert rows["--max-exposed-host-transfer"][3] == "❌ tripped" and rows["--max-exposed-collective"][3] == "✅ holds"
    assert rows["--max-exposed-host-transfer"][1] == "10.0%"
    assert "**1 of 2 gates tripped**" in text and text.index("## Gates") < text.index("## Verdict")


@pytest.mark.parametrize("given,fraction", [("10%", 0.10), ("0.10", 0.10), (".5", 0.5), ("0", 0.0), ("100%", 1.0),
                                             (" 2.5 % ", 0.025)])
def test_shares_written_as_percent_or_fraction(given, fraction):
    assert parse_share(given, "--x") == pytest.approx(fraction)


@pytest.mark.parametrize("given", ["1", "5", "10", "1.5", "1.0", "abc", "101%", "-5%", "10%%", "nan"])
def test_ambiguous_or_bad_shares_are_one_line_usage_errors(given, tmp_path):
    with pytest.raises(UsageError):
        parse_share(given, "--x")
    for option in ("--max-exposed-collective", "--max-exposed-host-transfer", "--min-mfu"):
        result = run(TPU_SAMPLE, option, given, "-o", tmp_path / "r.html")
        assert result.exit_code == 2, (option, given, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"diagnose: error: {option} ")
    assert not (tmp_path / "r.html").exists()  # refused before any work


def test_help_says_what_each_gate_measures():
    text = run("--help").stdout
    flat = " ".join(text.split())
    assert "--max-exposed-host-transfer SHARE" in text
    assert "host-offload copies are not counted" in flat and "pinned host memory over PCIe" in flat
    assert "10% or 0.10" in flat and "a bare 1 is refused" in flat


# --- GitHub Actions ----------------------------------------------------------------------------------

def test_workflow_command_escapes():
    assert escape_data("50%\r\nnext") == "50%25%0D%0Anext"
    assert escape_property("a: b, c%") == "a%3A b%2C c%25"
    line = annotation("error", "x\n::warning::injected 5%", title="gate: a,b")
    assert line == "::error title=gate%3A a%2Cb::x ::warning::injected 5%25"  # one line, whatever the text
    with pytest.raises(ValueError):
        annotation("fatal", "x")


def test_annotations_on_github_go_to_stdout_one_per_tripped_gate_and_high_finding(tmp_path):
    out = tmp_path / "r.json"
    result = run(TPU_SAMPLE, "--format", "json", "-o", out, "-q", "--max-exposed-host-transfer", "10%",
                 "--max-exposed-collective", "10%", env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 3
    data = json.loads(out.read_text())
    commands = [line for line in result.stdout.splitlines() if line.startswith("::")]
    errors = [c for c in commands if c.startswith("::error ")]
    warnings = [c for c in commands if c.startswith("::warning ")]
    assert len(errors) == sum(g["tripped"] for g in data["gates"]) == 1
    message = data["gates"][1]["message"].replace("%", "%25")
    assert errors[0] == "::error title=xladiag gate --max-exposed-host-transfer::" + message
    highs = [f for f in data["findings"] if f["severity"] == "high"]
    assert len(warnings) == len(highs) == 1 and highs[0]["title"] in warnings[0]
    assert "::" not in result.stderr
    # Off GitHub: nothing of the kind.
    quiet = run(TPU_SAMPLE, "--format", "json", "-o", out, "-q", "--max-exposed-host-transfer", "10%")
    assert "::" not in quiet.stdout + quiet.stderr


def test_annotations_move_to_stderr_when_the_report_is_on_stdout():
    result = run(CPU_SAMPLE, "--format", "json", "-o", "-", "-q", "--fail-on", "high", env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 3
    data = json.loads(result.stdout)  # stdout is the report alone
    commands = [line for line in result.stderr.splitlines() if line.startswith("::")]
    highs = [f for f in data["findings"] if f["severity"] == "high"]
    assert len(commands) == 1 + len(highs) and commands[0].startswith("::error title=xladiag gate --fail-on::")


def test_report_annotations_keep_hostile_text_on_one_line():
    report = sample_report("tpu_v6e_host_offload")
    finding = make_finding(
                  rule="evil",
                  priced=Priced(time_s_per_step=1.0, est_savings_s_per_step=1.0, step_s=1.0, confidence="low", ops=()),
                  title="t\n::error::x %0A", evidence="e", fix="f\r\nsecond line")
    lines = report_annotations(report.with_gates(min_mfu=0.5).gates, (finding,))
    assert len(lines) == 2 and all("\n" not in line and "\r" not in line for line in lines)
    assert lines[1].startswith("::warning title=xladiag evil::t ::error::x %250A")


def test_step_summary_appends_the_markdown(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    out = tmp_path / "r.json"
    args = (GPU_SAMPLE, "--format", "json", "-o", out, "-q", "--step-summary", "--fail-on", "high")
    assert run(*args, env={"GITHUB_STEP_SUMMARY": str(summary)}).exit_code == 3
    text = summary.read_text()
    assert text.startswith("earlier step\n# xladiag report:") and "## Gates" in text
    check_tables(text)
    assert json.loads(out.read_text())["gates"][0]["tripped"]


def test_step_summary_without_the_variable_fails_before_any_work(tmp_path):
    result = run(GPU_SAMPLE, "--step-summary", "-o", tmp_path / "r.html")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "diagnose: error: --step-summary: $GITHUB_STEP_SUMMARY is not set (GitHub Actions sets it inside a job step)"]
    assert not (tmp_path / "r.html").exists()


# --- Markdown GitHub can show ------------------------------------------------------------------------

def _outside_tables_and_code(text: str):
    """(line, in a code block) for every line that is not a table row."""
    md, tokens = parse(text)
    lines = text.split("\n")
    table_lines, code_lines = set(), set()
    for tok in tokens:
        if tok.type == "table_open":
            table_lines.update(range(*tok.map))
        elif tok.type == "fence":
            code_lines.update(range(tok.map[0] + 1, tok.map[1] - 1))
    return [(ln, n in code_lines) for n, ln in enumerate(lines) if n not in table_lines]


@pytest.mark.parametrize("name", SAMPLE_DIRS)
def test_every_sample_markdown_parses_folds_and_keeps_lines_short(name):
    report = sample_report(name).with_gates(fail_on="high", max_exposed_collective=0.1, min_mfu=0.3)
    text = render_markdown(report)
    assert len(text) < 65_536 and len(text.encode()) < MAX_BYTES
    tables = check_tables(text)
    assert tables[0][0][0] == "Gate" and len(tables[0]) == 4
    lines = _outside_tables_and_code(text)
    assert max(len(ln) for ln, _ in lines) <= 200
    code = [ln for ln, in_code in lines if in_code]
    assert all(len(ln) <= 100 or " " not in ln.strip() for ln in code), max(code, key=len)
    assert text.count("<details") == text.count("</details>") >= 2  # top ops and capture, at least
    _, tokens = parse(text)
    # Every finding is one folded section (the first open), each holding its own fix.
    fixes = [f for f in report.findings if f.severity != "info"]  # notes are listed apart, not written out
    assert text.count("<details open>") == (1 if fixes else 0)
    assert sum(t.type == "fence" for t in tokens) == min(len(fixes), 20)
    assert "Shortened to stay under" not in text


def test_wrapped_prose_never_starts_a_block():
    words = "a - b > c 1. d # e + f = g | h ``` i 22) j".split()
    text = " ".join(words * 20)
    for width in (3, 10, 40):
        lines = wrap(text, "> ", "> ", width=width)
        _, tokens = parse("\n".join(lines))
        kinds = [t.type for t in tokens]
        assert kinds == ["blockquote_open", "paragraph_open", "inline", "paragraph_close", "blockquote_close"], width
        assert " ".join(" ".join(ln[2:] for ln in lines).split()) == text


def test_a_cut_report_says_so():
    a = sample_report("cpu_jax_train_step").analysis
    ops = tuple(OpEvidence(f"op{i}", 1e-3, 1e-4, "x" * 300) for i in range(40))
    findings = tuple(make_finding(
                         rule=f"rule-{i}",
                         priced=Priced(time_s_per_step=1e-3, est_savings_s_per_step=1e-3, step_s=a.step_s,
                                       confidence="low", ops=ops),
                         title=f"finding {i} " * 20, evidence="evidence " * 300, fix="word " * 600) for i in range(100))
    text = render_markdown(Report(analysis=a, findings=findings, headline="h"))
    assert len(text.encode()) < MAX_BYTES and "Shortened to stay under GitHub's 65,536-character comment limit" in text
    code = [ln for ln, in_code in _outside_tables_and_code(text) if in_code]
    assert code and max(len(ln) for ln in code) <= 100


# --- Python API --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cpu_jax_train_step", "tpu_v6e_host_offload", "jax_many_programs"])
def test_findings_frame_is_one_row_per_finding(name):
    report = sample_report(name)
    frame = report.findings_frame()
    assert len(frame) == len(report.findings)
    assert list(frame["key"]) == [f.key for f in report.findings]
    assert list(frame["rank"]) == list(range(1, len(report.findings) + 1))
    assert list(frame["est_savings_s_per_step"]) == [f.est_savings_s_per_step for f in report.findings]
    assert list(frame["n_ops"]) == [len(f.ops) for f in report.findings]
    assert {"rule", "kind", "severity", "title", "fraction_of_step", "confidence", "fix"} <= set(frame.columns)
    assert frame["time_s_per_step"].dtype == "float64" and frame["rank"].dtype == "int64"


def test_public_objects_print_in_a_few_lines():
    report = sample_report("jax_fsdp_tp_train").with_gates(fail_on="high")
    a = report.analysis
    objects = [report, a, a.steps, a.files, a.dump, *a.hlo_modules, *report.findings, *report.gates,
               next(iter(a.hlo_modules[0].computations.values()))]
    for obj in objects:
        text = repr(obj)
        assert len(text) < 500 and text.count("\n") == 0, (type(obj).__name__, len(text))
    assert "1 of 1 gate tripped" in repr(report)
    assert repr(report.findings[0]).startswith(f"<Finding {report.findings[0].key} [")


# --- README's GitHub Actions example -----------------------------------------------------------------

def _readme_workflow_commands(program: str) -> list[str]:
    """The ``program ...`` command lines of README's workflow (folded ``>-`` and ``\\`` continuations joined)."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("# .github/workflows/profile.yml", 1)[1].split("```", 1)[0]
    text = re.sub(r"\\\n\s*", " ", block)
    text = re.sub(r">-\n\s+(diagnose[^\n]*)\n\s+(--[^\n]*)", r"\1 \2", text)
    return [m.strip() for m in re.findall(rf"^\s*(?:run: )?({program} [^\n|]*)", text, re.M)]


def test_readme_workflow_diagnose_step_runs_as_written(tmp_path):
    (command,) = [c for c in _readme_workflow_commands("diagnose") if not c.startswith("diagnose compare")]
    args = command.split()[1:]
    assert args[0] == "logdir" and "--step-summary" in args
    args = [str(TPU_SAMPLE) if a == "logdir" else str(tmp_path / a) if a == "report.json" else a for a in args]
    summary = tmp_path / "summary.md"
    result = run(*args, env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 3, result.stderr
    data = json.loads((tmp_path / "report.json").read_text())
    assert [g["name"] for g in data["gates"]] == ["fail-on", "max-exposed-collective", "max-exposed-host-transfer",
                                                  "min-mfu"]
    assert sum(line.startswith("::error ") for line in result.stdout.splitlines()) == len(
        [g for g in data["gates"] if g["tripped"]])
    assert "## Gates" in summary.read_text()


def test_readme_workflow_compare_step_runs_as_written(tmp_path):
    (command,) = [c for c in _readme_workflow_commands("diagnose") if c.startswith("diagnose compare")]
    args = command.split()[2:]
    assert args[:2] == ["base/report.json", "report.json"] and "--fail-on-regression" in args
    (tmp_path / "base").mkdir()
    for name in args[:2]:  # the same capture on both sides: no regression
        assert run(GPU_SAMPLE, "--format", "json", "-o", tmp_path / name, "-q").exit_code == 0
    from xladiag.cli import compare_main  # what `diagnose compare` dispatches to

    result = CliRunner().invoke(compare_main, [str(tmp_path / a) if a.endswith((".json", ".md")) else a for a in args]
                                + ["-q"], catch_exceptions=False, env=NOT_ON_GITHUB)
    assert result.exit_code == 0, result.stderr
    text = (tmp_path / "compare.md").read_text()
    check_tables(text)
    assert len(text) < 65_536 and max(len(ln) for ln, _ in _outside_tables_and_code(text)) <= 200

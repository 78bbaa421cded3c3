"""The diagnose command as a user meets it: discovery, bad input, exit codes, nothing half-written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CPU_SAMPLE, GPU_SAMPLE, TPU_SAMPLE, only_xplane
from xladiag.cli import main
from xladiag.parsers.discovery import DiscoveryError, discover


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def assert_one_line_error(result, code: int, *needles: str):
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("diagnose: error:")
    for needle in needles:
        assert needle in result.stderr
    assert "Traceback" not in result.stderr


# --- discovery ---------------------------------------------------------------------------------

def _fake_run(root: Path, run: str, hosts=("h0",), source: Path | None = None) -> Path:
    d = root / "plugins" / "profile" / run
    d.mkdir(parents=True)
    for host in hosts:
        shutil.copy(source or only_xplane(TPU_SAMPLE), d / f"{host}.xplane.pb")
    return d


def test_discovery_takes_newest_run_and_all_hosts(tmp_path):
    _fake_run(tmp_path, "2025_01_01_00_00_00")
    _fake_run(tmp_path, "2025_06_01_00_00_00", hosts=("h0", "h1"))
    found = discover(tmp_path)
    assert found.run_name == "2025_06_01_00_00_00"
    assert found.hosts == ("h0", "h1")
    assert found.other_runs == ("2025_01_01_00_00_00",)
    older = discover(tmp_path, run="2025_01_01_00_00_00")
    assert older.hosts == ("h0",)
    with pytest.raises(DiscoveryError, match="no run named 'nope'; runs here: 2025_01_01"):
        discover(tmp_path, run="nope")


def test_discovery_accepts_run_folder_file_and_finds_hlo_dump():
    run_dir = only_xplane(CPU_SAMPLE).parent
    assert discover(run_dir).xplane_files == (only_xplane(CPU_SAMPLE),)
    single = discover(only_xplane(CPU_SAMPLE))
    assert single.xplane_files == (only_xplane(CPU_SAMPLE),)
    found = discover(CPU_SAMPLE)
    assert [p.name for p in found.hlo_files] == ["module_0000.jit_train_step.cpu_after_optimizations.txt"]


# --- bad input -----------------------------------------------------------------------------------

def test_missing_path(tmp_path):
    assert_one_line_error(run(tmp_path / "nope"), 1, "nope", "no such file or directory")


def test_no_arguments_is_a_usage_error():
    result = run()
    assert result.exit_code == 2
    assert "give a profile directory" in result.stderr


def test_empty_dir(tmp_path):
    assert_one_line_error(run(tmp_path, "-o", tmp_path / "r.html"), 1, "no '*.xplane.pb' capture found")
    assert not (tmp_path / "r.html").exists()


def test_dir_without_xplanes(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "plugins" / "profile" / "run1").mkdir(parents=True)
    assert_one_line_error(run(tmp_path), 1, str(tmp_path), "no '*.xplane.pb'")
    assert list(tmp_path.glob("xladiag_report*")) == []


def test_truncated_xplane(tmp_path):
    data = only_xplane(TPU_SAMPLE).read_bytes()
    bad = _fake_run(tmp_path, "r1") / "h0.xplane.pb"
    bad.write_bytes(data[:100_000])
    assert_one_line_error(run(tmp_path), 1, "h0.xplane.pb", "truncated or corrupt")
    assert list(tmp_path.glob("xladiag_report*")) == []


def test_file_that_is_not_a_profile(tmp_path):
    bogus = tmp_path / "model.xplane.pb"
    bogus.write_bytes(b"%PDF-1.7 not a profile\n" * 50)
    assert_one_line_error(run(bogus), 1, "model.xplane.pb")


def test_hlo_file_that_does_not_parse(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "module_0001.jit_f.after_optimizations.txt").write_text(
        "HloModule jit_f\n\nENTRY %main {\n  %p = f32[8]{0} parameter(0)\n  %x = f32[8 broken\n}\n"
    )
    assert_one_line_error(run("--hlo-dir", dump, "--chip", "v6e", "-o", tmp_path / "r.html"), 1,
                          "module_0001.jit_f.after_optimizations.txt:")
    assert not (tmp_path / "r.html").exists()


def test_unwritable_output_path(tmp_path):
    assert_one_line_error(run(TPU_SAMPLE, "-o", tmp_path / "no" / "such" / "dir" / "r.html"), 2, "does not exist")



def test_output_permission_denied(tmp_path, monkeypatch):
    real_access = os.access
    # Root may write anywhere: pretend that writes are refused.
    monkeypatch.setattr(os, "access", lambda path, mode: False if mode & os.W_OK else real_access(path, mode))
    assert_one_line_error(run(TPU_SAMPLE, "-o", tmp_path / "r.html"), 2, "permission denied")
    assert not (tmp_path / "r.html").exists()


def test_output_is_a_directory(tmp_path):
    assert_one_line_error(run(TPU_SAMPLE, "-o", tmp_path), 2, "is a directory")


def test_unknown_chip(tmp_path):
    assert_one_line_error(run(TPU_SAMPLE, "--chip", "tpu-v99", "-o", tmp_path / "r.json", "--format", "json"),
                          1, "unknown chip")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("args, needle", [
    (("--max-exposed-collective", "lots"), "not a share of the step"),
    (("--max-exposed-collective", "nan"), "not a share of the step"),
    (("--max-exposed-collective", "-5%"), "not a share of the step"),
    (("--min-mfu", "2"), "--min-mfu"),
    (("--format", "pdf"), "--format"),
    (("--run", "2025_12_01_00_00_00", "--hlo-dir", str(TPU_SAMPLE.parent / "hlo_maxtext_llama3_8b_v6e4")), None),
])
def test_bad_options_are_one_line_usage_errors(args, needle, tmp_path):
    if needle is None:  # --run without a profile directory
        result = run(*args)
        assert_one_line_error(result, 1, "--run picks a run")
        return
    assert_one_line_error(run(TPU_SAMPLE, *args, "-o", tmp_path / "r.html"), 2, needle)
    assert not (tmp_path / "r.html").exists()


def test_help_teaches():
    result = run("--help")
    assert result.exit_code == 0
    for needle in ("--hlo-dir", "--format", "--fail-on", "Exit codes", "plugins/profile"):
        assert needle in result.stdout


@pytest.mark.parametrize("sample", [TPU_SAMPLE, GPU_SAMPLE, CPU_SAMPLE], ids=["tpu", "gpu", "cpu"])
def test_default_report_path_and_printed(tmp_path, sample):
    target = tmp_path / sample.name
    shutil.copytree(sample, target)
    result = run(target, "--quiet")
    assert result.exit_code == 0, result.stderr
    report = target / "xladiag_report.html"
    assert report.is_file() and report.stat().st_size > 1000
    assert result.stdout == ""  # -q: nothing on success
    assert f"report: {report}" in run(target).stdout
    assert not [p for p in target.iterdir() if p.name.startswith(".xladiag_report")]  # no temp leftovers


# --- CI gates ------------------------------------------------------------------------------------

def test_gates_trip_on_the_host_offload_capture(tmp_path):
    """v6e sample: a high finding (exposed host offload ~97 % of the step) and MFU far below 0.35."""
    out = tmp_path / "r.json"
    result = run(TPU_SAMPLE, "--format", "json", "-o", out, "--quiet", "--fail-on", "high", "--min-mfu", "0.35")
    assert result.exit_code == 3, result.stderr
    gates = [line for line in result.stderr.splitlines() if line.startswith("diagnose: gate:")]
    assert len(gates) == 2
    assert "severity >= high" in gates[0] and "Exposed host-offload" in gates[0]
    mfu = json.loads(out.read_text())["mfu"]
    assert mfu < 1e-3 and gates[1] == f"diagnose: gate: MFU {mfu * 100:.2g}% < 35.0%"
    assert out.is_file()  # the report is still written: the gate is about the verdict, not the input


def test_gates_pass_when_thresholds_hold(tmp_path):
    # The MI300 forward pass runs no collective at all.
    result = run(GPU_SAMPLE, "--format", "json", "-o", tmp_path / "r.json", "--quiet",
                 "--max-exposed-collective", "10%")
    assert result.exit_code == 0, result.stderr
    assert "gate" not in result.stderr
    # Its retiling transposes are a high finding, so --fail-on high trips on the same capture.
    tripped = run(GPU_SAMPLE, "--format", "json", "-o", tmp_path / "r.json", "--quiet", "--fail-on", "high")
    assert tripped.exit_code == 3 and "Layout-only copies" in tripped.stderr


def test_host_offload_waits_are_not_collective_time(tmp_path):
    # The v6e capture waits 97 % of its step on host-offload copies, but runs no collective in its step:
    # the collective gate holds while --fail-on high (the host-offload finding) trips.
    args = (TPU_SAMPLE, "--format", "json", "-o", tmp_path / "r.json", "--quiet", "--max-exposed-collective", "1%")
    assert run(*args).exit_code == 0
    tripped = run(*args, "--fail-on", "high")
    assert tripped.exit_code == 3 and "Exposed host-offload" in tripped.stderr


def test_exposed_collective_gate_on_the_cpu_capture(tmp_path):
    # CPU collectives are synchronous: all of their time is exposed, well above 5 % of the step.
    result = run(CPU_SAMPLE, "--format", "json", "-o", tmp_path / "r.json", "--quiet", "--max-exposed-collective", "5%")
    assert result.exit_code == 3, result.stderr
    assert "exposed collective time" in result.stderr and "> 5.0%" in result.stderr


def test_json_to_stdout_is_clean(tmp_path):
    import json

    result = run(CPU_SAMPLE, "--format", "json", "-o", "-")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["schema_version"] == 2 and data["findings"]


# --- one error type, --debug, the format table ----------------------------------------------------

def _small_dump(tmp_path: Path) -> Path:
    from test_report_json import HLO_TEXT

    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "module_0001.jit_f.after_optimizations.txt").write_text(HLO_TEXT)
    return dump


def test_a_bug_is_one_line_and_debug_shows_its_traceback(tmp_path, monkeypatch):
    import xladiag.api

    def broken_rules(analysis, selection):
        return {}["no-such-column"]  # a KeyError deep in the pipeline, as a bug in a rule would raise

    monkeypatch.setattr(xladiag.api, "run_selected", broken_rules)
    args = ("--hlo-dir", _small_dump(tmp_path), "--chip", "v6e", "-o", tmp_path / "r.html")
    result = run(*args)
    assert_one_line_error(result, 1, "internal error: KeyError: 'no-such-column'", "--debug", "please report")
    assert not (tmp_path / "r.html").exists()

    debug = run(*args, "--debug")
    assert debug.exit_code == 1
    lines = debug.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and "broken_rules" in debug.stderr
    assert lines[-1].startswith("diagnose: error: internal error: KeyError")


def test_input_errors_exit_with_their_code_and_debug_traceback(tmp_path):
    assert_one_line_error(run(tmp_path), 1, "no '*.xplane.pb'")
    debug = run(tmp_path, "--debug")
    assert debug.exit_code == 1 and "DiscoveryError" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].startswith("diagnose: error:")
    usage = run(TPU_SAMPLE, "-o", tmp_path / "missing" / "r.html", "--debug")
    assert usage.exit_code == 2 and "UsageError" in usage.stderr


def test_cli_catches_only_the_error_root():
    """The CLI (cli.py and the cli_* modules of its commands) knows one error type: no internal exception class
    is imported into it."""
    import ast

    import xladiag.cli as cli

    files = sorted(Path(cli.__file__).parent.glob("cli*.py"))
    assert len(files) >= 2  # cli.py and what its commands share
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in files]
    errors = {(node.module, alias.name) for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
              for alias in node.names if alias.name.endswith("Error")}
    assert ("errors", "XladiagError") in errors
    assert {module for module, _ in errors} == {"errors"}, errors


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_stdout_on_a_full_disk_is_a_usage_error(tmp_path):
    import subprocess
    import sys

    dump = _small_dump(tmp_path)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "xladiag.cli", "--hlo-dir", str(dump), "--chip", "v6e",
                               "--format", "json", "-o", "-", "-q"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["diagnose: error: -: cannot write to stdout: No space left on device"]


def test_format_table_drives_choices_help_and_default_name(tmp_path, monkeypatch):
    from xladiag.report.render import FORMATS, Format

    fmt_option = next(p for p in main.params if p.name == "format")
    assert list(fmt_option.type.choices) == list(FORMATS)
    help_text = run("--help").stdout
    for name, fmt in FORMATS.items():
        assert name in help_text and fmt.description in help_text
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `--format "))
    assert row.split("`")[1] == "--format " + "\\|".join(FORMATS)  # the README's option table agrees
    # The default output name takes its extension from the table.
    monkeypatch.setitem(FORMATS, "markdown", Format(FORMATS["markdown"].renderer, "mdown", "renamed"))
    dump = _small_dump(tmp_path)
    result = run("--hlo-dir", dump, "--chip", "v6e", "--format", "markdown", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert (dump / "xladiag_report.mdown").read_text(encoding="utf-8").startswith("# xladiag report")


@pytest.mark.parametrize("name, check", [
    ("report.json", lambda text: json.loads(text)["schema_version"] >= 1),
    ("report.md", lambda text: text.startswith("# xladiag report")),
    ("report.txt", lambda text: "Ranked fixes" in text and "<" not in text.splitlines()[0]),
    ("report.html", lambda text: text.lstrip().lower().startswith("<!doctype html")),
])
def test_the_output_extension_picks_the_format_when_none_is_given(tmp_path, name, check):
    """`diagnose s -o report.json` writes JSON (it wrote HTML into report.json, and CI's jq failed later)."""
    out = tmp_path / name
    result = CliRunner().invoke(main, [str(CPU_SAMPLE), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert check(out.read_text(encoding="utf-8"))
    # Given explicitly, --format must agree with the extension (tests/test_cli_conventions.py).
    given = CliRunner().invoke(main, [str(CPU_SAMPLE), "-o", str(tmp_path / "x.json"), "-q", "--format", "markdown"])
    assert given.exit_code == 2 and not (tmp_path / "x.json").exists()

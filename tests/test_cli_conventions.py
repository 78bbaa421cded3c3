"""The command behaves like the tools people know: where the report lands, -q, formats from -o, runs, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from conftest import CPU_SAMPLE, only_xplane
from xladiag import cli_output
from xladiag.cli import main


def run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, **kwargs)


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "logdir"
    shutil.copytree(CPU_SAMPLE, target)
    return target


def test_a_format_that_disagrees_with_the_output_name_is_a_usage_error(tmp_path):
    result = run(CPU_SAMPLE, "--format", "markdown", "-o", tmp_path / "r.json")
    assert result.exit_code == 2 and "--format markdown" in result.stderr and "r.json" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "r.json").exists()
    # An extension that names no format, or one that agrees, is fine.
    assert run(CPU_SAMPLE, "--format", "markdown", "-o", tmp_path / "r.log", "-q").exit_code == 0
    assert run(CPU_SAMPLE, "--format", "json", "-o", tmp_path / "r.json", "-q").exit_code == 0


def test_an_xplane_file_or_run_folder_reports_beside_the_log_dir_not_in_the_run(tmp_path):
    logdir = _copy(tmp_path)
    xplane = only_xplane(logdir)
    for given in (xplane, xplane.parent):
        result = run(given, "--format", "json")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.strip() == f"report: {logdir / 'xladiag_report.json'}"
        assert sorted(p.name for p in xplane.parent.iterdir()) == [xplane.name]  # TensorBoard's run stays clean
        (logdir / "xladiag_report.json").unlink()


def test_quiet_prints_nothing_on_success(tmp_path):
    logdir = _copy(tmp_path)
    result = run(logdir, "-q")
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    assert (logdir / "xladiag_report.html").is_file()


def test_an_unwritable_log_dir_writes_here_and_says_so(tmp_path, monkeypatch):
    logdir = _copy(tmp_path)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setattr(cli_output, "_writable", lambda folder: folder != logdir)
    result = run(logdir, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert f"{logdir} is not writable" in result.stderr and "./xladiag_report.json" in result.stderr
    assert json.loads((here / "xladiag_report.json").read_text())["findings"] is not None
    assert not (logdir / "xladiag_report.json").exists()


def test_cannot_write_errors_point_at_the_output_option(tmp_path):
    result = run(CPU_SAMPLE, "-o", tmp_path / "missing" / "r.html")
    assert result.exit_code == 2 and "cannot write" in result.stderr and "with -o" in result.stderr


# --- runs across TensorBoard sub-logdirs ---------------------------------------------------------

def _tb(tmp_path: Path) -> Path:
    """tb/train and tb/eval, as TensorBoard shows them: eval's run is the newest, one timestamp in both."""
    tb = tmp_path / "tb"
    for sub, run_name in (("train", "2026_01_01_00_00_00"), ("train", "2026_02_01_00_00_00"),
                          ("eval", "2026_02_01_00_00_00"), ("eval", "2026_03_01_00_00_00")):
        folder = tb / sub / "plugins" / "profile" / run_name
        folder.mkdir(parents=True)
        shutil.copy(only_xplane(CPU_SAMPLE), folder / "cpu-host.xplane.pb")
    return tb


def test_runs_are_named_by_sub_logdir_and_picked_by_it(tmp_path):
    from xladiag.parsers.discovery import DiscoveryError, discover

    tb = _tb(tmp_path)
    found = discover(tb)
    assert found.run_name == "eval/2026_03_01_00_00_00"
    assert found.run_dir == tb / "eval/plugins/profile/2026_03_01_00_00_00"
    assert found.runs_note == "4 runs: using eval/2026_03_01_00_00_00; --run to pick"
    assert set(found.other_runs) == {"train/2026_01_01_00_00_00", "train/2026_02_01_00_00_00",
                                     "eval/2026_02_01_00_00_00"}
    assert discover(tb, run="train").run_name == "train/2026_02_01_00_00_00"  # the newest of train
    same = discover(tb, run="eval/2026_02_01_00_00_00")  # one timestamp, two sub-logdirs: told apart
    assert same.run_dir == tb / "eval/plugins/profile/2026_02_01_00_00_00" and same.runs_note is None
    try:
        discover(tb, run="2026_02_01_00_00_00")
        raise AssertionError("an ambiguous --run was taken")
    except DiscoveryError as exc:
        assert "names 2 runs" in str(exc) and "train/2026_02_01_00_00_00" in str(exc)
    assert discover(tb, run="2026_01_01_00_00_00").run_name == "train/2026_01_01_00_00_00"


def test_the_chosen_run_is_said_once_on_stderr_and_in_every_format(tmp_path):
    tb = _tb(tmp_path)
    note = "4 runs: using eval/2026_03_01_00_00_00; --run to pick"
    result = run(tb, "--format", "json", "-o", tmp_path / "r.json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count(note) == 1
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["name"] == "eval/2026_03_01_00_00_00" and data["run"]["note"] == note
    assert len(data["run"]["other_runs"]) == 3
    for fmt in ("markdown", "text", "html"):
        shown = run(tb, "--format", fmt, "-o", "-", "-q").stdout.replace("\\_", "_")  # Markdown escapes _
        assert note in " ".join(shown.split()), fmt  # wrapped lines joined
    picked = run(tb, "--run", "train", "--format", "json", "-o", tmp_path / "t.json")
    assert picked.exit_code == 0 and "--run to pick" not in picked.stderr
    assert json.loads((tmp_path / "t.json").read_text())["run"]["note"] is None


# --- compare: URLs, any mix, text, --version -----------------------------------------------------

def test_compare_reads_urls_and_json_in_any_mix(tmp_path, monkeypatch):
    fsspec = __import__("pytest").importorskip("fsspec")
    import uuid

    import xladiag

    pair = CPU_SAMPLE.parent / "gpu_h100_remat_pair"
    fs, root = fsspec.filesystem("memory"), f"/xladiag-cmp-{uuid.uuid4().hex[:8]}"
    try:
        for p in sorted((pair / "before").rglob("*")):
            if p.is_file():
                fs.pipe_file(f"{root}/before/{p.relative_to(pair / 'before').as_posix()}", p.read_bytes())
        after_json = xladiag.diagnose(pair / "after").to_json()
        fs.pipe_file(f"{root}/after.json", after_json.encode())
        (tmp_path / "after.json").write_text(after_json)
        local = xladiag.compare(pair / "before", tmp_path / "after.json")
        remote = xladiag.compare(f"memory://{root}/before", f"memory://{root}/after.json")
        assert remote.data["step"] == local.data["step"] and remote.data["new"]["input_kind"] == "json report"
        monkeypatch.chdir(tmp_path)
        result = CliRunner().invoke(main, ["compare", f"memory://{root}/before", str(tmp_path / "after.json"),
                                           "--format", "json"], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        assert json.loads((tmp_path / "xladiag_compare.json").read_text())["step"] == local.data["step"]
    finally:
        if fs.exists(root):
            fs.rm(root, recursive=True)


def test_compare_text_and_version(tmp_path):
    from xladiag import __version__

    pair = CPU_SAMPLE.parent / "gpu_h100_remat_pair"
    result = CliRunner().invoke(main, ["compare", str(pair / "before"), str(pair / "after"), "--format", "text", "-q"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    text = result.stdout  # a terminal format: stdout by default
    assert text.startswith("xladiag compare: ") and "Ops that changed" in text and "Findings" in text
    assert "<td" not in text and "| ---" not in text and "**" not in text  # no markup
    assert not list(pair.rglob("xladiag_compare*"))
    version = CliRunner().invoke(main, ["compare", "--version"])
    assert version.exit_code == 0 and __version__ in version.stdout


# --- conventions: python -m, --version everywhere, help mentions compare ----------------------------

def test_python_dash_m_runs_the_command(tmp_path):
    import os
    import subprocess
    import sys

    from xladiag import __version__

    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    for args in (["--version"], ["compare", "--version"]):
        done = subprocess.run([sys.executable, "-m", "xladiag", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert done.returncode == 0 and __version__ in done.stdout, done.stderr
    helped = subprocess.run([sys.executable, "-m", "xladiag", "--help"], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
    assert helped.returncode == 0 and "diagnose compare" in helped.stdout
    assert "or: diagnose compare [OPTIONS] BASE NEW" in helped.stdout.splitlines()[1]  # in the usage itself
    # Shell completion as the README sets it up: rule ids after --select.
    from xladiag.rules.registry import RULE_IDS

    completed = subprocess.run([sys.executable, "-m", "xladiag"], capture_output=True, text=True, cwd=tmp_path,
                               env={**env, "_DIAGNOSE_COMPLETE": "bash_complete", "COMP_WORDS": "diagnose --select ",
                                    "COMP_CWORD": "2"}, timeout=120)
    assert completed.returncode == 0 and f"plain,{RULE_IDS[0]}" in completed.stdout.splitlines(), completed


# --- csv ---------------------------------------------------------------------------------------------

def test_csv_is_the_ops_table_with_the_json_columns(tmp_path):
    import csv

    out = tmp_path / "ops.csv"
    assert run(CPU_SAMPLE, "-o", out, "-q").exit_code == 0  # the extension picks csv
    assert run(CPU_SAMPLE, "--format", "json", "-o", tmp_path / "r.json", "-q").exit_code == 0
    ops = json.loads((tmp_path / "r.json").read_text())["ops"]
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8")))
    assert list(rows[0])[0] == "name" and set(rows[0]) == set(ops[0])
    assert [r["name"] for r in rows] == [o["name"] for o in ops]
    assert float(rows[0]["measured_s_per_step"]) == ops[0]["measured_s_per_step"]


def test_csv_cells_never_run_as_a_spreadsheet_formula():
    from xladiag.report.csv_out import _cell

    assert _cell("=HYPERLINK(\"x\")") == "'=HYPERLINK(\"x\")" and _cell("-1") == "'-1" and _cell(-1.5) == -1.5
    assert _cell(None) == "" and _cell(["a", "b"]) == '["a", "b"]'


# --- progress in a log, shell completion -----------------------------------------------------------

def test_progress_in_a_log_is_a_line_every_few_seconds_not_every_event(capsys):
    from xladiag.cli_common import Progress

    now = [0.0]
    progress = Progress(enabled=True, tty=False, clock=lambda: now[0])
    for step in range(100):  # 100 events over 30 s
        now[0] = step * 0.3
        progress(f"reading host {step}")
    progress.done()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["xladiag: [10 s] reading host 34", "xladiag: [20 s] reading host 68"]
    quick = Progress(enabled=True, tty=False, clock=lambda: 1.0)
    quick("decoding")  # a run shorter than the interval says nothing
    assert capsys.readouterr().err == ""


def test_rule_ids_complete_for_select_and_ignore():
    from click.shell_completion import ShellComplete

    from xladiag.rules.registry import RULE_IDS

    def complete(args, incomplete):
        return [c.value for c in ShellComplete(main, {}, "diagnose", "_DIAGNOSE_COMPLETE")
                .get_completions(args, incomplete)]

    assert complete(["logdir", "--select"], "") == list(RULE_IDS)
    first = RULE_IDS[0]
    assert complete(["logdir", "--ignore"], first[:3]) == [r for r in RULE_IDS if r.startswith(first[:3])]
    after = complete(["logdir", "--select"], f"{first},")
    assert after == [f"{first},{r}" for r in RULE_IDS if r != first]


# --- errors name what was found ----------------------------------------------------------------------

def test_a_chrome_trace_folder_is_named_as_one(tmp_path):
    import gzip

    run_dir = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    run_dir.mkdir(parents=True)
    (run_dir / "host.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    result = run(tmp_path, "-o", tmp_path / "r.html")
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "Chrome trace" in result.stderr and "not an XSpace" in result.stderr and ".xplane.pb" in result.stderr


def test_json_named_xplane_is_recognised_as_json(tmp_path):
    fake = tmp_path / "host.xplane.pb"
    fake.write_text(json.dumps({"schema_version": 2, "ops": []}))
    result = run(fake, "-o", tmp_path / "r.html")
    assert result.exit_code == 1 and "a JSON file" in result.stderr and "wire type" not in result.stderr


def test_a_topology_that_is_not_the_named_slice_is_refused(tmp_path):
    result = run(CPU_SAMPLE, "--chip", "v6e-8", "--topology", "4x4", "-o", tmp_path / "r.json")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "16 chips" in result.stderr and "slice of 8" in result.stderr and not (tmp_path / "r.json").exists()
    assert run(CPU_SAMPLE, "--chip", "v6e-8", "--topology", "2x4", "-o", tmp_path / "r.json", "-q").exit_code == 0


def test_api_errors_name_the_keyword_argument_not_the_flag(tmp_path):
    import pytest

    import xladiag
    from xladiag.errors import UsageError

    with pytest.raises(UsageError) as bad_rule:
        xladiag.diagnose(CPU_SAMPLE, select="no-such-rule")
    assert "select=" in str(bad_rule.value) and "--select" not in str(bad_rule.value)
    with pytest.raises(UsageError) as bad_steps:
        xladiag.diagnose(CPU_SAMPLE, steps="x:y")
    assert str(bad_steps.value).startswith("steps='x:y'") and "--steps" not in str(bad_steps.value)
    with pytest.raises(UsageError) as slice_error:
        xladiag.diagnose(CPU_SAMPLE, chip="v6e-8", topology="4x4")
    assert "topology='4x4' is 16 chips" in str(slice_error.value) and "chip='v6e-8'" in str(slice_error.value)
    # The command keeps its flags.
    result = run(CPU_SAMPLE, "--select", "no-such-rule", "-o", tmp_path / "r.json")
    assert result.exit_code == 2 and "--select" in result.stderr


# --- API: Report.ops, profile(), notebooks -----------------------------------------------------------

def test_profile_takes_diagnose_options_and_writes_the_report_where_asked(tmp_path):
    import pytest

    import xladiag
    from xladiag.errors import UsageError
    from xladiag.rules.registry import RULE_IDS

    with pytest.raises(TypeError, match=r"profile\(\) got an unexpected keyword argument 'run'"):
        xladiag.profile(tmp_path / "logdir", run="x")
    with pytest.raises(UsageError, match="cannot write"):
        xladiag.profile(tmp_path / "logdir", output=tmp_path / "missing" / "r.json")
    rule = RULE_IDS[0]
    session = xladiag.profile(tmp_path / "logdir", output=tmp_path / "r.json", select=rule, steps="1:3")
    shutil.copytree(CPU_SAMPLE, tmp_path / "logdir")  # what the trace would have written (no JAX here)
    session.__exit__(None, None, None)  # the block's end, without the trace it never started
    assert session.run == "2000_01_01_00_00_00" and set(session.report.selection.select) == {rule}
    assert session.report.analysis.choices["steps"]["source"] == "given"  # steps='1:3' went to diagnose
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["name"] == "2000_01_01_00_00_00" and {f["rule"] for f in data["findings"]} <= {rule}


def test_a_report_in_a_notebook_is_the_whole_report():
    from html import unescape

    import xladiag

    report = xladiag.diagnose(CPU_SAMPLE)
    shown = report._repr_html_()
    assert shown.startswith("<iframe srcdoc=\"") and "<" not in shown[len("<iframe srcdoc=\""):shown.index("\" title")]
    page = unescape(shown[len("<iframe srcdoc=\""):shown.index("\" title")])
    assert page == report.to_html()

"""Hostile paths, URLs and outputs, second round: fsspec errors and chained URLs, a folder vanishing during
discovery, an output that names an input, and profile text that a CI runner would run as a workflow command.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from builders import scenarios, xspace_encoder
from xladiag.api import diagnose
from xladiag.cli import main
from xladiag.cli_compare import compare_main
from xladiag.errors import UsageError
from xladiag.parsers import discovery
from xladiag.report.render import FORMATS
from xladiag.text_safety import ci_inert

CPU_SAMPLE = Path(__file__).resolve().parent.parent / "sample_profiles" / "cpu_jax_train_step"


def run(*args, env=None):
    args = [str(a) for a in args]
    if args[:1] == ["compare"]:  # `diagnose compare` is compare_main (cli._Diagnose), which CliRunner calls directly
        return CliRunner().invoke(compare_main, args[1:], catch_exceptions=False, env=env)
    return CliRunner().invoke(main, args, catch_exceptions=False, env=env)


def _one_line(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diagnose: error:"), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# --- 4. remote paths ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["ftp://127.0.0.1:9/x", "reference://", "github://", "nosuch-proto://x",
                                 "zip://logdir::file:///nonexistent/x.zip"])
def test_an_fsspec_constructor_error_is_one_line(tmp_path, url):
    pytest.importorskip("fsspec")
    result = run(url, "-o", tmp_path / "r.json")
    assert result.exit_code in (1, 2)
    _one_line(result, result.exit_code, url.split("::")[0])
    assert not (tmp_path / "r.json").exists()


@pytest.fixture(scope="module")
def local_report() -> dict:
    return diagnose(CPU_SAMPLE).to_dict()


def _same_analysis(a: dict, b: dict) -> None:
    assert (a["step_s"], a["mfu"], len(a["ops"]), a["hosts"]) == (b["step_s"], b["mfu"], len(b["ops"]), b["hosts"])
    assert [f["key"] for f in a["findings"]] == [f["key"] for f in b["findings"]]


@pytest.mark.parametrize("archive", ["zip", "tar"])
def test_a_capture_inside_an_archive_is_diagnosed_through_a_chained_url(tmp_path, local_report, archive):
    pytest.importorskip("fsspec")
    path = tmp_path / f"capture.{archive}"
    if archive == "zip":
        with zipfile.ZipFile(path, "w") as zf:
            for f in CPU_SAMPLE.rglob("*"):
                zf.write(f, Path("logdir") / f.relative_to(CPU_SAMPLE))
    else:
        with tarfile.open(path, "w") as tf:
            tf.add(CPU_SAMPLE, "logdir")
    url = f"{archive}://logdir::file://{path}"
    out = tmp_path / "r.json"
    result = run(url, "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    _same_analysis(data, local_report)
    # Every file read is named by a URL that opens it again (the host workers reopen it from that text).
    assert all(f.endswith(f"::file://{path}") for f in data["run"]["xplane_files"] + data["run"]["hlo_files"])
    assert data["run"]["xplane_files"] and data["run"]["hlo_files"]


def test_a_run_folder_vanishing_during_discovery_is_one_line(tmp_path, monkeypatch):
    capture = tmp_path / "cap"
    shutil.copytree(CPU_SAMPLE, capture)
    listed = discovery._runs_under

    def then_deleted(root):
        runs = listed(root)
        shutil.rmtree(runs[-1])  # deleted between the listing and the reading
        return runs

    monkeypatch.setattr(discovery, "_runs_under", then_deleted)
    _one_line(run(capture, "-o", tmp_path / "r.json"), 1, "2000_01_01_00_00_00", "vanished")


# --- 5. an output that names an input ---------------------------------------------------------------------------

@pytest.fixture()
def capture(tmp_path) -> Path:
    shutil.copytree(CPU_SAMPLE, tmp_path / "cap")
    return tmp_path / "cap"


def _xplane(capture: Path) -> Path:
    return next(capture.glob("plugins/profile/*/*.xplane.pb"))


def _dump_file(capture: Path) -> Path:
    return next(capture.glob("hlo/*after_optimizations.txt"))


CASES = {  # (what is diagnosed, its arguments, the input -o names)
    "the capture file": lambda c: (c, ["-o", _xplane(c)], _xplane(c)),
    "the capture file given": lambda c: (_xplane(c), ["-o", f"{_xplane(c).parent}/./{_xplane(c).name}"],
                                         _xplane(c)),
    "a file of the dump found": lambda c: (c, ["--format", "text", "-o", _dump_file(c)], _dump_file(c)),
    "the dump file given": lambda c: (c, ["--hlo-dir", _dump_file(c), "-o", _dump_file(c)], _dump_file(c)),
    "the baseline": lambda c: (c, ["--baseline", c / "accepted.txt", "-o", c / "accepted.txt"], c / "accepted.txt"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_output_never_overwrites_an_input(capture, case):
    (capture / "accepted.txt").write_text("a:b:c\n")
    target, args, victim = CASES[case](capture)
    before = victim.read_bytes()
    _one_line(run(target, *args), 2, "is an input of this run")
    assert victim.read_bytes() == before


@pytest.mark.parametrize("which", ["base", "new", "baseline"])
def test_compare_never_overwrites_base_new_or_the_baseline(tmp_path, which):
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    diagnose(CPU_SAMPLE).to_json(base)
    shutil.copy(base, new)
    (tmp_path / "baseline.txt").write_text("a:b:c\n")
    victim = {"base": base, "new": new, "baseline": tmp_path / "baseline.txt"}[which]
    before = victim.read_bytes()
    _one_line(run("compare", base, new, "--baseline", tmp_path / "baseline.txt", "-o", victim), 2, "is an input")
    assert victim.read_bytes() == before


def test_empty_or_shared_output_paths_are_usage_errors(capture, monkeypatch):
    monkeypatch.chdir(capture)
    _one_line(run(capture, "-o", ""), 2, "-o", "empty path")
    _one_line(run(capture, "--write-baseline", "", "-o", "r.json"), 2, "--write-baseline", "empty path")
    _one_line(run("compare", capture, capture, "-o", ""), 2, "empty path")
    _one_line(run(capture, "-o", "same.txt", "--write-baseline", "./same.txt"), 2, "-o and --write-baseline")
    assert not (capture / "same.txt").exists() and not (capture / "xladiag_report.html").exists()
    # Rewriting the baseline one reads stays the way to update it.
    (capture / "b.txt").write_text("a:b:c\n")
    assert run(capture, "--baseline", "b.txt", "--write-baseline", "b.txt", "-o", "r.json").exit_code == 0


def test_the_api_never_writes_a_report_over_its_inputs(capture):
    report = diagnose(capture)
    for victim in (_xplane(capture), _dump_file(capture)):
        before = victim.read_bytes()
        with pytest.raises(UsageError, match="is an input of this run"):
            report.to_json(victim)
        assert victim.read_bytes() == before
    with pytest.raises(UsageError, match="empty output path"):
        report.to_json("")


# --- 6. workflow commands in profile text ----------------------------------------------------------------------

EVIL_OP = "::error title=pwned::owned"
EVIL_DEVICE = "##[error]evil TPU"
COMMAND = re.compile(r"^\s*::|##\[", re.MULTILINE)


def _evil_capture(tmp_path: Path) -> Path:
    captured = {}
    real = scenarios._run
    scenarios._run = lambda template, steps, warmup: captured.setdefault("t", template) and real(template, steps,
                                                                                                  warmup)
    try:
        scenarios.layout_copies()
    finally:
        scenarios._run = real
    template = [dataclasses.replace(op, name=EVIL_OP) if op.name == "copy" else op for op in captured["t"]]
    builder, _ = scenarios.build_train_steps(template,
                                             builder=xspace_encoder.TpuCaptureBuilder(device_type=EVIL_DEVICE))
    builder.write(tmp_path)
    return tmp_path


def test_no_printed_line_of_profile_text_is_a_workflow_command(tmp_path):
    capture = _evil_capture(tmp_path / "cap")
    env = {"GITHUB_ACTIONS": "true"}
    for fmt in FORMATS:
        result = run(capture, "--format", fmt, "-o", "-", "--fail-on", "low", env=env)
        assert result.exit_code == 3, result.stderr
        assert EVIL_OP.split("::")[1] in result.stdout or fmt == "json"
        assert not COMMAND.search(result.stdout), (fmt, COMMAND.search(result.stdout))
        if fmt == "json":
            assert EVIL_OP in {op["name"] for op in json.loads(result.stdout)["ops"]}  # the data is unchanged
        ours = [line for line in result.stderr.splitlines() if COMMAND.search(line)]
        assert ours and all(re.match(r"::(warning|error) title=xladiag", line) for line in ours), ours
    warned = run(capture, "--format", "json", "-o", tmp_path / "r.json", env=env)
    assert "evil TPU" in warned.stderr and "##[" not in warned.stderr, warned.stderr


def test_ci_inert():
    assert ci_inert("::error::x\n  ::warning::y\na::b ##[error]") == (
        ":\u200b:error::x\n  :\u200b:warning::y\na::b #\u200b#[error]")

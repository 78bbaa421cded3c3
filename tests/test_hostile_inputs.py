"""Hostile configs and JSON inputs, second round: deep nesting, compare JSON trusted beyond its version,
names of unknown encoding, an empty rule selection. Each is one line (file and field), never a traceback.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from xladiag.api import diagnose
from xladiag.cli import main
from xladiag.cli_compare import compare_main
from xladiag.errors import InputError, UsageError
from xladiag.report.json_schema import load_schema
from xladiag.report.schema_check import violation
from xladiag.text_safety import MAX_NESTING, check_nesting, clean_text

CPU_SAMPLE = Path(__file__).resolve().parent.parent / "sample_profiles" / "cpu_jax_train_step"
DEEP = 100_000


def run(*args):
    args = [str(a) for a in args]
    if args[:1] == ["compare"]:  # `diagnose compare` is compare_main (cli._Diagnose), which CliRunner calls directly
        return CliRunner().invoke(compare_main, args[1:], catch_exceptions=False)
    return CliRunner().invoke(main, args, catch_exceptions=False)


def _one_line(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diagnose: error:"), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def report_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "base.json"
    diagnose(CPU_SAMPLE).to_json(path)
    return path


# --- 1. nesting ---------------------------------------------------------------------------------------------

def test_nesting_scan_counts_structure_not_brackets_in_strings_or_comments():
    check_nesting('{"a": "' + "[" * 1000 + '"}', "f.json")
    check_nesting('x = "' + "[" * 1000 + '"\ny = \'{{{{\'\n# ' + "[" * 1000 + '\nz = """\n' + "{" * 500 + '"""\n',
                  "f.toml", "toml")
    check_nesting("[" * MAX_NESTING + "]" * MAX_NESTING, "f.json")  # the limit itself is fine
    with pytest.raises(InputError, match=r"^f\.toml: nested deeper than"):
        check_nesting("a = " + "{b = " * (MAX_NESTING + 1), "f.toml", "toml")


@pytest.mark.parametrize("where", ["chip-file", "baseline", "compare", "pyproject"])
def test_deep_nesting_is_one_input_error_naming_the_file(tmp_path, monkeypatch, report_json, where):
    monkeypatch.chdir(tmp_path)
    deep_json = "[" * DEEP + "]" * DEEP
    out = tmp_path / "out.json"
    if where == "chip-file":
        Path("chips.toml").write_text("[chip.x]\nname = " + deep_json + "\n")
        result, named = run(CPU_SAMPLE, "--chip-file", "chips.toml", "-o", out), "chips.toml"
    elif where == "baseline":
        Path("base.json").write_text(deep_json)
        result, named = run(CPU_SAMPLE, "--baseline", "base.json", "-o", out), "base.json"
    elif where == "compare":
        Path("deep.json").write_text(report_json.read_text()[:-2] + ', "deep": ' + deep_json + "}\n")
        result, named = run("compare", "deep.json", report_json, "-o", out), "deep.json"
    else:
        Path("pyproject.toml").write_text("[tool.xladiag]\nselect = " + "[" * DEEP + "\n")
        result, named = run(CPU_SAMPLE, "-o", out), "pyproject.toml"
    _one_line(result, 1, named, "nested deeper than")
    assert not out.exists()


# --- 2. compare JSON checked against the report schema -------------------------------------------------------

MUTATIONS = {
    "selection a string": (lambda d: d.update(selection="x"), "$.selection"),
    "ops of numbers": (lambda d: d.update(ops=[1, 2]), "$.ops[0]"),
    "a null finding": (lambda d: d.update(findings=[None]), "$.findings[0]"),
    "per_step_s a string": (lambda d: d["steps"].update(per_step_s="0.1"), "$.steps.per_step_s"),
    "an op time a string": (lambda d: d["ops"][1].update(total_time_s="3"), "$.ops[1].total_time_s"),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_compare_input_breaking_the_schema_is_one_line_with_its_json_path(tmp_path, report_json, name):
    mutate, json_path = MUTATIONS[name]
    data = json.loads(report_json.read_text())
    mutate(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    for args in (("compare", bad, report_json), ("compare", report_json, bad)):
        _one_line(run(*args, "--format", "json", "-o", tmp_path / "c.json"), 1, str(bad), f"{json_path}:")
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400, "NaN", "Infinity"])
def test_a_number_out_of_range_is_refused(tmp_path, report_json, number):
    text = report_json.read_text().replace('"step_s": ', f'"step_s": {number}, "_was": ', 1)
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    _one_line(run("compare", bad, report_json, "--format", "json", "-o", tmp_path / "c.json"), 1, "bad.json",
              "not finite")


def test_the_schema_check_agrees_with_jsonschema(report_json):
    jsonschema = pytest.importorskip("jsonschema")
    schema = load_schema("report")
    validator = jsonschema.Draft202012Validator(schema)
    data = json.loads(report_json.read_text())
    assert violation(data, schema) is None and validator.is_valid(data)
    rng = random.Random(7)
    leaves = _leaves(data)
    for value in ("x", 3, -1, 2.5, None, True, [], {}, [None]):
        for path in rng.sample(leaves, 40):
            broken = copy.deepcopy(data)
            _set(broken, path, value)
            assert (violation(broken, schema) is None) == validator.is_valid(broken), (path, value)


def _leaves(data, path=()):
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(data, list):
        return [p for i, v in enumerate(data[:3]) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _set(data, path, value):
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def test_a_baseline_json_breaking_the_schema_names_its_json_path(tmp_path):
    bad = tmp_path / "baseline.json"
    bad.write_text(json.dumps({"schema_version": 1, "findings": [{"key": "a::b"}, {"key": 3}]}))
    _one_line(run(CPU_SAMPLE, "--baseline", bad, "-o", tmp_path / "r.json"), 1, "baseline.json",
              "$.findings[1].key")


# --- 3. names of unknown encoding ----------------------------------------------------------------------------

def _capture_with_undecodable_names(tmp_path: Path) -> Path:
    root = os.fsencode(tmp_path / "cap")
    run_dir = root + b"/plugins/profile/run\xff"
    os.makedirs(run_dir)
    host = next((CPU_SAMPLE / "plugins" / "profile").glob("*/*.xplane.pb"))
    shutil.copy(host, run_dir + b"/host\xff.xplane.pb")
    return Path(os.fsdecode(root))


@pytest.mark.parametrize("fmt", ["json", "markdown", "html", "text"])
def test_undecodable_run_and_host_names_reach_every_format(tmp_path, fmt):
    capture = _capture_with_undecodable_names(tmp_path)
    out = tmp_path / f"report.{fmt}"
    result = run(capture, "--format", fmt, "-o", out)
    assert result.exit_code == 0, result.stderr
    text = out.read_bytes().decode("utf-8")  # strict: every character was encodable
    assert "run\ufffd" in text and (fmt == "text" or "host\ufffd" in text)  # text names the run only


def test_lone_surrogates_in_a_compare_json_reach_every_format_and_stderr(tmp_path, report_json):
    data = json.loads(report_json.read_text())
    data["headline"] += " \ud800"
    data["run"]["name"] = "run\udcff"
    data["ops"][0]["name"] = "op\ud800x"
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps(data))  # ensure_ascii: "\\ud800" escapes, as a crafted file would carry them
    for fmt in ("json", "markdown", "html"):
        out = tmp_path / f"c.{fmt}"
        result = run("compare", evil, report_json, "--format", fmt, "-o", out)
        assert result.exit_code == 0, result.stderr
        text = out.read_bytes().decode("utf-8")  # strict: every character was encodable
        assert fmt != "json" or "op\ufffdx" in text  # the other formats list only changed ops
        result.stderr.encode("utf-8")


def test_clean_text_replaces_each_lone_surrogate_once():
    assert clean_text(os.fsdecode(b"a\xffb") + "\ud800") == "a\ufffdb\ufffd"
    assert clean_text("plain é 🙂") == "plain é 🙂"


# --- 7. an empty selection ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["", " , "])
def test_an_empty_select_is_a_usage_error(tmp_path, value):
    out = tmp_path / "r.json"
    _one_line(run(CPU_SAMPLE, "--select", value, "--fail-on", "high", "-o", out), 2, "--select", "selects no rule")
    _one_line(run("compare", CPU_SAMPLE, CPU_SAMPLE, "--select", value, "-o", out), 2, "--select")
    assert not out.exists()


def test_an_empty_select_in_pyproject_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("pyproject.toml").write_text("[tool.xladiag]\nselect = []\n")
    _one_line(run(CPU_SAMPLE, "--fail-on", "high", "-o", "r.json"), 2, "pyproject.toml", "select", "selects no rule")
    assert not Path("r.json").exists()


@pytest.mark.parametrize("value", [[], "", ","])
def test_an_empty_select_keyword_names_the_keyword(value):
    with pytest.raises(UsageError, match=r"^select=.* selects no rule") as err:
        diagnose(CPU_SAMPLE, select=value)
    assert "--select" not in str(err.value)

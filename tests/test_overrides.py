"""Overrides for what is inferred: --program (which program is the step), --steps A:B, --host NAME.

Each changes the analysis as documented, against answers read independently of xladiag (the recording's
known_answers.json, the capture's own step table), and each shows as given, not inferred, in every format.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from builders.large_capture import multi_host_capture
from conftest import SAMPLES, diagnosed
from xladiag.api import diagnose
from xladiag.cli import main

MANY = SAMPLES / "jax_many_programs"
FSDP = SAMPLES / "jax_fsdp_tp_train"
KNOWN = {p["program_id"]: p for p in json.loads((MANY / "known_answers.json").read_text())["programs"]}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_program_picks_the_step_program_by_name_and_id():
    inferred = diagnose(MANY).analysis
    biggest = max(KNOWN.values(), key=lambda p: p["executions"] * p["execution_span_ms"]["mean"])
    assert inferred.choices["program"] == {"value": f"jit_dot({biggest['program_id']})", "source": "inferred"}

    given = diagnose(MANY, program="jit_dot(6)").analysis
    assert given.choices["program"] == {"value": "jit_dot(6)", "source": "given"}
    assert given.steps.count == KNOWN[6]["executions"] - 1  # its executions, the first one as warm-up
    assert given.step_s < inferred.step_s
    # By id alone, the same program.
    assert diagnose(MANY, program="6").analysis.steps.program_id == "6"


def test_steps_range_measures_exactly_those_executions():
    # Every execution of program 6 (steps 0, 1, 2): the mean of the spans the recording measured itself.
    a = diagnose(MANY, program="jit_dot(6)", steps="0:3").analysis
    assert a.steps.count == KNOWN[6]["executions"] and not a.steps.warmup_excluded
    assert a.step_s * 1e3 == pytest.approx(KNOWN[6]["execution_span_ms"]["mean"], abs=6e-4)
    assert a.choices["steps"] == {"value": "0:3", "source": "given"}
    one = diagnose(MANY, program="jit_dot(6)", steps="0").analysis
    assert one.steps.count == 1
    span = KNOWN[6]["execution_span_ms"]
    assert span["min"] - 6e-4 <= one.step_s * 1e3 <= span["max"] + 6e-4


def test_steps_on_annotated_steps_use_their_step_numbers():
    full = diagnosed(FSDP).analysis
    table = full.steps.table
    assert full.choices["steps"] == {"value": "1:3", "source": "inferred"}  # step 0 is the warm-up
    for numbers in ("0", "2:3", "0:2"):
        a = diagnosed(FSDP, steps=numbers).analysis
        first, _, stop = numbers.partition(":")
        wanted = range(int(first), int(stop) if stop else int(first) + 1)
        rows = table[table["step_num"].isin(wanted)]
        assert a.steps.count == len(wanted)
        assert a.step_s == pytest.approx(rows["duration_ps"].mean() / 1e12, rel=1e-12)
        assert a.choices["steps"]["source"] == "given"
        # Per-step op time follows the steps measured: the ops table is re-measured over them.
        assert set(a.device_steps["step"]) == set(rows["step"])


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    return multi_host_capture(tmp_path_factory.mktemp("hosts"), hosts=2, events_per_host=6_000, ops_per_step=120)


def test_host_reads_one_host_as_if_alone(two_hosts, tmp_path):
    logdir = two_hosts[0].parents[3]
    both = diagnose(logdir, workers=1).analysis
    one = diagnose(logdir, host="t1v-n-01", workers=1)
    assert both.choices["hosts"] == {"value": ["t1v-n-00", "t1v-n-01"], "source": "inferred"}
    assert one.analysis.choices["hosts"] == {"value": ["t1v-n-01"], "source": "given"}
    assert one.analysis.num_devices * 2 == both.num_devices
    alone = tmp_path / "plugins" / "profile" / "run"
    alone.mkdir(parents=True)
    shutil.copy(two_hosts[1], alone)
    solo = diagnose(tmp_path).to_dict()
    data = one.to_dict()
    for d in (data, solo):
        d.pop("run"), d.pop("choices")
    assert data == solo
    # Steps chosen on a multi-host run: the per-host workers measure the same steps as one process.
    ranged = diagnose(logdir, steps="2:4", workers=1).to_dict()
    assert ranged["steps"]["count"] == 2 and ranged == diagnose(logdir, steps="2:4", workers=2).to_dict()


@pytest.mark.parametrize("args,needle", [
    (("--program", "jit_nope"),
     "--program jit_nope: no such program in the capture; programs: jit_dot(10), jit_dot(8)"),
    (("--steps", "40:42"), "--steps 40:42: no such step; steps in this capture: 0:1"),
    (("--steps", "3:1"), "the end comes after the start"),
    (("--steps", "one"), "expected A:B"),
    (("--steps", "1 5"), "expected A:B"),  # not step 1 alone: the end needs its colon
    (("--host", "nohost"), "--host nohost: no such host in run 2000_01_01_00_00_00; hosts: cpu-host"),
])
def test_bad_values_are_one_usage_line_listing_the_choices(tmp_path, args, needle):
    result = run(MANY, "-o", tmp_path / "r.html", *args)
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines


def test_reports_say_given_or_inferred(tmp_path):
    out = tmp_path / "r.json"
    assert run(FSDP, "-q", "--format", "json", "-o", out, "--steps", "2:3").exit_code == 0
    data = json.loads(out.read_text())
    assert data["choices"]["steps"] == {"value": "2:3", "source": "given"}
    assert data["choices"]["hosts"] == {"value": ["cpu-host"], "source": "inferred"}
    md = tmp_path / "r.md"
    assert run(FSDP, "-q", "--format", "markdown", "-o", md, "--steps", "2:3").exit_code == 0
    assert "step numbers measured 2:3 (given)" in md.read_text()
    html = tmp_path / "r.html"
    assert run(FSDP, "-q", "-o", html, "--steps", "2:3").exit_code == 0
    text = html.read_text()
    assert "given (--steps)" in text and "inferred (override with --host)" in text

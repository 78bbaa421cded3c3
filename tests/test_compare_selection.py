"""`diagnose compare` with rule selection and capture overrides: the same selection on both sides (a JSON report's
own recorded one respected and reconciled), overrides passed to each capture; on a real recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import xladiag
from conftest import SAMPLES, diagnosed, report_data

FSDP = SAMPLES / "jax_fsdp_tp_train"
KEPT_RULE = "exposed-collective"


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "xladiag.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env)


@pytest.fixture(scope="module")
def full():
    """The recording's findings with every rule (several rules fire on it, the kept one among them)."""
    data = report_data(FSDP)
    rules = {f["rule"] for f in data["findings"]}
    assert KEPT_RULE in rules and len(rules) >= 3
    return data


@pytest.mark.slow
def test_a_json_written_with_select_against_the_full_capture_shows_nothing_appeared(full, tmp_path):
    selected = tmp_path / "selected.json"
    written = _cli(FSDP, "--format", "json", "-o", selected, "-q", "--select", KEPT_RULE)
    assert written.returncode == 0, written.stderr
    c = xladiag.compare(selected, FSDP)
    others = [f for f in full["findings"] if f["rule"] != KEPT_RULE]
    assert c.data["findings_summary"]["appeared"] == 0, c.findings
    assert set(c.findings["rule"]) == {KEPT_RULE} and (c.findings["status"] == "unchanged").all()
    chosen = c.data["selection"]
    assert chosen["sides_differ"] and chosen["findings_left_out"] == {"base": 0, "new": len(others)}
    assert KEPT_RULE not in chosen["rules_left_out"] and {f["rule"] for f in others} <= set(chosen["rules_left_out"])
    assert any("different rule selections" in w for w in c.data["warnings"])
    md = c.to_markdown()
    assert "different rule selections" in md and "Left out of both sides: rules " in md
    # the same selection on both sides: nothing to say
    same = xladiag.compare(selected, FSDP, select=KEPT_RULE)
    assert not same.data["selection"]["sides_differ"] and not any("rule selections" in w for w in same.data["warnings"])
    assert same.data["findings_summary"] == c.data["findings_summary"]


@pytest.mark.slow
def test_ignore_and_baseline_apply_to_both_sides(full, tmp_path):
    saved = tmp_path / "full.json"
    saved.write_text(json.dumps(full))
    dropped = next(f for f in full["findings"] if f["rule"] != KEPT_RULE)
    ignored = xladiag.compare(saved, FSDP, ignore=dropped["rule"])
    assert dropped["rule"] not in set(ignored.findings["rule"])  # not "disappeared" from the JSON side either
    assert ignored.data["findings_summary"]["disappeared"] == 0
    dropped_count = sum(f["rule"] == dropped["rule"] for f in full["findings"])
    assert ignored.data["selection"]["findings_left_out"]["base"] == dropped_count
    # a base written with a baseline: the accepted finding is not "appeared" in the new capture
    accepted = tmp_path / "accepted.txt"
    accepted.write_text(dropped["key"] + "\n")
    base = tmp_path / "base.json"
    assert _cli(FSDP, "--format", "json", "-o", base, "-q", "--baseline", accepted).returncode == 0
    c = xladiag.compare(base, FSDP)
    assert dropped["key"] not in set(c.findings["key"]) and c.data["findings_summary"]["appeared"] == 0
    assert c.data["selection"]["baseline_keys"] == 1 and c.data["selection"]["sides_differ"]


@pytest.mark.slow
def test_pyproject_selection_and_capture_overrides_reach_both_sides(full, tmp_path):
    (tmp_path / "pyproject.toml").write_text(f'[tool.xladiag]\nselect = ["{KEPT_RULE}"]\n')
    out = tmp_path / "c.json"
    run = _cli("compare", FSDP, FSDP, "--format", "json", "-o", out, "-q", "--steps", "2:3", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert set(f["rule"] for f in data["findings"]) == {KEPT_RULE} and not data["selection"]["sides_differ"]
    ranged = report_data(FSDP, steps="2:3")
    assert data["base"]["steps"] == data["new"]["steps"] == 1 != full["steps"]["count"]
    assert data["base"]["per_step_s"] == data["new"]["per_step_s"] == ranged["steps"]["per_step_s"]
    # a JSON side is read as written, and the comparison says so
    saved = tmp_path / "full.json"
    saved.write_text(json.dumps(full))
    mixed = xladiag.compare(saved, FSDP, steps="2:3")
    assert mixed.data["base"]["steps"] == full["steps"]["count"] and mixed.data["new"]["steps"] == 1
    assert any("JSON report, read as written: --steps" in w for w in mixed.data["warnings"])
    bad = _cli("compare", FSDP, FSDP, "--select", "no-such-rule")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown rule" in bad.stderr


def test_compare_markdown_stays_under_the_cap_and_says_the_cut(full, tmp_path):
    from xladiag.report.compare_markdown import MAX_LINE
    from xladiag.report.md_blocks import MAX_BYTES

    # Every op renamed to markup that escapes five-fold: all are new and removed, the tables at their widest.
    new = json.loads(json.dumps(full))
    in_step = [o for o in new["ops"] if o["in_step"]]
    new["ops"] = [dict(o, name=f"{'&' * 200}.{i}", tf_op=None, source="<" * 200) for i, o in enumerate(in_step * 4)]
    # and findings whose titles carry such names (a title quotes its main op)
    new["findings"] = [dict(f, key=f"{f['key']}{i}", title=f"{f['title']} {'&' * 400}")
                       for i, f in enumerate(full["findings"] * 10)]
    paths = [tmp_path / "b.json", tmp_path / "n.json"]
    for path, data in zip(paths, (full, new)):
        path.write_text(json.dumps(data))
    text = xladiag.compare(*paths).to_markdown()
    assert len(text.encode()) < MAX_BYTES and "Shortened to stay under GitHub's 65,536-character" in text
    assert max(len(ln) for ln in text.split("\n") if not ln.startswith("|")) <= MAX_LINE
    assert "Shortened" not in xladiag.compare(paths[0], paths[0]).to_markdown()


def test_one_gate_is_singular(tmp_path):
    saved = tmp_path / "r.json"
    diagnosed(FSDP).to_json(saved)
    md = xladiag.compare(saved, saved, fail_on_regression=0.05).to_markdown()
    assert "**The gate holds.**" in md and "All 1 gates" not in md
    report = diagnosed(FSDP).with_gates(min_mfu=0.99)
    md = report.to_markdown()
    assert "**1 of 1 gate tripped**" in md and "gates tripped" not in md
    assert "1 of 1 gate tripped" in repr(report)

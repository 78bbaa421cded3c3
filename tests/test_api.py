"""The Python API: diagnose() in-process on a real capture, and profile() around real JAX code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import xladiag.api as api
from xladiag.errors import InputError, UsageError, XladiagError
from xladiag.report import model
from xladiag.rules.base import Finding

ROOT = Path(__file__).resolve().parents[1]
CPU_SAMPLE = ROOT / "sample_profiles" / "cpu_jax_train_step"


@pytest.fixture(scope="module")
def cpu_report():
    return api.diagnose(CPU_SAMPLE)


def test_diagnose_returns_a_report_with_measured_collectives(cpu_report):
    r = cpu_report
    assert isinstance(r, model.Report) and isinstance(r, api.Report)
    # The short table to read, the op name first; every column a call away.
    assert isinstance(r.ops, pd.DataFrame) and list(r.ops.columns) == list(model.OPS_COLUMNS)
    assert r.ops["op_name"].tolist() == r.analysis.ops["op_name"].tolist()
    full = r.ops_frame(all_columns=True)
    assert full.columns[0] == "op_name" and set(full.columns) == set(r.analysis.ops.columns)
    # Collectives of the sharded train step, with their measured time recomputed from the events:
    # an op's time per step = its event durations summed / measured device-steps (8 devices x 4 steps).
    ops = r.ops_frame(all_columns=True)
    collectives = ops[ops["collective_kind"].notna() & ops["in_step"]]
    assert set(collectives["collective_kind"]) >= {"all-gather", "reduce-scatter", "all-reduce"}
    device_steps = len(r.analysis.steps.after_warmup)
    assert device_steps == 8 * 4
    events = r.analysis.step_ops
    for row in collectives.head(5).itertuples():
        mine = events[(events["op_name"] == row.op_name) & (events["module"] == row.module)]
        assert row.measured_s_per_step == pytest.approx(mine["duration_ps"].sum() / 1e12 / device_steps, rel=1e-9)
    share = collectives["measured_s_per_step"].sum() / r.analysis.steps.mean_s
    assert 0.5 < share < 1.0  # synchronous CPU collectives: most of the step
    assert r.summary["devices"] == 8 and r.summary["steps"] == 4


def test_findings_are_ranked_findings(cpu_report):
    findings = cpu_report.findings
    assert all(isinstance(f, Finding) for f in findings)
    savings = [f.est_savings_s_per_step for f in findings]
    assert savings == sorted(savings, reverse=True)
    assert cpu_report.headline.startswith("CPU")


def test_renderers_from_the_report(cpu_report, tmp_path):
    out = tmp_path / "r.html"
    text = cpu_report.to_html(out)
    assert out.read_text(encoding="utf-8") == text and 'id="roofline"' in text
    data = json.loads(cpu_report.to_json())
    assert data["steps"]["count"] == 4 and len(data["ops"]) == len(cpu_report.ops)
    assert [f["rule"] for f in data["findings"]] == [f.rule for f in cpu_report.findings]
    assert cpu_report.to_dict()["schema_version"] == 2
    md = cpu_report.to_markdown(tmp_path / "r.md")
    assert md.startswith("# xladiag report") and (tmp_path / "r.md").read_text(encoding="utf-8") == md


def test_diagnose_hlo_dump_only(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_report_json import HLO_TEXT

    (tmp_path / "module_0001.jit_f.after_optimizations.txt").write_text(HLO_TEXT)
    r = api.diagnose(hlo_dir=tmp_path, chip="v6e")
    assert r.analysis.platform == "hlo" and not r.analysis.measured
    dot = r.ops_frame(all_columns=True).set_index("op_name").loc["dot.1"]
    # 2·1024³ FLOPs against 918 TFLOP/s vs 6 MiB (3 bf16 1024² arrays) against 1.64 TB/s: ~2.3 µs vs ~3.8 µs.
    assert dot["predicted_s"] == pytest.approx(max(2 * 1024**3 / r.analysis.chip.peak_bf16_flops_per_s,
                                                   dot["hbm_bytes"] / r.analysis.chip.hbm_bytes_per_s))


@pytest.mark.slow
def test_import_does_not_need_jax():
    code = "import sys, xladiag.api, xladiag; assert 'jax' not in sys.modules, 'jax imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)


@pytest.mark.slow
def test_profile_wraps_a_real_jax_trace(tmp_path):
    jax = pytest.importorskip("jax", reason="profile() needs JAX")
    import jax.numpy as jnp

    step = jax.jit(lambda x: jnp.tanh(x @ x).sum())
    x = jnp.ones((128, 128), jnp.float32)
    step(x).block_until_ready()  # compile outside the trace
    with api.profile(tmp_path, steps=4) as session:
        for i in range(4):
            with session.step(i):
                step(x).block_until_ready()
    assert session.run and (tmp_path / "plugins" / "profile" / session.run).is_dir()
    r = session.report
    assert isinstance(r, api.Report) and r.analysis.platform == "cpu"
    # session.step annotates the 4 steps (StepTraceAnnotation): they are the steps; the first is the warm-up.
    assert r.analysis.steps.annotated and r.analysis.steps.count == 3
    assert r.analysis.steps.after_warmup["step_num"].tolist() == [1, 2, 3]
    assert session.warnings == []
    assert len(r.ops) >= 1 and (r.ops_frame(all_columns=True)["occurrences"] >= 3).any()
    assert r.analysis.steps.mean_s > 0


@pytest.mark.slow
def test_profile_does_not_diagnose_when_the_block_fails(tmp_path):
    pytest.importorskip("jax", reason="profile() needs JAX")
    session = api.profile(tmp_path)
    with pytest.raises(ZeroDivisionError):
        with session:
            1 / 0  # noqa: B018 (an error inside the session)
    assert session.report is None


@pytest.mark.slow
def test_profile_refuses_an_old_run_when_the_trace_wrote_none(tmp_path, monkeypatch):
    """A profiler that writes nothing must not get yesterday's run diagnosed in its place."""
    jax = pytest.importorskip("jax", reason="profile() needs JAX")
    import contextlib

    old = tmp_path / "plugins" / "profile" / "2024_01_01_00_00_00"
    old.mkdir(parents=True)
    (old / "host.xplane.pb").write_bytes(b"")
    os.utime(old, (1_700_000_000, 1_700_000_000))
    monkeypatch.setattr(jax.profiler, "trace", lambda logdir: contextlib.nullcontext())
    session = api.profile(tmp_path)
    with pytest.raises(InputError, match="wrote no new run folder"):
        with session:
            pass
    assert session.report is None and session.run is None


def test_written_run_picks_only_folders_the_trace_touched(tmp_path):
    root = tmp_path / "plugins" / "profile"
    for name, mtime in (("old_a", 1_000), ("old_b", 2_000)):
        (root / name).mkdir(parents=True)
        os.utime(root / name, (mtime, mtime))
    before = api._run_dirs(tmp_path)
    assert before == {"old_a": 1_000.0, "old_b": 2_000.0}
    with pytest.raises(InputError, match="2 older run"):
        api._written_run(tmp_path, before, api._run_dirs(tmp_path))
    # A trace that reuses an old folder (same second) changes its mtime: that folder counts, the newer old one not.
    (root / "old_a" / "host.xplane.pb").write_bytes(b"")
    os.utime(root / "old_a", (1_500, 1_500))
    assert api._written_run(tmp_path, before, api._run_dirs(tmp_path)) == "old_a"
    # A new folder wins over old ones, whatever the clocks say.
    (root / "new").mkdir()
    os.utime(root / "new", (500, 500))
    os.utime(root / "old_a", (1_000, 1_000))
    assert api._written_run(tmp_path, before, api._run_dirs(tmp_path)) == "new"


def test_package_root_exports_the_api():
    import xladiag

    assert xladiag.diagnose is api.diagnose and xladiag.profile is api.profile and xladiag.Report is api.Report


def test_every_format_of_the_table_renders_through_the_api(cpu_report, tmp_path):
    from xladiag.report.render import FORMATS

    for name, fmt in FORMATS.items():
        out = tmp_path / f"r.{fmt.extension}"
        text = cpu_report.render(name, out)
        assert text and out.read_text(encoding="utf-8") == text
        assert getattr(cpu_report, f"to_{name}")() == text  # the named shortcut of each format
    with pytest.raises(UsageError, match="unknown report format 'pdf'; one of: html, markdown, json"):
        cpu_report.render("pdf")


def test_repr_is_one_short_line(cpu_report):
    text = repr(cpu_report)
    assert len(text) < 400 and "\n" not in text
    assert text.startswith(f"<xladiag Report: {len(cpu_report.findings)} findings; CPU")


def test_api_raises_the_documented_error_root(tmp_path):
    with pytest.raises(XladiagError) as info:
        api.diagnose(tmp_path)
    assert isinstance(info.value, InputError) and info.value.exit_code == 1
    assert "\n" not in str(info.value)


def test_every_error_class_is_an_xladiag_error():
    """Callers catch one root: every exception class the package defines derives from XladiagError."""
    import importlib
    import inspect
    import pkgutil

    import xladiag

    skip = ("xladiag.cli", "xladiag.tests", "xladiag.benchmarks", "xladiag.sample_profiles")
    names = [m.name for m in pkgutil.walk_packages(xladiag.__path__, "xladiag.") if not m.name.startswith(skip)]
    classes = {obj for name in names for _, obj in inspect.getmembers(importlib.import_module(name), inspect.isclass)
               if issubclass(obj, BaseException) and obj.__module__.startswith("xladiag.")}
    assert len(classes) >= 10  # the root, its two kinds and one per stage at least
    assert all(issubclass(c, XladiagError) for c in classes), [c for c in classes if not issubclass(c, XladiagError)]

"""diagnose history and --record: a series of runs built from a real sample's JSON report (its per-step times
scaled run by run), change points by the noise test, the SQLite store, the three renderings and the gate."""

from __future__ import annotations

import json
import sqlite3

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import CPU_SAMPLE, SAMPLES, report_data
from xladiag.api import history
from xladiag.cli import main
from xladiag.errors import InputError
from xladiag.history.changes import change_points
from xladiag.history.series import point_of
from xladiag.history.store import STORE_VERSION, load, record
from xladiag.report.json_schema import load_schema

SAMPLE = SAMPLES / "jax_input_bound"  # 4 measured steps, 6.5 % step-to-step spread
NOISE = (1.0, 1.008, 0.994, 1.003, 0.996)  # run-to-run factors: a fraction of the steps' own spread
SLOWDOWN = 1.10


def scaled(report: dict, factor: float, name: str | None = None) -> dict:
    """The report as if its run were ``factor`` times slower (every step and the mean step)."""
    out = json.loads(json.dumps(report))
    out["steps"]["per_step_s"] = [s * factor for s in report["steps"]["per_step_s"]]
    out["step_s"] = report["step_s"] * factor
    out["mfu"] = report["mfu"] / factor
    for op in out["ops"]:
        if op.get("measured_s_per_step") is not None:
            op["measured_s_per_step"] *= factor
    if name is not None:
        out["run"]["name"] = name
    return out


def series(factors, sample=SAMPLE) -> list[dict]:
    report = report_data(sample)
    return [scaled(report, f, f"2024_05_0{i + 1}_12_00_00") for i, f in enumerate(factors)]


def slowed(from_run: int = 4) -> list[float]:
    return [f * (SLOWDOWN if i + 1 >= from_run else 1.0) for i, f in enumerate(NOISE)]


@pytest.fixture()
def slow_store(tmp_path):
    db = tmp_path / "runs.db"
    for i, report in enumerate(series(slowed())):
        record(db, point_of(report, f"run{i + 1}", "capture"), recorded_at=f"2024-05-0{i + 1}T13:00:00+00:00")
    return db


def test_one_slowdown_from_run_4_is_one_change_point_there(slow_store):
    result = history([slow_store])
    changes = result.data["change_points"]
    assert [c["index"] for c in changes] == [3]
    (change,) = changes
    assert change["label"] == "run4" and change["direction"] == "slower"
    assert change["change"] == pytest.approx(0.10, abs=0.01)
    assert change["noise_test"]["beyond_noise"] and change["run_test"]["beyond_noise"]
    assert (change["runs_before"], change["runs_after"]) == (3, 2)


@pytest.mark.parametrize("from_run", [2, 3])
def test_the_change_point_follows_the_slowdown(from_run):
    points = [point_of(r, f"run{i + 1}", "json report") for i, r in enumerate(series(slowed(from_run)))]
    assert [c["index"] for c in change_points(points)] == [from_run - 1]


def test_noise_only_has_no_change_point():
    points = [point_of(r, f"run{i + 1}", "json report") for i, r in enumerate(series(NOISE))]
    assert change_points(points) == []
    # Nor in noisier series: each step jittered by 1 %, each run by 1 % (seeded).
    rng = np.random.default_rng(7)
    report = report_data(SAMPLE)
    found = []
    for _ in range(20):
        reports = [scaled(report, 1 + rng.normal(0, 0.01)) for _ in range(5)]
        for r in reports:
            r["steps"]["per_step_s"] = [s * (1 + rng.normal(0, 0.01)) for s in r["steps"]["per_step_s"]]
        found += change_points([point_of(r, "", "json report") for r in reports])
    assert found == []


def test_a_slowdown_within_the_steps_own_spread_is_not_a_change_point():
    """cpu_jax_train_step's steps vary by 13 %: compare's rule calls a 10 % shift of them within noise."""
    points = [point_of(r, "", "json report") for r in series(slowed(), CPU_SAMPLE)]
    assert change_points(points) == []


def test_store_round_trips(tmp_path):
    db = tmp_path / "runs.db"
    reports = series(slowed())
    points = [point_of(r, f"run{i + 1}", "capture") for i, r in enumerate(reports)]
    ids = [record(db, p, recorded_at="2024-05-01T00:00:00+00:00") for p in points]
    assert ids == [1, 2, 3, 4, 5]
    back = load(db)
    assert back == [{**p, "recorded_at": "2024-05-01T00:00:00+00:00"} for p in points]
    assert back[0]["ops"] and back[0]["findings"]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(STORE_VERSION,)]
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (5,)
        kinds = dict(con.execute("SELECT kind, count(*) FROM items GROUP BY kind").fetchall())
    assert kinds == {"op": 5 * len(points[0]["ops"]), "finding": 5 * len(points[0]["findings"])}
    # The history of the store is the history of the reports it was recorded from.
    json_paths = []
    for i, r in enumerate(reports):
        json_paths.append(tmp_path / f"run{i + 1}.json")
        json_paths[-1].write_text(json.dumps(r), encoding="utf-8")
    from_store, from_json = history([db]).data, history(json_paths).data
    assert from_store["change_points"] == [{**c, "label": f"run{c['index'] + 1}"} for c in from_json["change_points"]]
    assert from_store["top_ops"] == from_json["top_ops"]


def test_store_refuses_what_it_cannot_read(tmp_path):
    newer = tmp_path / "newer.db"
    record(newer, point_of(series(NOISE)[0], "a", "capture"))
    with sqlite3.connect(newer) as con:
        con.execute("UPDATE schema_version SET version = ?", (STORE_VERSION + 1,))
    with pytest.raises(InputError, match=r"newer\.db: schema_version: .*newer than this xladiag"):
        load(newer)
    text = tmp_path / "notes.db"
    text.write_text("not a database\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"notes\.db: not an xladiag run store"):
        record(text, point_of(series(NOISE)[0], "a", "capture"))


def test_runs_are_ordered_by_run_time_unless_given_order(tmp_path):
    reports = series(slowed())
    paths = []
    for i in (4, 0, 3, 1, 2):  # given shuffled; the run folder names hold the times
        paths.append(tmp_path / f"run{i + 1}.json")
        paths[-1].write_text(json.dumps(reports[i]), encoding="utf-8")
    by_time = history(paths).data
    assert [r["label"] for r in by_time["runs"]] == [str(tmp_path / f"run{i}.json") for i in range(1, 6)]
    assert [c["index"] for c in by_time["change_points"]] == [3]
    given = history(paths, given_order=True).data
    assert [r["label"] for r in given["runs"]] == [str(p) for p in paths]


def test_renderings(slow_store):
    result = history([slow_store], fail_on_regression=0.05)
    data = result.to_dict()
    jsonschema.Draft202012Validator(load_schema("history")).validate(data)
    assert data["history_schema_version"] == 1 and data["regression"]["regressed"]
    broken = {**data, "change_points": [{**data["change_points"][0], "direction": "sideways"}]}
    assert not jsonschema.Draft202012Validator(load_schema("history")).is_valid(broken)
    page = result.render("html")
    assert page.count("<svg") == 2 + len(data["top_ops"]) + len(data["top_findings"])
    assert "http" not in page.replace("https://", "") and "<script" not in page and "stroke-dasharray" in page
    markdown = result.render("markdown")
    assert "### Change points" in markdown and "| 4 | run4 |" in markdown


def test_cli_record_then_history_gate(tmp_path):
    db = tmp_path / "runs.db"
    runner = CliRunner()
    for _ in range(2):
        done = runner.invoke(main, [str(CPU_SAMPLE), "-o", str(tmp_path / "r.json"), "-q", "--record", str(db)])
        assert done.exit_code == 0, done.output
    assert len(load(db)) == 2 and load(db)[0]["label"] == str(CPU_SAMPLE)
    for i, report in enumerate(series(slowed())):
        (tmp_path / f"run{i + 1}.json").write_text(json.dumps(report), encoding="utf-8")
    runs = [str(tmp_path / f"run{i}.json") for i in range(1, 6)]
    out = tmp_path / "h.md"
    tripped = runner.invoke(main, ["history", *runs, "--format", "markdown", "-o", str(out), "-q",
                                   "--fail-on-regression", "5%"])
    assert tripped.exit_code == 3 and "gate: regression" in tripped.stderr
    passed = runner.invoke(main, ["history", *runs, "-o", str(tmp_path / "h.html"), "-q",
                                  "--fail-on-regression", "15%"])
    assert passed.exit_code == 0, passed.output
    refused = runner.invoke(main, [str(CPU_SAMPLE), "-o", str(tmp_path / "r2.json"), "--record", runs[0]])
    assert refused.exit_code == 1 and "not an xladiag run store" in refused.stderr


def test_profile_text_is_escaped_and_an_empty_store_refused(tmp_path):
    db = tmp_path / "runs.db"
    report = series(NOISE)[0]
    report["findings"][0]["title"] = "<img src=x onerror=alert(1)> | **bold**"
    for name in ("<script>a</script>", "b"):
        record(db, point_of(report, name, "capture"))
    result = history([db])
    page, markdown = result.render("html"), result.render("markdown")
    assert "<script>" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert "<img" not in markdown and "\\*\\*bold\\*\\*" in markdown
    assert result.headline.startswith("2 runs,")
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # an empty file: no tables yet
    record(empty, point_of(report, "x", "capture"))
    with sqlite3.connect(empty) as con:
        con.execute("DELETE FROM items")
        con.execute("DELETE FROM runs")
    with pytest.raises(InputError, match=r"empty\.db: runs: no run recorded"):
        history([empty])


def test_an_older_store_is_migrated_forward_keeping_its_runs(tmp_path, monkeypatch):
    from xladiag.history import store

    db = tmp_path / "runs.db"
    point = point_of(series(NOISE)[0], "a", "capture")
    record(db, point, recorded_at="t0")
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, "ALTER TABLE runs ADD COLUMN note TEXT;"])
    monkeypatch.setattr(store, "STORE_VERSION", len(store.MIGRATIONS))
    record(db, point, recorded_at="t1")
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT version FROM schema_version").fetchone() == (STORE_VERSION + 1,)
        assert "note" in [row[1] for row in con.execute("PRAGMA table_info(runs)")]
    assert load(db) == [{**point, "recorded_at": "t0"}, {**point, "recorded_at": "t1"}]
    # A migration that fails leaves the store as it was, and says which step.
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, "ALTER TABLE nowhere ADD COLUMN x TEXT;"])
    monkeypatch.setattr(store, "STORE_VERSION", len(store.MIGRATIONS))
    with pytest.raises(InputError, match=rf"schema_version: migrating the store to version {STORE_VERSION + 2}"):
        load(db)
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT version FROM schema_version").fetchone() == (STORE_VERSION + 1,)


@pytest.mark.parametrize("factor", [1.05, 1.2])
def test_two_runs_change_as_compare_says(factor):
    from xladiag.compare.noise import welch

    base, new = series((1.0, factor))
    points = [point_of(base, "base", "json report"), point_of(new, "new", "json report")]
    verdict = welch(np.array(base["steps"]["per_step_s"]), np.array(new["steps"]["per_step_s"])).beyond_noise
    assert verdict == (factor == 1.2)  # 5 % is within this sample's step-to-step spread, 20 % is not
    assert [c["index"] for c in change_points(points)] == ([1] if verdict else [])


def test_a_damaged_store_is_one_error_naming_it(tmp_path):
    db = tmp_path / "runs.db"
    point = point_of(series(NOISE)[0], "a", "capture")
    record(db, point)
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE items")
    with pytest.raises(InputError, match=r"runs\.db: runs: not readable as an xladiag run store"):
        load(db)
    with pytest.raises(InputError, match=r"runs\.db: runs: cannot append"):
        record(db, point)
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)  # the failed append left nothing


def test_markdown_shows_the_first_and_the_last_runs_of_a_long_series(tmp_path):
    from xladiag.report.history_markdown import SHOWN_RUNS

    db = tmp_path / "runs.db"
    report = series(NOISE)[0]
    for i in range(SHOWN_RUNS + 8):
        record(db, point_of(scaled(report, 1.0 + 0.001 * (i % 3)), f"r{i + 1}", "capture"), recorded_at=f"t{i:03d}")
    result = history([db])
    markdown = result.render("markdown")
    runs_table = markdown.split("### Runs")[1].split("###")[0]
    rows = [line for line in runs_table.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    assert [row.split(" | ")[1] for row in rows] == ["r1", *[f"r{i}" for i in range(10, SHOWN_RUNS + 9)]]
    assert len(result.to_dict()["runs"]) == SHOWN_RUNS + 8
    ops_header = markdown.split("### Top ops")[1].splitlines()[2]
    assert ops_header.count("|") == SHOWN_RUNS + 2

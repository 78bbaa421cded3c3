"""The benchmark's smoke mode (CI): every command runs, the table has its rows, and loose bounds hold.

The real table (1M, 5M, 16 hosts) runs outside CI: ``python benchmarks/bench_diagnose.py``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("psutil")
pytest.importorskip("xprof")

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_diagnose.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_diagnose", _BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_benchmark_prints_the_table_within_loose_bounds(tmp_path, capsys):
    bench = _bench()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- benchmark:start -->\nold\n<!-- benchmark:end -->\n\nafter\n")
    assert bench.main(["--smoke", "--json", str(tmp_path / "r.json"), "--captures", str(tmp_path / "c"),
                       "--readme", str(readme)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].startswith("| capture | xprof")
    assert "20k events" in table and "2 hosts × 10k events" in table and "Machine: " in table
    assert "| GPU 20k events" in table
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    for row in rows:
        for key in ("xprof", "floor", "json", "html"):
            assert "error" not in row[key], (row["label"], key, row[key])
            assert row[key]["wall_s"] > 0 and row[key]["peak_rss_bytes"] > 10 * 2**20
        # Loose: on captures this small interpreter start-up dominates both sides.
        for key in ("json", "html"):
            assert row[key]["peak_rss_bytes"] < 4 * row["xprof"]["peak_rss_bytes"]
            assert row[key]["wall_s"] < 60
        # The floor parses the same bytes and nothing else: it takes less CPU than any full run.
        assert row["floor"]["cpu_s"] < min(row["json"]["cpu_s"], row["xprof"]["cpu_s"])
        assert row["events"] >= (2 * 10_000 if "hosts" in row["label"] else 20_000)
    assert "| parse floor wall / RSS (CPU s) |" in table and "events/s per core" in table
    assert (tmp_path / "report.json").exists() is False  # outputs stay in the benchmark's temp folder
    text = readme.read_text()
    assert "old" not in text and table.strip().splitlines()[0] in text and text.endswith("after\n")
    # xprof's cache never stays behind in the capture folders.
    assert not list((tmp_path / "c").glob("*/plugins/profile/*/*.op_stats*.pb"))


@pytest.mark.slow
def test_smoke_dask_row_reports_every_process(tmp_path, capsys):
    pytest.importorskip("distributed")
    bench = _bench()
    assert bench.main(["--smoke", "--rows", "", "--dask", "2x10k", "--json", str(tmp_path / "r.json"),
                       "--captures", str(tmp_path / "c")]) == 0
    table = capsys.readouterr().out
    assert "on a LocalCluster of 2 workers" in table and "| Dask worker 2 " in table
    assert "| capture | xprof" not in table  # --rows '' runs no other row
    dask = json.loads((tmp_path / "r.json").read_text())["dask"]
    assert "error" not in dask, dask
    assert len(dask["worker_rss_bytes"]) == 2 and dask["alone_rss_bytes"] > 10 * 2**20
    # A worker that read a host grew past what it held idle; loose bounds against the host alone.
    assert max(dask["worker_rss_bytes"]) > max(dask["worker_idle_rss_bytes"])
    assert max(dask["worker_rss_bytes"]) < 4 * dask["alone_rss_bytes"]
    assert 10 * 2**20 < dask["main_rss_bytes"] < 4 * dask["alone_rss_bytes"]

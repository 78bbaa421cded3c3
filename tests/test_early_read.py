"""The command starts decoding a large single-host capture before it imports the analysis (parsers.early_read):
the parse takes those workers over and the tables are the ones a plain read gives; what nobody claims is
stopped; another file, another process or an ambiguous log dir never takes them."""

from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest

from xladiag.parsers import early_read, plane_queue
from xladiag.parsers import xplane as xplane_module
from xladiag.parsers.xplane import read_xspace

# The forked workers only decode planes: JAX, imported by other tests of this process, never runs there.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


@pytest.fixture
def small_is_large(monkeypatch):
    """The test captures are small: read them as the command reads a large one (workers, early start)."""
    monkeypatch.setattr(early_read, "_EARLY_BYTES", 0)
    monkeypatch.setattr(xplane_module, "_PARALLEL_BYTES", 0)
    monkeypatch.setattr(early_read, "fork_is_safe", lambda: True)  # JAX is imported by other tests here
    monkeypatch.setattr(early_read, "capped_workers", lambda asked, work: max(1, min(asked or 2, 2, work)))


def _same_tables(a, b) -> None:
    for name in ("planes", "lines", "events", "event_stats", "event_metadata"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.plane_stats == b.plane_stats and a.hlo_protos == b.hlo_protos
    assert a.anomalies == b.anomalies and a.fingerprint == b.fingerprint


@pytest.mark.parametrize("capture", ["tpu_xplane", "gpu_xplane"])
def test_the_parse_takes_over_the_early_workers_and_gets_the_same_tables(request, capture, small_is_large,
                                                                         monkeypatch):
    path = request.getfixturevalue(capture)
    plain = read_xspace(path, workers=1)
    claimed = []
    monkeypatch.setattr(xplane_module, "claim", lambda p: claimed.append(early_read.claim(p)) or claimed[-1])
    with early_read.reading_early(path, None):
        started = early_read._STARTED
        assert started is not None and started.queue.futures  # a worker is decoding already
        early = read_xspace(path)
        assert early_read._STARTED is None  # taken once
    assert claimed and claimed[0] is not None and claimed[0][2] is started.queue
    assert started.queue.taken.value == len(started.layout.planes)  # every plane handed out once
    _same_tables(plain, early)


def test_an_unclaimed_start_is_stopped_with_its_workers(tpu_xplane, small_is_large):
    with early_read.reading_early(tpu_xplane, None):
        pool = early_read._STARTED.queue.pool
        processes = list(pool._processes.values())
    assert early_read._STARTED is None and plane_queue._RUNNING is None
    for process in processes:
        process.join(timeout=10)
        assert not process.is_alive()


def test_a_read_of_another_file_or_in_another_process_does_not_take_them(tpu_xplane, gpu_xplane, small_is_large):
    with early_read.reading_early(tpu_xplane, None):
        assert early_read.claim(gpu_xplane) is None  # another file
        started = early_read._STARTED
        started.pid = os.getpid() + 1  # as a forked child sees the record
        assert early_read.claim(tpu_xplane) is None
        started.pid = os.getpid()
        _same_tables(read_xspace(tpu_xplane, workers=1), read_xspace(tpu_xplane))


def test_only_one_unambiguous_host_file_starts_early(tpu_xplane, tmp_path, small_is_large):
    run = tmp_path / "logs" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    shutil.copy(tpu_xplane, run / "h0.xplane.pb")
    for given in (tmp_path / "logs", run, run / "h0.xplane.pb"):
        with early_read.reading_early(given, None):
            assert early_read._STARTED is not None, given
    shutil.copy(tpu_xplane, run / "h1.xplane.pb")  # two hosts: the multi-host path reads them, not this
    for given, workers in ((tmp_path / "logs", None), (run / "h0.xplane.pb", 1), ("gs://b/x.xplane.pb", None)):
        with early_read.reading_early(given, workers):
            assert early_read._STARTED is None, given


def test_a_damaged_file_is_left_to_the_parse_to_report(tmp_path, small_is_large):
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(b"\x0a\xff\xff\xff\x0f")  # a plane longer than the file
    with early_read.reading_early(path, None):
        assert early_read._STARTED is None
        with pytest.raises(xplane_module.XPlaneError, match="bad.xplane.pb"):
            read_xspace(path)


"""Every input file is a regular file within one read limit (parsers/input_files.py): a capture symlinked to
/dev/zero, a FIFO, ``--chip-file /dev/zero`` and an oversize file are one-line errors naming the file, at once."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from xladiag.analyzer.chips.catalog import ChipCatalogError, load_catalog
from xladiag.config import read_baseline
from xladiag.errors import InputError, UsageError
from xladiag.parsers.hlo_text import parse_hlo_file
from xladiag.parsers.input_files import LIMIT_ENV, read_input_bytes
from xladiag.parsers.report_json import read_report_json
from xladiag.parsers.xplane import XPlaneError, read_xspace


def _within(seconds: float, fn):
    """``fn()``'s exception, failing the test (not hanging it) when it takes longer than ``seconds``."""
    out = {}

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["exc"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"
    return out.get("exc")


def _one_line(exc, *words):
    assert exc is not None and "\n" not in str(exc), exc
    for word in words:
        assert word in str(exc), exc


@pytest.fixture
def dev_zero_link(tmp_path) -> Path:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    link = tmp_path / "host.xplane.pb"
    link.symlink_to("/dev/zero")
    return link


@pytest.fixture
def fifo(tmp_path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs")
    path = tmp_path / "pipe.xplane.pb"
    os.mkfifo(path)
    return path


def test_a_capture_symlinked_to_dev_zero_is_refused(dev_zero_link):
    exc = _within(10, lambda: read_xspace(dev_zero_link))
    assert isinstance(exc, XPlaneError)
    _one_line(exc, str(dev_zero_link), "character device")


def test_a_fifo_is_never_opened(fifo):
    for read in (read_xspace, parse_hlo_file, lambda p: read_report_json(p, 1), read_baseline, load_catalog):
        exc = _within(10, lambda read=read: read(fifo))
        assert isinstance(exc, InputError | OSError), exc
        _one_line(exc, str(fifo), "FIFO")


def test_chip_file_dev_zero_is_one_line(dev_zero_link):
    exc = _within(10, lambda: load_catalog(dev_zero_link))
    assert isinstance(exc, ChipCatalogError)
    _one_line(exc, str(dev_zero_link), "character device")


def test_one_limit_for_every_input_file(tmp_path, monkeypatch, tpu_xplane):
    """Over the limit: refused before reading, saying the limit and how to raise it; under it: read."""
    toml = tmp_path / "chips.toml"
    toml.write_text("# " + "x" * 200 + "\n")
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"schema_version": 1, "ops": [], "pad": "x" * 200}))
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("k\n" * 200)
    hlo = tmp_path / "m.after_optimizations.txt"
    hlo.write_text("HloModule m\n" + "x" * 200)
    monkeypatch.setenv(LIMIT_ENV, "100")
    for path, read in ((toml, load_catalog), (report, lambda p: read_report_json(p, 1)), (baseline, read_baseline),
                       (hlo, parse_hlo_file), (tpu_xplane, read_xspace)):
        with pytest.raises((InputError, OSError)) as err:
            read(path)
        _one_line(err.value, str(path), "read limit of 100 bytes", LIMIT_ENV)
    monkeypatch.setenv(LIMIT_ENV, str(os.path.getsize(report)))
    assert read_report_json(report, 1)["ops"] == []
    monkeypatch.setenv(LIMIT_ENV, "lots")
    with pytest.raises(UsageError, match=LIMIT_ENV):
        read_input_bytes(report)


def test_a_file_that_grows_while_read_stops_at_the_limit(tmp_path, monkeypatch):
    """The read is bounded by the limit, not by what the file turns out to hold."""
    path = tmp_path / "grows.json"
    path.write_bytes(b"x" * 50)
    monkeypatch.setenv(LIMIT_ENV, "100")
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: (path.write_bytes(b"x" * 5000), real_fstat(fd))[1])
    with pytest.raises(OSError, match="read limit of 100 bytes"):
        read_input_bytes(path)


def test_diagnose_names_a_special_file_given_as_the_capture(dev_zero_link, fifo):
    """Given directly (not found in a folder): the kind of file, not 'no capture found', and nothing opened."""
    from xladiag.parsers.discovery import discover

    for path in (dev_zero_link, fifo):
        exc = _within(10, lambda path=path: discover(path))
        assert isinstance(exc, InputError), exc
        _one_line(exc, str(path), "not a regular file")

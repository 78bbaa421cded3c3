"""Hostile xplane files: lengths checked before allocation, memory that does not follow garbage,
one-line errors naming the file (exit 1 through the CLI), never a traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from builders import scenarios
from builders.xspace_encoder import _field_bytes as _field  # the builder's encoder
from builders.xspace_encoder import _varint_bytes as _varint
from xladiag.cli import main
from xladiag.parsers import xplane_planes
from xladiag.parsers.xevent_columns import read_line_events
from xladiag.parsers.xplane import XPlaneError, read_xspace
from xladiag.parsers.xspace_schema import XPlane


def _capture_bytes() -> bytes:
    builder, _ = scenarios.clean_profile(steps=2)
    return builder.serialize()


@pytest.mark.parametrize("claimed", [2**31, 2**62, 2**64 - 1])
def test_huge_length_at_the_top_is_one_line_naming_the_file(tmp_path, claimed):
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(_capture_bytes() + _varint(1 << 3 | 2) + _varint(claimed) + b"\x08\x01")
    with pytest.raises(XPlaneError) as err:
        read_xspace(path)
    assert str(path) in str(err.value) and "claims" in str(err.value) and "\n" not in str(err.value)


def test_huge_length_inside_a_plane_with_consistent_outer_lengths(tmp_path):
    """A line inside a plane claims 2**40 bytes; the plane's own length is right, so only the inner check sees it."""
    plane = XPlane(id=1, name=b"/device:TPU:0").SerializeToString() + _varint(3 << 3 | 2) + _varint(2**40) + b"\x08"
    path = tmp_path / "inner.xplane.pb"
    path.write_bytes(_field(1, plane))
    with pytest.raises(XPlaneError, match="truncated or corrupt") as err:
        read_xspace(path)
    assert str(path) in str(err.value)


def test_varint_over_ten_bytes_is_an_input_error(tmp_path):
    path = tmp_path / "v.xplane.pb"
    path.write_bytes(_capture_bytes() + b"\x0a" + b"\xff" * 11 + b"\x01")
    with pytest.raises(XPlaneError, match="longer than 10 bytes"):
        read_xspace(path)


def test_cli_reports_a_huge_varint_in_one_line_exit_1(tmp_path):
    run = tmp_path / "plugins" / "profile" / "r"
    run.mkdir(parents=True)
    (run / "h.xplane.pb").write_bytes(_capture_bytes() + b"\x0a" + _varint(2**62))
    result = CliRunner().invoke(main, [str(tmp_path), "--format", "json", "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1
    assert "h.xplane.pb" in result.stderr


_RSS_SCRIPT = """
import resource, sys
from xladiag.parsers.xplane import read_xspace
t = read_xspace(sys.argv[1])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, t.anomalies["oversize_names"], len(t.events))
"""


def _rss_of_reading(path) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(path)], capture_output=True, text=True, check=True)
    rss, oversize, events = map(int, out.stdout.split())
    return rss, oversize, events


def test_a_huge_plane_name_costs_no_memory(tmp_path):
    """A 256 MB plane name (was: 5x its size in RSS, or a MemoryError traceback) is skipped unread."""
    base = _capture_bytes()
    clean_path, huge_path = tmp_path / "clean.xplane.pb", tmp_path / "huge.xplane.pb"
    clean_path.write_bytes(base)
    name_size = 256 << 20
    with open(huge_path, "wb") as f:
        f.write(base)
        # One more plane: its name field's header, then the name's bytes as a hole in a sparse file.
        header = _varint(2 << 3 | 2) + _varint(name_size)
        f.write(_varint(1 << 3 | 2) + _varint(len(header) + name_size) + header)
        f.truncate(f.tell() + name_size)
    clean_rss, _, clean_events = _rss_of_reading(clean_path)
    huge_rss, oversize, huge_events = _rss_of_reading(huge_path)
    assert oversize == 1 and huge_events == clean_events
    assert huge_rss < clean_rss + (32 << 20), (clean_rss, huge_rss)


def test_out_of_memory_is_an_input_error(tmp_path, monkeypatch):
    path = tmp_path / "m.xplane.pb"
    path.write_bytes(_capture_bytes())

    def no_memory(data):
        raise MemoryError

    monkeypatch.setattr(xplane_planes, "parse_plane_raw_events", no_memory)  # where planes are decoded
    with pytest.raises(XPlaneError, match="not enough memory") as err:
        read_xspace(path)
    assert str(path) in str(err.value)


def test_start_past_int64_is_flagged_not_wrapped():
    def event(offset):  # metadata 1, offset, duration 5
        return b"\x08\x01\x10" + _varint(offset) + b"\x18\x05"

    cols = read_line_events([event(10), event(2**63 - 1), event(2**64 - 3)], 1000, {})
    assert cols["start_valid"].tolist() == [True, False, True]  # 2**64-3 is -3 ps as int64: fits
    assert cols["start_ps"][0] == 1_000_010 and cols["start_ps"][2] == 999_997
    huge = read_line_events([event(10)], 2**62, {})
    assert not huge["start_valid"].any()
    assert np.issubdtype(huge["start_ps"].dtype, np.int64)

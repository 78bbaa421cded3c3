"""Events selected as stretches of rows (event_runs) give what row numbers give: the same columns, planes and
metadata rows, on lines written together (stretches) or interleaved (the row-number fallback), and the same
capture tables end to end."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from xladiag.analyzer.capture import event_runs
from xladiag.analyzer.capture.build import build_capture
from xladiag.analyzer.capture.event_runs import every_event, select_lines
from xladiag.analyzer.capture.planes import metadata_rows, on_lines
from xladiag.parsers.xplane import read_xspace


@dataclass
class _Space:  # the two tables select_lines reads
    events: pd.DataFrame
    lines: pd.DataFrame


def _space(rng: np.random.Generator, interleaved: bool) -> tuple[_Space, pd.DataFrame]:
    lines = pd.DataFrame({"line": np.arange(6), "plane": [0, 0, 1, 1, 2, 2]})
    line = rng.integers(0, 6, 20000) if interleaved else np.repeat(np.arange(6), 3000 + np.arange(6))
    events = pd.DataFrame({"line": line.astype(np.int32), "plane": lines["plane"].to_numpy()[line].astype(np.int32),
                           "metadata_id": rng.integers(-3, 400, len(line)),  # some ids have no metadata
                           "start_ps": rng.integers(0, 10**9, len(line))})
    # Plane 2 has sparse ids (a sorted search), plane 1 none at all.
    meta = pd.DataFrame({"plane": np.r_[np.zeros(300, int), np.full(50, 2)],
                         "metadata_id": np.r_[np.arange(300), np.arange(50) * 10**7]})
    return _Space(events, lines), meta


@pytest.mark.parametrize("interleaved", [False, True])
def test_selection_matches_row_numbers(interleaved):
    space, meta = _space(np.random.default_rng(3), interleaved)
    wanted = [1, 2, 5]
    runs = select_lines(space, wanted)
    assert (runs.runs is None) == interleaved
    rows = np.flatnonzero(on_lines(space.events["line"].to_numpy(), wanted))
    ev = space.events
    assert len(runs) == len(rows)
    assert np.array_equal(runs.take(ev["start_ps"].to_numpy()), ev["start_ps"].to_numpy()[rows])
    device_of_plane = np.array([7, 8, 9])
    assert np.array_equal(runs.by_plane(device_of_plane), device_of_plane[ev["plane"].to_numpy()[rows]])
    expected = metadata_rows(meta, ev["plane"].to_numpy()[rows], ev["metadata_id"].to_numpy()[rows])
    assert np.array_equal(runs.metadata_rows(meta, ev["metadata_id"].to_numpy()), expected)
    assert (expected >= 0).any() and (expected < 0).any()
    every = every_event(space)
    assert np.array_equal(every.metadata_rows(meta, ev["metadata_id"].to_numpy()),
                          metadata_rows(meta, ev["plane"].to_numpy(), ev["metadata_id"].to_numpy()))


def test_capture_tables_are_the_same_through_row_numbers(tpu_xplane, monkeypatch):
    space = read_xspace(tpu_xplane)
    by_runs = build_capture([space])
    monkeypatch.setattr(event_runs, "_MAX_RUNS", 0)  # every selection falls back to row numbers
    by_rows = build_capture([space])
    pd.testing.assert_frame_equal(by_runs.events, by_rows.events)
    pd.testing.assert_frame_equal(by_runs.op_metadata, by_rows.op_metadata)
    assert by_runs.warnings == by_rows.warnings

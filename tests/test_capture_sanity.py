"""Impossible values in a capture are dropped at the parser/analyzer boundary, one warning per kind.

Each test doctors a built capture (tests/builders/) the way a damaged or bit-flipped file
would, and compares the analysis with the undamaged one.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from builders import scenarios
from xladiag.analyzer.analysis import analyze
from xladiag.parsers.xspace_schema import XSpace


def _space():
    builder, expected = scenarios.clean_profile()
    return XSpace.FromString(builder.serialize()), expected


def _ops_line(plane):
    return next(line for line in plane.lines if line.name == b"XLA Ops")


def _stat_id(plane, name: bytes) -> int:
    return next(k for k, v in plane.stat_metadata.items() if v.name == name)


def _write(tmp_path, space, name="host.xplane.pb"):
    run = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True, exist_ok=True)
    (run / name).write_bytes(space if isinstance(space, bytes) else space.SerializeToString())
    return tmp_path


def _analyze_strict(path):
    """analyze() with every Python warning (numpy overflow included) turned into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return analyze(path)


def _warning(analysis, text: str) -> str:
    hits = [w for w in analysis.warnings if text in w]
    assert len(hits) == 1, analysis.warnings
    return hits[0]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    space, expected = _space()
    return analyze(_write(tmp_path_factory.mktemp("clean"), space)), expected


def test_clean_capture_has_no_sanity_warning(clean):
    analysis, expected = clean
    assert not [w for w in analysis.warnings if w.startswith("capture:")]
    assert analysis.num_devices == expected["num_devices"]


def test_negative_and_endless_durations_are_dropped(tmp_path, clean):
    space, _ = _space()
    plane = space.planes[0]
    events = _ops_line(plane).events
    device_duration = _stat_id(plane, b"device_duration_ps")
    events[3].duration_ps = 2**63 - 1  # the timeline extent
    events[4].duration_ps = -5
    next(s for s in events[5].stats if s.metadata_id == device_duration).int64_value = 2**63 - 1  # the cost
    analysis = _analyze_strict(_write(tmp_path, space))
    assert _warning(analysis, "negative duration or longer than twice the capture span").startswith("capture: 3 ")
    # Three of hundreds of events gone: every op's time per step stays within a few % of the clean run.
    mine = analysis.ops.set_index("op_name")["measured_s_per_step"]
    theirs = clean[0].ops.set_index("op_name")["measured_s_per_step"]
    assert np.allclose(mine.loc[theirs.index], theirs, rtol=0.1)
    assert analysis.step_s == pytest.approx(clean[0].step_s)


def test_timestamp_overflow_drops_the_line_without_wrapping(tmp_path, clean):
    """timestamp_ns * 1000 past int64: numpy would wrap (and print a warning); the events are dropped."""
    space, _ = _space()
    line = _ops_line(space.planes[1])
    n = len(line.events)
    line.timestamp_ns = 2**62
    other = _ops_line(space.planes[2])
    other.timestamp_ns = 5  # base 5000 ps: shift the offsets to keep the times, then overflow one
    for event in other.events:
        event.offset_ps -= 5000
    other.events[0].offset_ps = 2**63 - 4000
    analysis = _analyze_strict(_write(tmp_path, space))
    assert _warning(analysis, "past the 64-bit picosecond range").startswith("capture: ")
    assert int(_warning(analysis, "past the 64-bit").split()[1]) >= n + 1
    assert (analysis.device_steps["duration_s"] >= 0).all()
    assert analysis.step_s == pytest.approx(clean[0].step_s, rel=0.05)


def test_starts_far_outside_the_capture_are_dropped(tmp_path, clean):
    space, _ = _space()
    _ops_line(space.planes[0]).events[7].offset_ps += 2**55  # a flipped high bit: ~10 hours later
    analysis = _analyze_strict(_write(tmp_path, space))
    assert _warning(analysis, "far outside the capture window").startswith("capture: 1 ")
    assert analysis.step_s == pytest.approx(clean[0].step_s)


def test_bit_flipped_flops_and_bytes_are_ignored(tmp_path, clean):
    space, _ = _space()
    plane = space.planes[0]
    flops, nbytes = _stat_id(plane, b"flops"), _stat_id(plane, b"bytes_accessed")
    by_name = {md.display_name: md for md in plane.event_metadata.values()}
    for name, stat_id in ((b"fusion.1", flops), (b"add_fusion", nbytes)):
        stat = next(s for s in by_name[name].stats if s.metadata_id == stat_id)
        setattr(stat, stat.WhichOneof("value"), getattr(stat, stat.WhichOneof("value")) | 1 << 60)
    analysis = _analyze_strict(_write(tmp_path, space))
    assert _warning(analysis, "lose their trace FLOPs").startswith("capture: 1 ")
    assert _warning(analysis, "lose their trace byte counts").startswith("capture: 1 ")
    ops = analysis.ops.set_index("op_name")
    assert ops["efficiency"].max() < 2  # the flipped values would give ~1e5
    assert np.isnan(ops.loc["fusion.1", "flops"]) or ops.loc["fusion.1", "flops"] < 1 << 50


def test_identical_host_files_are_counted_once(tmp_path, clean):
    space, expected = _space()
    _write(tmp_path, space, "host-a.xplane.pb")
    _write(tmp_path, space, "host-b.xplane.pb")
    analysis = _analyze_strict(tmp_path)
    assert _warning(analysis, "repeat another host's planes").startswith("capture: 1 ")
    assert analysis.num_devices == expected["num_devices"]
    assert analysis.step_s == pytest.approx(clean[0].step_s)


def test_file_concatenated_with_itself_keeps_its_devices(tmp_path, clean):
    space, expected = _space()
    data = space.SerializeToString()
    analysis = _analyze_strict(_write(tmp_path, data + data))  # protobuf concatenation = merged planes
    assert _warning(analysis, "repeat an earlier plane").startswith(f"capture: {len(space.planes)} ")
    assert analysis.num_devices == expected["num_devices"]
    assert analysis.step_s == pytest.approx(clean[0].step_s)
    theirs = clean[0].ops.set_index("op_name")["occurrences"]
    assert (analysis.ops.set_index("op_name").loc[theirs.index, "occurrences"] == theirs).all()


def test_capture_without_a_stated_window_keeps_every_event(tmp_path, clean):
    """Older captures have no Task Environment plane: the span then comes from the events themselves."""
    space, _ = _space()
    del space.planes[[p.name for p in space.planes].index(b"Task Environment")]
    analysis = _analyze_strict(_write(tmp_path, space))
    assert not [w for w in analysis.warnings if w.startswith("capture:")]
    assert analysis.step_s == pytest.approx(clean[0].step_s)
    assert analysis.ops["occurrences"].sum() == clean[0].ops["occurrences"].sum()


def test_done_op_with_damaged_text_is_still_a_done_op(tmp_path, clean):
    """Fuzz find: one flipped byte in a copy-done's HLO text made it compute (efficiency 1.1e6)."""
    space, _ = _space()
    for plane in space.planes:
        for md in plane.event_metadata.values():
            if md.display_name == b"all-gather-done":
                md.name = md.name.replace(b"[", b"[\xff", 1)  # unparseable shape, category still says done
    analysis = _analyze_strict(_write(tmp_path, space))
    done = analysis.ops.set_index("op_name").loc["all-gather-done"]
    assert bool(done["is_async_done"]) and np.isnan(done["efficiency"])
    assert clean[0].ops.set_index("op_name").loc["all-gather-done", "is_async_done"]


def test_flops_the_chip_cannot_do_in_the_measured_time_are_dropped_after_chip_detection(tmp_path, clean):
    # 10x more FLOPs than the chip's peak allows in the op's measured time: plausible for "some chip" (the
    # parse-time check passes it) but impossible for the one detected. Never an efficiency or MFU above 1.
    space, _ = _space()
    plane = space.planes[0]
    flops_id = _stat_id(plane, b"flops")
    md = next(md for md in plane.event_metadata.values() if md.display_name == b"fusion.1")
    stat = next(s for s in md.stats if s.metadata_id == flops_id)
    field = stat.WhichOneof("value")
    base = clean[0].ops.set_index("op_name")
    measured, peak = base.loc["fusion.1", "mean_s"], clean[0].chip.peak_flops_per_s("bf16")
    setattr(stat, field, type(getattr(stat, field))(10 * measured * peak))
    analysis = _analyze_strict(_write(tmp_path, space))
    ops = analysis.ops.set_index("op_name")
    assert np.isnan(ops.loc["fusion.1", "flops"]) and "FLOPs dropped" in ops.loc["fusion.1", "cost_note"]
    assert ops["efficiency"].max() <= 1.5
    assert analysis.mfu is None or analysis.mfu <= 1
    assert _warning(analysis, "more FLOPs than the")


def test_op_seconds_is_the_median_wherever_the_bound_cannot_decide():
    """The shortest event bounds each op's median from below; ops a cost check cannot clear on that bound get
    their exact median (pandas' median: the mean of the two middle values), the others keep the bound."""
    from xladiag.analyzer.capture.sanity import _MIN_OP_PS, _op_seconds

    rng = np.random.default_rng(3)
    n_ops = 50
    row = rng.integers(-1, n_ops - 5, 20_000)  # -1: no metadata; the last 5 ops never measured
    duration = rng.integers(0, 10**7, len(row))
    capture_ps = 10**13
    import pandas as pd

    exact = pd.Series(duration[row >= 0]).groupby(row[row >= 0]).median().reindex(range(n_ops))
    exact = np.maximum(exact.fillna(capture_ps).to_numpy(), _MIN_OP_PS) / 1e12
    every = _op_seconds(row, duration, n_ops, capture_ps, lambda s: np.ones(len(s), bool))
    assert np.array_equal(every, exact)
    chosen = np.zeros(n_ops, bool)
    chosen[::3] = True
    some = _op_seconds(row, duration, n_ops, capture_ps, lambda s: chosen)
    assert np.array_equal(some[chosen], exact[chosen])
    assert np.all(some[~chosen] <= exact[~chosen])
    assert np.array_equal(some[-5:], np.full(5, capture_ps / 1e12))  # unmeasured: the capture, exactly


def test_on_lines_matches_isin():
    from xladiag.analyzer.capture.planes import on_lines

    rng = np.random.default_rng(4)
    lines = rng.integers(0, 40, 10_000).astype(np.int32)
    for ids in ([], [3], [0, 39, 7], [5, 500, -1]):
        assert np.array_equal(on_lines(lines, ids), np.isin(lines, ids))
    assert np.array_equal(on_lines(np.array([-2, 1 << 30, 5]), [5, -2]), [True, False, True])

"""Hostile captures, second round: each failure of an independent fuzz campaign of mutated .xplane.pb files,
rebuilt from the builders' capture (tests/fuzz/structured.py) or a bundled sample, and what it must give now:
a one-line error naming the file and field, or a warning and an unknown while the rest of the report stands;
every report valid against the JSON Schema."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
import structured  # noqa: E402
from conftest import CPU_SAMPLE, only_xplane  # noqa: E402
from xladiag.api import diagnose  # noqa: E402
from xladiag.cli import main  # noqa: E402
from xladiag.parsers.xplane import XPlaneError, parse_xspace_bytes, read_xspace  # noqa: E402
from xladiag.parsers.xspace_schema import XSpace  # noqa: E402
from xladiag.report.json_schema import load_schema  # noqa: E402


@pytest.fixture(scope="module")
def base() -> bytes:
    return structured.base_capture()


@pytest.fixture(scope="module")
def clean(base, tmp_path_factory):
    return diagnose(_write(tmp_path_factory.mktemp("clean"), XSpace.FromString(base)))


def _write(root: Path, space) -> Path:
    run = root / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True, exist_ok=True)
    (run / "host.xplane.pb").write_bytes(space.SerializeToString())
    return root


def _report(root: Path, space) -> dict:
    """The JSON report of the space, checked against the schema."""
    data = diagnose(_write(root, space)).to_dict()
    jsonschema.Draft202012Validator(load_schema("report")).validate(data)
    return data


def _warning(data: dict, text: str) -> str:
    hits = [w for w in data["warnings"] if text in w]
    assert len(hits) == 1, data["warnings"]
    return hits[0]


def _executions(space):
    return [e for p in space.planes for line in p.lines if line.name == b"XLA Modules" for e in line.events]


# 1 ------------------------------------------------------------------------------------------------------------
def test_zero_length_executions_are_dropped_with_a_warning(tmp_path, base):
    """Fuzz find (83 mutants): every program execution of length 0 left ops outside any step, and the transfer
    columns' per-op sum indexed an empty table (IndexError in transfers._by_op)."""
    space = XSpace.FromString(base)
    executions = _executions(space)
    for event in executions:
        event.duration_ps = 0
    data = _report(tmp_path, space)
    assert _warning(data, "zero or negative length").startswith(f"capture: {len(executions)} program execution")
    assert data["steps"]["source"].startswith("the whole capture")  # no program execution is left to be a step
    assert data["step_s"] > 0


def test_per_op_sum_when_no_op_is_in_a_step():
    from xladiag.analyzer.steps.transfers import _by_op

    ops = pd.DataFrame({"op_id": np.array([-1, -1], np.int64)})
    assert _by_op(np.zeros(0, np.int64), np.zeros(0), ops).tolist() == [0.0, 0.0]
    ops = pd.DataFrame({"op_id": np.array([1, -1, 0], np.int64)})
    assert _by_op(np.array([0, 1, 1]), np.array([2.0, 3.0, 4.0]), ops).tolist() == [7.0, 0.0, 2.0]


# 2 ------------------------------------------------------------------------------------------------------------
def test_device_index_past_int32_is_one_line_naming_file_and_plane(tmp_path, base):
    space = XSpace.FromString(base)
    space.planes[0].name = b"/device:TPU:99999999999999999999"
    root = _write(tmp_path, space)
    with pytest.raises(XPlaneError, match=r"host\.xplane\.pb: plane name '/device:TPU:9+': device index past"):
        read_xspace(next(root.rglob("*.xplane.pb")))
    result = CliRunner().invoke(main, [str(root), "--format", "json", "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "host.xplane.pb" in result.stderr and "internal error" not in result.stderr


def test_device_plane_renamed_to_a_host_plane_is_not_a_device(tmp_path, base, clean):
    """Fuzz find: '/device:TPU:2' renamed '/host:TPU2' in a TPU capture: its 'XLA Ops' line was read as a
    host line that also wanted device durations (KeyError 'device_duration_ps')."""
    space = XSpace.FromString(base)
    plane = next(p for p in space.planes if p.name == b"/device:TPU:2")
    plane.name = b"/host:TPU2"
    data = _report(tmp_path, space)
    assert data["devices"] == clean.analysis.num_devices - 1
    assert data["step_s"] == pytest.approx(clean.to_dict()["step_s"], rel=1e-6)


# 3 ------------------------------------------------------------------------------------------------------------
def test_run_id_int64_max_beside_a_string_keeps_exact_ids():
    """Fuzz find: run_id = INT64_MAX on half the CPU events and a string on the others: the column went through
    float64 (to_numpy of a nullable column), and INT64_MAX came back as 2**63 (TypeError casting to Int64)."""
    from xladiag.analyzer.capture.gpu_cpu_ops import cpu_tables

    space = XSpace.FromString(only_xplane(CPU_SAMPLE).read_bytes())
    plane = next(p for p in space.planes if p.name == b"/host:CPU")
    run_id = next(k for k, v in plane.stat_metadata.items() if v.name == b"run_id")
    stats = [s for line in plane.lines for e in line.events for s in e.stats if s.metadata_id == run_id]
    for i, stat in enumerate(stats):
        if i % 2:
            stat.str_value = b"abc"
        else:
            stat.int64_value = 2**63 - 1
    tables = parse_xspace_bytes(space.SerializeToString(), "cpu.xplane.pb")
    _, events = cpu_tables(tables, 0)
    launched = events.loc[events["run_id"].notna(), "launch_ps"]
    assert len(launched) and (launched >= 0).all()  # every INT64_MAX op found its host launch event
    assert set(events["run_id"].dropna()) == {2**63 - 1}


# 4 ------------------------------------------------------------------------------------------------------------
def test_plane_without_stat_metadata_and_empty_program_ids(tmp_path, base, clean):
    """Fuzz find: one plane's stat names gone (its program ids missing) while the others' program ids are empty:
    both became '' and the trace metadata held each op twice (pandas: cannot reindex on duplicate labels).
    Its device then has no device_type: the JSON said null, against our schema."""
    space = XSpace.FromString(base)
    for plane in space.planes:
        program_id = next((k for k, v in plane.stat_metadata.items() if v.name == b"program_id"), None)
        for md in plane.event_metadata.values():
            for stat in md.stats:
                if stat.metadata_id == program_id:
                    stat.str_value = b""
    space.planes[0].ClearField("stat_metadata")
    data = _report(tmp_path, space)
    assert [d["device_type"] for d in data["device_list"]].count("") == 1
    step_ops = {op["name"] for op in data["ops"] if op.get("measured_s_per_step")}
    assert step_ops == {op["name"] for op in clean.to_dict()["ops"] if op.get("measured_s_per_step")}


# 5 ------------------------------------------------------------------------------------------------------------
def test_memory_access_breakdown_stored_as_an_integer_is_unknown(tmp_path, base):
    space = XSpace.FromString(base)
    plane = space.planes[0]
    sid = next(k for k, v in plane.stat_metadata.items() if v.name == b"memory_access_breakdown")
    for md in plane.event_metadata.values():
        for stat in md.stats:
            if stat.metadata_id == sid:
                stat.int64_value = 12345
    tables = parse_xspace_bytes(space.SerializeToString(), "h.xplane.pb")
    meta = tables.event_metadata
    on_plane = meta["plane"] == 0
    assert meta.loc[on_plane, "hbm_bytes"].isna().all() and meta.loc[~on_plane, "hbm_bytes"].notna().any()
    assert _report(tmp_path, space)["step_s"] > 0


# 6 ------------------------------------------------------------------------------------------------------------
def test_denormal_capacity_in_a_chip_file_is_one_line_naming_file_and_field(tmp_path):
    from xladiag.analyzer.chips.catalog import ChipCatalogError, load_catalog

    path = tmp_path / "chips.toml"
    for field, value in (("hbm_capacity_bytes", "5e-324"), ("hbm_bytes_per_s", "1e300"),
                         ("peak_bf16_flops_per_s", "5e-324"), ("pcie_bytes_per_s", "1e-3")):
        path.write_text(f"[chip.h100]\n{field} = {value}\n")
        with pytest.raises(ChipCatalogError, match=rf"chips\.toml: \[chip\.h100\] field '{field}' must be a "
                                                   r"plausible value") as err:
            load_catalog(path)
        assert "\n" not in str(err.value)
    path.write_text("[chip.h100]\nhbm_capacity_bytes = 85899345920\n")
    assert load_catalog(path)["h100"].hbm_capacity_bytes == 85899345920


def test_implausible_device_stats_are_ignored_with_a_warning():
    from xladiag.analyzer.chips.catalog import load_catalog
    from xladiag.analyzer.chips.detection import chip_for_device

    catalog = load_catalog()
    stats = {"device_vendor": "NVIDIA", "core_count": 132, "compute_cap_major": 9, "compute_cap_minor": 0,
             "memory_size": 80 * 2**30, "memory_bandwidth": 3.35e12}
    good = chip_for_device("NVIDIA H100", "NVIDIA", stats, catalog)
    bad = chip_for_device("NVIDIA H100", "NVIDIA", {**stats, "memory_size": 5e-324, "memory_bandwidth": 1e300,
                                                    "compute_cap_minor": math.nan}, catalog)
    assert bad.chip.key == good.chip.key and bad.chip.hbm_bytes_per_s == catalog[good.chip.key].hbm_bytes_per_s
    warned = " | ".join(bad.warnings)
    assert "memory_size (4.941e-324) is not a plausible HBM capacity" in warned
    assert "memory_bandwidth (1e+300) is not a plausible HBM bandwidth" in warned
    # A GPU the catalog cannot name: only its counts and memory size tell; a denormal size must not (log of 0).
    unknown = chip_for_device(None, "NVIDIA", {**stats, "memory_size": 5e-324, "compute_cap_major": math.inf},
                              catalog)
    assert unknown.chip.vendor == "nvidia"


def test_implausible_trace_peaks_leave_the_table_numbers(tmp_path, base, clean):
    space = XSpace.FromString(base)
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == b"peak_teraflops_per_second":
                stat.double_value = 5e-324
            if names.get(stat.metadata_id) == b"peak_hbm_bw_gigabytes_per_second":
                stat.double_value = 1e300
    data = _report(tmp_path, space)
    _warning(data, "peak_teraflops_per_second (4.941e-324) is not a plausible peak FLOP/s")
    _warning(data, "peak_hbm_bw_gigabytes_per_second (1e+300) is not a plausible HBM bandwidth")
    assert data["chip"]["peak_flops_per_s"] == pytest.approx(918e12)  # the v6e table's, as the clean trace's
    assert data["step_s"] == pytest.approx(clean.to_dict()["step_s"], rel=1e-9)


# 7 ------------------------------------------------------------------------------------------------------------
def test_a_cpu_thread_line_repeated_8_times_is_counted_once():
    """Fuzz find: the CPU sample's busiest thread line copied 7 more times: its ops counted 8x, and a finding
    saved 127 % of the step. The copies are recognised while parsing (same timebase, same events)."""
    data = only_xplane(CPU_SAMPLE).read_bytes()
    space = XSpace.FromString(data)
    plane = next(p for p in space.planes if p.name == b"/host:CPU")
    busiest = max(plane.lines, key=lambda line: len(line.events))
    for k in range(7):
        copy = plane.lines.add()
        copy.CopyFrom(busiest)
        copy.id = busiest.id + 1000 + k
    mutant = parse_xspace_bytes(space.SerializeToString(), "cpu.xplane.pb")
    original = parse_xspace_bytes(data, "cpu.xplane.pb")
    assert mutant.anomalies["duplicate_lines"] == 7
    assert len(mutant.events) == len(original.events)
    assert len(mutant.lines) == len(original.lines) + 7  # the lines stay, without their events


def test_repeated_op_lines_change_nothing_but_a_warning(tmp_path, base, clean):
    space = XSpace.FromString(base)
    plane = space.planes[0]
    ops_line = next(line for line in plane.lines if line.name == b"XLA Ops")
    for _ in range(3):
        plane.lines.add().CopyFrom(ops_line)
    data = _report(tmp_path, space)
    assert _warning(data, "repeat another line of the same plane").startswith("capture: 3 line(s)")
    theirs = clean.to_dict()
    assert data["step_s"] == pytest.approx(theirs["step_s"], rel=1e-12)
    mine = {op["name"]: op.get("measured_s_per_step") for op in data["ops"]}
    assert mine == pytest.approx({op["name"]: op.get("measured_s_per_step") for op in theirs["ops"]})


def test_no_finding_saves_more_than_the_step():
    from xladiag.rules.base import Priced, make_finding

    priced = Priced(time_s_per_step=2.0, est_savings_s_per_step=1.9, step_s=1.0, confidence="high", ops=())
    finding = make_finding("remat", priced, title="t", evidence="e", fix="f")
    assert finding.est_savings_s_per_step == 1.0 and finding.fraction_of_step == 1.0
    assert finding.time_s_per_step == 2.0  # the cost is what was measured; only the share is capped
    half = make_finding("remat", Priced(0.5, 0.25, 1.0, "high", ()), title="t", evidence="e", fix="f")
    assert (half.est_savings_s_per_step, half.fraction_of_step) == (0.25, 0.5)


def test_a_clock_scaled_1e9_says_the_step_is_absurd(tmp_path, base, clean):
    space = XSpace.FromString(base)
    structured.scaled_clock(space, _Fixed(9))
    data = _report(tmp_path, space)
    assert data["step_s"] > 3600
    assert "no training step takes that long" in _warning(data, "the capture's clock is likely damaged")
    assert not [w for w in clean.to_dict()["warnings"] if "clock" in w]


class _Fixed:
    """An rng stand-in whose integers() is always ``value`` (the mutator's exponent)."""

    def __init__(self, value: int):
        self.value = value

    def integers(self, *args):
        return self.value


def test_hbm_bytes_beyond_the_chip_are_unknown_with_a_warning(tmp_path, base, clean):
    """An op's byte counts times 10 (9x the v6e's HBM bandwidth in its measured time, yet under the parse-time
    bound of 100x the fastest chip): dropped as the FLOPs of such an op are, the op still listed."""
    from builders.xspace_encoder import memory_access_breakdown

    space = XSpace.FromString(base)
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for md in plane.event_metadata.values():
            if md.display_name != b"add_fusion":
                continue
            for stat in md.stats:
                if names[stat.metadata_id] in (b"bytes_accessed", b"raw_bytes_accessed"):
                    stat.int64_value *= 10
                    total = stat.int64_value
            for stat in md.stats:
                if names[stat.metadata_id] == b"memory_access_breakdown":
                    stat.bytes_value = memory_access_breakdown([(1, 1, total)])
    data = _report(tmp_path, space)
    assert "(up to 9." in _warning(data, "1 ops report more HBM bytes than the TPU v6e")
    op = next(op for op in data["ops"] if op["name"] == "add_fusion")
    assert op["bytes"] is None and "HBM bytes dropped" in op["cost_note"]
    theirs = next(op for op in clean.to_dict()["ops"] if op["name"] == "add_fusion")
    assert op["measured_s_per_step"] == pytest.approx(theirs["measured_s_per_step"])

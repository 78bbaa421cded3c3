"""Per-op measured times on each platform's real capture, steps, and interval arithmetic."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import CPU_SAMPLE
from xladiag.analyzer.capture.build import build_capture
from xladiag.analyzer.steps.op_stats import measure
from xladiag.analyzer.steps.windows import find_steps
from xladiag.parsers.hlo_text import parse_hlo_file
from xladiag.parsers.xplane import parse_xspace_bytes, read_xspace
from xladiag.parsers.xspace_schema import XSpace


@pytest.fixture(scope="module")
def tpu(tpu_xplane):
    capture = build_capture([read_xspace(tpu_xplane)])
    steps = find_steps(capture)
    step_ops, ops, measured = measure(capture, steps)
    return capture, measured, step_ops, ops, measured.device_steps()


def test_tpu_devices_and_steps(tpu):
    capture, steps, _, _, device_steps = tpu
    assert capture.platform == "tpu"
    assert capture.devices["device_type"].unique().tolist() == ["TPU v6 Lite"]
    assert len(capture.devices) == 4
    assert steps.program == "jit_f"
    # 100 executions of jit_f per device; the first is warm-up.
    assert steps.table.groupby("device").size().tolist() == [100] * 4
    assert steps.count == 99
    assert 0.70 < steps.mean_s < 0.85
    # The op line is busy for the whole execution: idle is a rounding error.
    assert (device_steps["idle_s"] < 1e-5).all()
    # The per-step distribution: one duration and busy time per measured device-step, as arrays.
    assert len(steps.duration_s) == len(steps.busy_s) == len(steps.after_warmup) == 4 * 99
    assert np.array_equal(device_steps["busy_s"].to_numpy(), steps.busy_s)
    assert (steps.busy_s <= steps.duration_s + 1e-12).all() and steps.busy_s.min() > 0.5 * steps.duration_s.min()


def test_tpu_per_occurrence_times_match_event_durations(tpu, tpu_xplane):
    capture, _, step_ops, ops, _ = tpu
    raw = read_xspace(tpu_xplane)
    md = raw.event_metadata[raw.event_metadata["plane"] == 0].set_index("metadata_id")["display_name"]
    line = raw.lines[(raw.lines["plane"] == 0) & (raw.lines["name"] == "XLA Ops")]["line"].iloc[0]
    ev = raw.events[raw.events["line"] == line]
    durations = ev.assign(op=ev["metadata_id"].map(md)).groupby("op")["duration_ps"].apply(sorted)
    ours = capture.events[capture.events["device"] == 0].groupby("op_name")["duration_ps"].apply(sorted)
    for op in ("copy-done", "copy-done.2", "broadcast_add_fusion.2"):
        assert ours[op] == durations[op]

    by_name = ops.set_index("op_name")
    for fusion in ("broadcast_add_fusion", "broadcast_add_fusion.1", "broadcast_add_fusion.2"):
        assert 7.3e-3 <= by_name.loc[fusion, "mean_s"] <= 8.5e-3
    slow_dones = by_name.loc[["copy-done", "copy-done.2", "copy-done.4", "copy-done.5"], "mean_s"]
    assert ((slow_dones > 0.170) & (slow_dones < 0.225)).all()
    assert by_name.loc["copy-done.1", "mean_s"] < 1e-6  # the two fast copies back to host
    assert set(ops.loc[~ops["in_step"], "module"]) >= {"jit__psum"}


def test_gpu_ops_for_all_eight_gpus(gpu_xplane):
    capture = build_capture([read_xspace(gpu_xplane)])
    assert capture.platform == "gpu"
    assert len(capture.devices) == 8
    conv = capture.events[capture.events["op_name"] == "cudnn-conv.1"]
    assert sorted(conv["device"].unique()) == list(range(8))
    assert (capture.events.loc[capture.events["op_name"] == "loop_transpose_fusion", "device"].nunique()) == 8
    assert set(capture.events.loc[capture.events["module"] == "jit_forward_3d_conv", "op_name"]) >= {
        "cudnn-conv.1", "loop_transpose_fusion", "input_transpose_fusion"}


def test_gpu_hlo_op_comes_through_correlation_id_when_kernels_lack_it(gpu_xplane):
    """Strip hlo_op from every kernel: the launch events must still name the ops, identically."""
    space = XSpace.FromString(gpu_xplane.read_bytes())
    for plane in space.planes:
        if not plane.name.startswith(b"/device:GPU:"):
            continue
        drop = {k for k, v in plane.stat_metadata.items() if v.name in (b"hlo_op", b"hlo_module", b"program_id")}
        for line in plane.lines:
            for event in line.events:
                keep = [s for s in event.stats if s.metadata_id not in drop]
                del event.stats[:]
                event.stats.extend(keep)
    stripped = build_capture([parse_xspace_bytes(space.SerializeToString(), gpu_xplane)])
    original = build_capture([read_xspace(gpu_xplane)])
    key = ["device", "start_ps", "op_name", "module", "duration_ps"]
    pd.testing.assert_frame_equal(stripped.events[key].reset_index(drop=True),
                                  original.events[key].reset_index(drop=True))
    assert (stripped.events["module"] == "jit_forward_3d_conv").sum() >= 8 * 5


def test_cpu_capture_per_op_times(cpu_xplane):
    capture = build_capture([read_xspace(cpu_xplane)])
    steps = find_steps(capture)
    step_ops, ops, steps = measure(capture, steps)
    device_steps = steps.device_steps()
    assert capture.platform == "cpu"
    assert len(capture.devices) == 8
    # The recording annotates its steps: they are the steps, and each launches one train step.
    assert steps.annotated and set(step_ops["module"].astype(str)) == {"jit_train_step"}
    assert steps.count >= 2
    # Every measured op is an ENTRY instruction of the dumped program, and vice versa for real work.
    module = parse_hlo_file(next((CPU_SAMPLE / "hlo").glob("*jit_train_step*after_optimizations.txt")))
    entry = set(module.instructions().query("is_entry")["name"])
    measured = set(ops.loc[ops["in_step"], "op_name"])
    assert measured <= entry
    assert len(measured) > 50
    assert (ops.loc[ops["in_step"], "mean_s"] >= 0).all()
    assert (device_steps["busy_s"] <= device_steps["duration_s"] + 1e-12).all()
    # Each op runs once per device per step.
    assert np.allclose(ops.loc[ops["in_step"], "occurrences_per_step"], 1.0)


def test_cpu_sample_records_its_program_and_collectives():
    """The script's own record (from JAX) agrees with what we parse from the dump it wrote."""
    data = json.loads((CPU_SAMPLE / "cost_analysis.json").read_text())
    assert data["module_name"] == "jit_train_step" and data["n_devices"] == 8
    module = parse_hlo_file(CPU_SAMPLE / data["hlo_file"])
    opcodes = module.instructions()["opcode"].str.replace(r"-(start|done)$", "", regex=True)
    for kind, count in data["collective_counts"].items():
        assert int((opcodes == kind).sum()) == count, kind


def test_two_hosts_give_globally_numbered_devices(tmp_path, tpu_xplane):
    """A multi-host run has one file per host; every host's devices are kept and numbered apart."""
    run = tmp_path / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    (run / "host-a.xplane.pb").write_bytes(tpu_xplane.read_bytes())
    # Another host's file: the same program, but not a byte-identical copy (copies are counted once).
    space = XSpace.FromString(tpu_xplane.read_bytes())
    next(p for p in space.planes if p.name == b"/host:CPU").id += 1
    (run / "host-b.xplane.pb").write_bytes(space.SerializeToString())
    from xladiag.analyzer.analysis import analyze

    analysis = analyze(tmp_path)
    assert analysis.num_devices == 8
    assert sorted(analysis.devices["device"]) == list(range(8))
    assert analysis.hosts == ("host-a", "host-b")
    assert analysis.devices.groupby("host").size().to_dict() == {"host-a": 4, "host-b": 4}
    single = analyze(tpu_xplane)
    # Same program on twice the devices: per-device, per-step numbers are unchanged.
    assert analysis.steps.count == single.steps.count
    assert analysis.step_s == pytest.approx(single.step_s)
    mine = analysis.ops.set_index("op_name").loc["copy-done.2", "measured_s_per_step"]
    assert mine == pytest.approx(single.ops.set_index("op_name").loc["copy-done.2", "measured_s_per_step"])


def test_metadata_rows_dense_sparse_and_missing():
    """Each event's metadata row, by (plane, metadata_id): dense ids, ids too spread for a table, and none."""
    from xladiag.analyzer.capture.planes import metadata_rows

    meta = pd.DataFrame({"plane": [0, 0, 1, 1], "metadata_id": [5, 7, 5, 9]})
    plane, ids = np.array([1, 0, 1, 0, 2]), np.array([5, 7, 9, 9, 5])
    assert metadata_rows(meta, plane, ids).tolist() == [2, 1, 3, -1, -1]
    spread = meta.assign(metadata_id=[5, 2**40, 5, 2**61])  # no table that large: sorted keys
    assert metadata_rows(spread, plane, np.array([5, 2**40, 2**61, 9, 5])).tolist() == [2, 1, 3, -1, -1]
    assert metadata_rows(meta.iloc[:0], plane, ids).tolist() == [-1] * 5


def test_first_seen_ids_number_keys_as_groupby_ngroup():
    from xladiag.analyzer.steps.op_stats import first_seen_ids

    rng = np.random.default_rng(3)
    keys = pd.DataFrame({c: pd.Categorical(rng.choice(list("abcd"), 500)) for c in ("module", "program_id", "op_name")})
    expected = keys.groupby(list(keys.columns), sort=False, observed=True).ngroup().to_numpy()
    assert first_seen_ids(keys).tolist() == expected.tolist()
    # Missing names (-1, as ngroup drops them) and categories too many for a table per possible key.
    keys.loc[::7, "op_name"] = np.nan
    keys["module"] = pd.Categorical(keys["module"], categories=[*"abcd", *map(str, range(3000))])
    expected = keys.groupby(list(keys.columns), sort=False, observed=True).ngroup().fillna(-1).to_numpy(np.int64)
    assert (expected[::7] == -1).all() and first_seen_ids(keys).tolist() == expected.tolist()
    assert first_seen_ids(keys.dropna()).tolist() == pd.Series(expected[expected >= 0]).tolist()

"""GPU and CPU hosts reduced where they are read (analyzer/hosts/transfer_totals.py): the transfer numbers from
the hosts' sums equal those from every step event, and a multi-host GPU or CPU capture gives the report of
reading all its events, through a pool or in one process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import xladiag.analyzer.hosts.map as host_map
from conftest import CPU_SAMPLE, GPU_SAMPLE, only_xplane
from xladiag.analyzer.hosts.merge import _totals
from xladiag.analyzer.hosts.reduce import HostPart, reduce_host
from xladiag.analyzer.hosts.transfer_totals import transfer_totals
from xladiag.analyzer.steps.transfers import attach_transfers
from xladiag.analyzer.steps.windows import Steps
from xladiag.api import diagnose
from xladiag.parsers.xspace_schema import XSpace

US = 1_000_000  # ps
NAMES = ["all-reduce-start.1", "all-gather-start.2", "fusion.1", "fusion.2", "copy-start.3"]
KINDS = ["all-reduce", "all-gather", None, None, None]


def _gpu_run(rng, devices=4, steps=3):
    """Per device and step, 12 kernels of the five ops at random starts on several streams (overlapping)."""
    rows = []
    for dev in range(devices):
        for step in range(steps):
            base = step * 1000 * US
            for _ in range(12):
                op = int(rng.integers(len(NAMES)))
                start = base + int(rng.integers(0, 800)) * US
                rows.append((dev, step, op, start, int(rng.integers(5, 150)) * US))
    frame = pd.DataFrame(rows, columns=["device", "step", "op_id", "start_ps", "duration_ps"])
    frame = frame.assign(module="jit_step", program_id="1", op_name=[NAMES[i] for i in frame["op_id"]],
                         span_ps=frame["duration_ps"])
    table = pd.DataFrame([(d, s, s * 1000 * US, (s + 1) * 1000 * US, 1000 * US, s == 0)
                          for d in range(devices) for s in range(steps)],
                         columns=["device", "step", "start_ps", "end_ps", "duration_ps", "is_warmup"])
    return frame, Steps(table, "jit_step", "test", True)


def _ops(step_ops, steps, synchronous: bool):
    per_op = step_ops[step_ops["step"] > 0].groupby("op_id")["duration_ps"].sum().reindex(range(len(NAMES)))
    opcodes = ["all-reduce-start", "all-gather-start", "fusion", "fusion", "copy-start"]
    if synchronous:  # CPU collectives
        opcodes[:2] = ["all-reduce", "all-gather"]
    return pd.DataFrame({
        "module": "jit_step", "program_id": "1", "op_name": NAMES, "op_id": range(len(NAMES)), "in_step": True,
        "transfer_kind": KINDS, "opcode": opcodes, "is_async_start": [o.endswith("-start") for o in opcodes],
        "is_async_done": False, "start_op": None, "predicted_s_per_step": 1e-6, "collective_bytes": 1e6,
        "host_bytes": 0.0, "occurrences_per_step": 1.0,
        "measured_s_per_step": per_op.fillna(0).to_numpy() / 1e12 / len(steps.after_warmup)})


@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_the_hosts_sums_give_the_all_events_transfer_numbers(platform):
    step_ops, steps = _gpu_run(np.random.default_rng(3))
    ops = _ops(step_ops, steps, platform == "cpu")
    roles = ops[["module", "program_id", "op_name"]].assign(
        kind=KINDS, is_async=ops["is_async_start"] | ops["is_async_done"])
    full_ops, full = attach_transfers(ops, step_ops, steps, None, platform)
    parts = []
    for host in (0, 1):  # devices 0-1 on one host, 2-3 on the other: each host numbers its own from 0
        mine = step_ops[step_ops["device"] // 2 == host].assign(device=lambda f: f["device"] % 2)
        table = steps.table[steps.table["device"] // 2 == host].assign(device=lambda f: f["device"] % 2)
        sums = transfer_totals(mine, Steps(table.reset_index(drop=True), "jit_step", "test", True), roles,
                               platform == "gpu")
        parts.append(HostPart("h", "h", "f", None, platform, span_ops=pd.DataFrame(
            {"key": [], "duration_ps": []}), totals=sums))
    totals = _totals(parts, [0, 2], ops[["program_id", "op_name", "op_id"]], np.zeros(0, np.int64))
    sample = step_ops[step_ops["step"] == 1]  # what the merge keeps: one step per device
    summed_ops, summed = attach_transfers(ops, sample, steps, None, platform, totals)
    assert full.busy_s_per_step and summed.busy_s_per_step == full.busy_s_per_step
    assert summed.non_transfer_s_per_step == full.non_transfer_s_per_step > 0
    for col in ("exposed_s_per_step", "in_flight_s_per_step", "hidden_fraction"):
        pd.testing.assert_series_equal(summed_ops[col], full_ops[col])
    if platform == "gpu":  # some of the kernels' time is hidden behind compute
        assert (full_ops["hidden_fraction"] > 0).any()


def _hosts_from(sample: Path, out: Path, hosts: int = 4) -> Path:
    """``hosts`` host files from one sample capture: each its own hostname, clock offset and a few kernels
    longer (so no two are duplicates, and their step times differ)."""
    space = XSpace.FromString(only_xplane(sample).read_bytes())
    run = out / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    for k in range(hosts):
        host = XSpace()
        host.CopyFrom(space)
        del host.hostnames[:]
        host.hostnames.append(f"host-{k}".encode())
        for plane in host.planes:
            for line in plane.lines:
                line.timestamp_ns += k * 1000
                if plane.name.startswith(b"/device"):
                    for i, event in enumerate(line.events):
                        if i % 5 == k:
                            event.duration_ps = event.duration_ps * (10 + k) // 10
        (run / f"host-{k}.xplane.pb").write_bytes(host.SerializeToString())
    return out


def _all_events(path, monkeypatch, **kw):
    with monkeypatch.context() as m:
        m.setattr(host_map, "reduce_host", lambda p, forced=None, raw=False, choice=None: reduce_host(p, forced, True))
        return diagnose(path, workers=1, **kw)


def _close(a, b, where=""):
    """The same JSON value, floats to the last bits (sums of integer picoseconds against sums of seconds)."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12) or (math.isnan(a) and math.isnan(b)), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.parametrize("sample", [GPU_SAMPLE, CPU_SAMPLE], ids=["gpu", "cpu"])
def test_a_four_host_capture_is_reduced_per_host_with_the_all_events_report(sample, tmp_path, monkeypatch):
    run = _hosts_from(sample, tmp_path)
    messages: list[str] = []
    pool = diagnose(run, workers=2, progress=messages.append)
    assert not any("read in full" in m for m in messages), messages
    assert pool.analysis.step_ops.groupby("device")["step"].nunique().eq(1).all()  # reduced: one step each
    one = diagnose(run, workers=1)
    assert pool.render("json") == one.render("json")
    full = _all_events(run, monkeypatch)
    assert full.analysis.step_ops.groupby("device")["step"].nunique().gt(1).any()
    got, want = json.loads(pool.render("json")), json.loads(full.render("json"))
    key = lambda o: str((o["module"], o["program_id"], o["name"]))  # noqa: E731  ties in time may swap by a last bit
    got["ops"], want["ops"] = sorted(got["ops"], key=key), sorted(want["ops"], key=key)
    _close(got, want)
    assert len(got["hosts"]) == 4


def test_a_host_without_the_hlo_of_its_program_reads_the_capture_in_full(tmp_path, monkeypatch):
    run = _hosts_from(CPU_SAMPLE, tmp_path, hosts=2)
    path = next((run / "plugins" / "profile" / "run").glob("host-1*"))
    space = XSpace.FromString(path.read_bytes())
    meta = next(p for p in space.planes if p.name == b"/host:metadata")
    meta.ClearField("lines")
    meta.ClearField("event_metadata")
    path.write_bytes(space.SerializeToString())
    messages: list[str] = []
    report = diagnose(run, workers=1, progress=messages.append)
    assert any("read in full" in m and "host-1" in m for m in messages), messages
    assert report.analysis.step_ops.groupby("device")["step"].nunique().gt(1).any()
    assert report.render("json") == _all_events(run, monkeypatch).render("json")

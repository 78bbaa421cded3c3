"""Multi-host captures read per host (analyzer/hosts/map.py): each TPU host reduced where it is read and the
reductions merged give the numbers of the all-events path, for 1 or 2 worker processes or a Dask cluster."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import xladiag.analyzer.hosts.map as host_map
from builders.large_capture import multi_host_capture
from builders.scenarios import loop_fusion
from builders.xspace_encoder import FIRST_STEP_START_PS, TpuCaptureBuilder
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.hosts.reduce import reduce_host
from xladiag.analyzer.steps.occurrences import representative_steps
from xladiag.analyzer.tables import STEP_EVENTS
from xladiag.api import build_report, diagnose
from xladiag.cli import main as cli_main
from xladiag.errors import UsageError
from xladiag.parsers.xplane import read_xspace
from xladiag.report.chart_data import representative_step_events


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Three TPU hosts of 4 devices, ~14k op events each, all-gathers with async spans."""
    paths = multi_host_capture(tmp_path_factory.mktemp("mh"), hosts=3, events_per_host=14_000, ops_per_step=200)
    return paths[0].parent


def _all_events(path, monkeypatch, **kw):
    """The analysis from every host's events (each host read raw, the single-capture path)."""
    with monkeypatch.context() as m:
        m.setattr(host_map, "reduce_host", lambda p, forced=None, raw=False, choice=None: reduce_host(p, forced, True))
        return analyze(path, workers=1, **kw)


def _same_analysis(reduced, full, same_warnings=True):
    ops_r, ops_f = reduced.ops, full.ops
    assert list(ops_r["op_name"]) == list(ops_f["op_name"]) and list(ops_r["op_id"]) == list(ops_f["op_id"])
    for col in ops_f.columns:
        a, b = ops_r[col], ops_f[col]
        if pd.api.types.is_float_dtype(b):  # sums of integer picoseconds vs sums of seconds: last-bit differences
            np.testing.assert_allclose(a.to_numpy(float), b.to_numpy(float), rtol=1e-12, err_msg=col)
        else:
            assert a.isna().tolist() == b.isna().tolist(), col
            assert a[a.notna()].astype(str).tolist() == b[b.notna()].astype(str).tolist(), col
    pd.testing.assert_frame_equal(reduced.steps.table, full.steps.table)
    np.testing.assert_array_equal(reduced.steps.busy_ps, full.steps.busy_ps)
    np.testing.assert_array_equal(reduced.steps.busy_any_ps, full.steps.busy_any_ps)
    pd.testing.assert_frame_equal(reduced.device_steps, full.device_steps)
    # Reduced: the spans' numbers are the hosts' sums, their rows those of the representative steps.
    rep = representative_steps(full.steps).merge(full.transfers.spans, on=["device", "step"])[
        list(full.transfers.spans.columns)].sort_values(["device", "start_ps", "op_id"], kind="stable")
    pd.testing.assert_frame_equal(reduced.transfers.spans.sort_values(["device", "start_ps", "op_id"], kind="stable")
                                  .reset_index(drop=True), rep.reset_index(drop=True))
    assert len(full.transfers.spans) > len(reduced.transfers.spans) or full.transfers.spans.empty
    assert reduced.transfers.recording_devices == full.transfers.recording_devices
    assert reduced.transfers.busy_s_per_step == pytest.approx(full.transfers.busy_s_per_step, rel=1e-12)
    assert reduced.breakdown == pytest.approx(full.breakdown, rel=1e-12)
    assert reduced.hosts == full.hosts and (reduced.warnings == full.warnings or not same_warnings)
    pd.testing.assert_frame_equal(reduced.devices.drop(columns="plane_stats"), full.devices.drop(columns="plane_stats"))
    # The timeline draws the same representative steps from the events the hosts kept.
    ev_r, lanes_r, span_r, _ = representative_step_events(reduced)
    ev_f, lanes_f, span_f, _ = representative_step_events(full)
    pd.testing.assert_frame_equal(ev_r, ev_f)
    assert (lanes_r, span_r) == (lanes_f, span_f)
    assert [f.title for f in build_report(reduced).findings] == [f.title for f in build_report(full).findings]


def test_reduced_hosts_give_the_all_events_numbers(run_dir, monkeypatch):
    reduced = analyze(run_dir, workers=1)
    full = _all_events(run_dir, monkeypatch)
    assert len(reduced.hosts) == 3 and reduced.num_devices == 12
    # Reduced: the step events are one step per device; all-events: every measured step.
    assert reduced.step_ops.groupby("device")["step"].nunique().eq(1).all()
    assert len(full.step_ops) > 3 * len(reduced.step_ops)
    assert reduced.transfers.spans["kind"].eq("all-gather").any()
    _same_analysis(reduced, full)


def test_one_and_two_workers_write_the_same_json(run_dir):
    one = diagnose(run_dir, workers=1).render("json")
    two = diagnose(run_dir, workers=2).render("json")
    assert one == two


def test_a_host_repeating_another_counts_once(run_dir, tmp_path, monkeypatch):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    shutil.copy(copy / "t1v-n-01.xplane.pb", copy / "t1v-n-09.xplane.pb")
    reduced = analyze(copy, workers=2)
    assert any("1 host file(s) repeat another host's planes" in w for w in reduced.warnings)
    _same_analysis(reduced, _all_events(copy, monkeypatch))


def _host(path, host: str, eval_ps: int, annotated: bool) -> None:
    """Two devices, 5 executions of a 3-op train step; ``eval_ps`` of a one-op eval program per device."""
    b = TpuCaptureBuilder(num_devices=2, host=host)
    ops = [loop_fusion(f"fusion.{i}", [1024, 512 * (i + 1)]) for i in range(3)]
    step_ps = sum(op.duration_ps for op in ops) + 1_000_000
    for dev in range(2):
        for s in range(5):
            t = FIRST_STEP_START_PS + s * step_ps
            b.add_module_run(dev, "jit_train_step", 7, t, step_ps - 500_000, s + 1)
            for op in ops:
                b.add_op(dev, op.name, op.text, op.category, t, op.duration_ps, program_id=7,
                         flops=op.flops, bytes_accessed=op.bytes_accessed)
                t += op.duration_ps
        if eval_ps:
            t = FIRST_STEP_START_PS + 6 * step_ps
            b.add_module_run(dev, "jit_eval", 9, t, eval_ps, 6)
            ev = loop_fusion("eval_fusion.1", [2048, 2048], duration_ps=eval_ps)
            b.add_op(dev, ev.name, ev.text, ev.category, t, eval_ps, program_id=9, flops=ev.flops,
                     bytes_accessed=ev.bytes_accessed)
    if annotated and host != "h2":  # annotations on some hosts only: the run is annotated, h2 follows
        for s in range(5):
            b.add_host_event("train", FIRST_STEP_START_PS + s * step_ps - 100, step_ps, step_num=s)
    b.write(path, run="r")


@pytest.mark.parametrize("annotated", [False, True])
def test_a_host_whose_own_steps_differ_is_reduced_again_with_the_runs(tmp_path, monkeypatch, annotated):
    # h2 alone would take jit_eval (8 step-lengths; its own train steps sum to 5) for the step; over the run's
    # three hosts jit_train_step (15) wins.
    for host, eval_ps in (("h0", 0), ("h1", 0), ("h2", 0)):
        _host(tmp_path, host, eval_ps, annotated)
    baseline_step = analyze(tmp_path, workers=1).steps
    _host(tmp_path, "h2", 8 * int(baseline_step.table["duration_ps"].max()), annotated)
    messages: list[str] = []
    reduced = analyze(tmp_path, workers=2, progress=messages.append)
    assert any("reduced again" in m for m in messages), messages
    assert reduced.steps.program == ("" if annotated else "jit_train_step")
    # The eval program is listed outside the steps, not measured per step.
    eval_row = reduced.ops[reduced.ops["op_name"] == "eval_fusion.1"]
    assert len(eval_row) == 1 and not eval_row["in_step"].iloc[0]
    _same_analysis(reduced, _all_events(tmp_path, monkeypatch))


@pytest.mark.parametrize("given", [{"steps": "2:4"}, {"program": "jit_train_step", "steps": "3:"}])
def test_chosen_steps_reduce_each_host_once(run_dir, monkeypatch, given):
    """The workers get the user's choice: each host is reduced once, the JSON that of reducing it with its own
    steps first and again with the run's (the behaviour before the choice reached the workers)."""
    calls: list[tuple[str, bool]] = []

    def counted(path, forced=None, raw=False, choice=None, *, drop_choice=False):
        calls.append((path, forced is not None))
        return reduce_host(path, forced, raw, None if drop_choice else choice)

    monkeypatch.setattr(host_map, "reduce_host", counted)
    once = diagnose(run_dir, workers=1, **given).render("json")
    assert len(calls) == 3 and len({p for p, _ in calls}) == 3 and not any(f for _, f in calls), calls
    calls.clear()
    monkeypatch.setattr(host_map, "reduce_host", lambda *a, **k: counted(*a, **k, drop_choice=True))
    twice = diagnose(run_dir, workers=1, **given).render("json")
    assert len(calls) == 6 and sum(f for _, f in calls) == 3  # the old way: every host read again, forced
    assert once == twice


@pytest.mark.slow
def test_dask_local_cluster_gives_the_local_json(run_dir):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        on_dask = diagnose(run_dir, scheduler=cluster.scheduler_address).render("json")
    assert on_dask == diagnose(run_dir, workers=1).render("json")


def test_scheduler_without_dask_names_the_extra(run_dir, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "distributed", None)
    with pytest.raises(UsageError, match=r"xladiag\[dask\]"):
        analyze(run_dir, scheduler="tcp://127.0.0.1:8786")


def test_workers_must_be_positive(run_dir):
    result = CliRunner().invoke(cli_main, [str(run_dir), "--workers", "0", "-o", "-"])
    assert result.exit_code == 2 and "--workers" in result.output


def test_the_real_v6e_capture_reduced_as_one_of_two_hosts(tmp_path, tpu_xplane):
    # The second file repeats the first byte for byte: the run is one host, read the per-host way; the real
    # capture brings its own HLO (host:metadata), host-offload copies and their async spans.
    for name in ("t1v-n-0.xplane.pb", "t1v-n-1.xplane.pb"):
        shutil.copy(tpu_xplane, tmp_path / name)
    reduced = analyze(tmp_path, workers=2)
    full = analyze(tpu_xplane)
    added = set(reduced.warnings) - set(full.warnings)
    assert len(added) == 1 and "1 host file(s) repeat another host's planes" in added.pop()
    assert reduced.transfers.spans["kind"].notna().any() and reduced.ops["flops_source"].eq("trace").any()
    per_device = [f.step_ops.groupby("device")["step"].nunique() for f in (reduced, full)]
    assert per_device[0].eq(1).all() and per_device[1].gt(1).all()  # the per-host way indeed
    _same_analysis(reduced, full, same_warnings=False)


def test_a_corrupt_host_is_one_line_naming_it(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    bad = copy / "t1v-n-01.xplane.pb"
    bad.write_bytes(bad.read_bytes()[:5000])
    result = CliRunner().invoke(cli_main, [str(copy), "--workers", "2", "-o", "-", "--format", "json"])
    assert result.exit_code == 1 and "t1v-n-01.xplane.pb" in result.output and "Traceback" not in result.output


def test_each_programs_hlo_and_op_metadata_are_kept_once_as_hosts_arrive():
    from collections import Counter
    from pathlib import Path

    from xladiag.analyzer.hosts.reduce import HostHlo, HostPart

    def part(i, protos, ops):
        meta = pd.DataFrame({"program_id": ["7"] * len(ops), "op_name": ops, "flops": [float(i)] * len(ops)})
        return HostPart(f"h{i}", f"h{i}", f"f{i}", Counter(), "tpu", hlo=HostHlo(Path(f"h{i}"), tuple(protos)),
                        op_metadata=meta)

    train, ev = ("7", "jit_train_step", b"A" * 1000), ("9", "jit_eval", b"E")
    train_recompiled = ("7", "jit_train_step", b"B")  # the same id, other bytes: kept apart
    hosts = [part(0, [train], ["a", "b"]), part(1, [train, ev], ["a", "c"]),
             part(2, [train_recompiled, ev], ["a", "b", "d"])]
    programs = host_map._Programs()
    arrived = {i: programs.take(i, hosts[i]) for i in (1, 0, 2)}  # workers finish in any order
    assert len(programs.data) == 3  # one copy of each distinct (program, bytes)
    back = [programs.give_back(i, arrived[i]).hlo.hlo_protos for i in range(3)]
    assert back == [(train,), (ev,), (train_recompiled,)]
    # Host 2 arrived after 0 and 1: its rows for ops they have are gone; the merge keeps the same rows.
    assert arrived[2].op_metadata["op_name"].tolist() == ["d"]
    merged = pd.concat([arrived[i].op_metadata for i in range(3)]).drop_duplicates(["program_id", "op_name"])
    full = pd.concat([h.op_metadata for h in hosts]).drop_duplicates(["program_id", "op_name"])
    pd.testing.assert_frame_equal(merged, full)


def test_gpu_and_cpu_hosts_are_read_in_parallel_with_all_their_events(tmp_path, tpu_xplane):
    # A CPU host beside a TPU host: the TPU one, reduced first, is read again in full; the capture is the
    # TPU one (the CPU host has no TPU devices), read as the single-capture path reads both files.
    from conftest import CPU_SAMPLE, only_xplane

    shutil.copy(tpu_xplane, tmp_path / "a-tpu.xplane.pb")
    shutil.copy(only_xplane(CPU_SAMPLE), tmp_path / "b-cpu.xplane.pb")
    messages: list[str] = []
    mixed = analyze(tmp_path, workers=2, progress=messages.append)
    assert any("read again in full" in m for m in messages), messages
    per_device = mixed.step_ops.groupby("device")["step"].nunique()
    assert per_device.gt(1).all()  # every step's events: not reduced
    # The same tables as both files read in one process.
    both = host_map._single([read_xspace(tmp_path / "a-tpu.xplane.pb"), read_xspace(tmp_path / "b-cpu.xplane.pb")],
                            None)
    assert mixed.platform == both.platform == "tpu" and mixed.hosts == both.hosts
    pd.testing.assert_frame_equal(mixed.step_ops, STEP_EVENTS.coerce(both.step_ops))
    key = ["module", "program_id", "op_name"]
    got, want = (t.set_index(key)["measured_s_per_step"].sort_index() for t in (mixed.ops, both.op_table))
    pd.testing.assert_series_equal(got, want, check_dtype=False)


def test_a_threaded_process_starts_clean_workers_and_gets_the_same_json(run_dir):
    """A training process calling xladiag has other threads running (JAX's runtime): forking it could leave
    a worker waiting on a lock no thread holds, so the workers start in a fresh process instead."""
    from xladiag.parsers.worker_start import fork_is_safe, worker_context

    one = diagnose(run_dir, workers=1).render("json")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        assert not fork_is_safe()
        assert worker_context().get_start_method() in ("forkserver", "spawn")
        assert diagnose(run_dir, workers=2).render("json") == one
    finally:
        stop.set()
        thread.join()


def test_a_missing_program_and_an_empty_one_are_one_op_key():
    """A host's events with no program id and with an empty one name the same op key ('', op): one code, one
    key row (two would misalign the per-span op codes of the merge)."""
    from xladiag.analyzer.hosts.reduce import key_codes

    frame = pd.DataFrame({"program_id": pd.Categorical([None, "", "p"], categories=["", "p"]),
                          "op_name": pd.Categorical(["a", "a", "a"])})
    codes, keys = key_codes(frame)
    assert codes.tolist() == [0, 0, 1]
    assert keys.to_dict("records") == [{"program_id": "", "op_name": "a"}, {"program_id": "p", "op_name": "a"}]


def test_run_unsampled_runs_on_another_thread_and_raises_what_the_work_raised():
    import threading

    from xladiag.analyzer.hosts.dask_relay import run_unsampled

    here = threading.get_ident()
    assert run_unsampled(lambda a, b: (a + b, threading.get_ident() != here), 2, 3) == (5, True)

    def broken(path):
        raise UsageError(f"{path}: no such host")

    with pytest.raises(UsageError, match="h7: no such host"):
        run_unsampled(broken, "h7")


def test_without_an_interpreter_to_start_the_dask_client_runs_here(run_dir, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(host_map.sys, "executable", "")  # an embedded Python: no relay process can start
    started = []
    monkeypatch.setattr(host_map, "RelayExecutor", lambda *a: started.append(a))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None, protocol="tcp://") as cluster:
        assert cluster.scheduler_address.startswith("tcp://")
        on_dask = diagnose(run_dir, scheduler=cluster.scheduler_address).render("json")
    assert started == [] and on_dask == diagnose(run_dir, workers=1).render("json")

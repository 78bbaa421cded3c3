"""Steps as the user's loop defines them: by program id, by step annotations (host gaps included), and
device work attributed to the step that launched it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders.annotated_steps import annotated_tpu_steps
from conftest import REPO
from xladiag.analyzer.capture.build import build_capture
from xladiag.analyzer.steps.op_stats import measure
from xladiag.analyzer.steps.windows import find_steps
from xladiag.parsers.xplane import parse_xspace_bytes, read_xspace

SAMPLES = REPO / "sample_profiles"


def _capture(sample: str):
    return build_capture([read_xspace(next((SAMPLES / sample).glob("plugins/profile/*/*.xplane.pb")))])


def _measured(capture):
    step_ops, ops, steps = measure(capture, find_steps(capture))
    return step_ops, ops, steps


def test_programs_with_one_name_stay_apart():
    """Six jit_dot programs (one name, six ids): counted per id, the steps are the dominant one's runs."""
    known = json.loads((SAMPLES / "jax_many_programs" / "known_answers.json").read_text())
    runs = {str(p["program_id"]): p for p in known["programs"]}
    _, ops, steps = _measured(_capture("jax_many_programs"))
    by_id = ops.set_index("program_id")
    assert sorted(by_id.index) == sorted(runs) and (ops["op_name"] == "ynn_fusion").all()
    for pid, run in runs.items():
        assert by_id.loc[pid, "occurrences"] == run["executions"]
    longest = max(runs.values(), key=lambda r: r["executions"] * r["execution_span_ms"]["mean"])
    assert steps.program == "jit_dot" and steps.program_id == str(longest["program_id"]) == "10"
    assert steps.count == 1 and not steps.warmup_excluded and "jit_dot(10)" in steps.source
    assert steps.mean_s * 1e3 == pytest.approx(longest["execution_span_ms"]["mean"], rel=0.02)
    assert by_id.loc["10", "occurrences_per_step"] == 1.0


def test_annotated_steps_include_the_host_wait():
    """jax_fsdp_tp_train: 3 annotated steps, each waiting 60 ms for its loader: the step is the annotation,
    the device idles for the wait, and each step owns the train step and global norm it launched."""
    known = json.loads((SAMPLES / "jax_fsdp_tp_train" / "known_answers.json").read_text())
    step_ops, ops, steps = _measured(_capture("jax_fsdp_tp_train"))
    assert steps.annotated and "annotated" in steps.source and "'train'" in steps.source
    expected = {s["step_num"]: s for s in known["steps"]}
    wait = steps.host_wait_s()
    assert wait["step_num"].tolist() == [1, 2]  # step 0 is the warm-up
    for row in wait.itertuples():
        k = expected[row.step_num]
        assert row.duration_s * 1e3 == pytest.approx(k["annotated_ms"], abs=0.05)
        assert row.busy_any_s * 1e3 == pytest.approx(k["device_busy_ms_any_device"], rel=0.01)
        # The planted 60 ms loader wait is inside the step, and the device idles for it (within 5 %).
        assert row.all_idle_s * 1e3 == pytest.approx(k["annotated_ms"] - k["device_busy_ms_any_device"], rel=0.01)
        assert known["loader_wait_ms"] <= row.all_idle_s * 1e3 <= 1.05 * known["loader_wait_ms"]
    # Every device-step's duration is its annotation, and its busy time that device's share.
    assert np.allclose(steps.duration_s * 1e3, [expected[n]["annotated_ms"] for n in steps.after_warmup["step_num"]],
                       atol=0.05)
    launched = step_ops.groupby("step")["program_id"].agg(lambda p: set(p.astype(str)))
    assert all(p == {"101", "103"} for p in launched)


def test_device_work_belongs_to_the_step_that_launched_it():
    """Asynchronous dispatch: the host never waits, each step's device work runs during the next step's
    loader wait. It still belongs to the span that enqueued it, and the last one is not lost."""
    b, exp = annotated_tpu_steps(loader_ps=60_000_000_000, host_blocks=False)
    capture = build_capture([parse_xspace_bytes(b.serialize(), "async.xplane.pb")])
    step_ops, ops, steps = _measured(capture)
    assert steps.annotated and steps.count == 4
    spans = steps.after_warmup.drop_duplicates("step").set_index("step")
    first_op = step_ops.groupby("step")["start_ps"].min()
    # Each step's ops start after its own span ended (in the next span, or after the last one).
    assert (first_op >= spans.loc[first_op.index, "end_ps"]).all()
    assert (first_op - spans.loc[first_op.index, "end_ps"] < exp["device_ps"]).all()
    assert len(step_ops) == 4 * 4 * 3  # 4 measured steps x 4 cores x 3 ops, the last step's included
    wait = steps.host_wait_s()
    assert np.allclose(wait["busy_any_s"], exp["busy_any_ps"] / 1e12)
    assert np.allclose(wait["all_idle_s"], exp["idle_ps"] / 1e12)
    assert (ops.loc[ops["in_step"], "occurrences_per_step"] == 1.0).all()


def test_without_annotations_steps_are_program_executions():
    b, _ = annotated_tpu_steps(loader_ps=60_000_000_000, annotate=False)
    capture = build_capture([parse_xspace_bytes(b.serialize(), "plain.xplane.pb")])
    _, _, steps = _measured(capture)
    assert not steps.annotated and steps.source.startswith("5 executions of jit_train_step(")
    assert steps.busy_any_ps is not None and steps.count == 4


@pytest.mark.parametrize("sample", ["tpu_v6e_host_offload", "cpu_jax_train_step"])
def test_busy_time_taken_in_chunks_equals_one_pass(sample, monkeypatch):
    """with_busy_time unions the capture a million events at a time (bounded temporaries); blocks cut at a
    chunk's edge merge again, so any chunk size gives the one-pass busy times."""
    from xladiag.analyzer.steps import windows

    path = next((REPO / "sample_profiles" / sample).rglob("*.xplane.pb"))
    capture = build_capture([read_xspace(path)])
    steps = find_steps(capture)
    whole = measure(capture, steps)[2]
    monkeypatch.setattr(windows, "_BUSY_CHUNK", 7)
    chunked = measure(capture, steps)[2]
    assert whole.busy_ps is not None and len(whole.busy_ps) and whole.busy_ps.sum() > 0
    np.testing.assert_array_equal(chunked.busy_ps, whole.busy_ps)
    np.testing.assert_array_equal(chunked.busy_any_ps, whole.busy_any_ps)


@pytest.mark.parametrize("sample", ["tpu_v6e_host_offload", "cpu_jax_train_step"])
def test_step_events_come_in_start_order_as_a_full_sort_gives(sample):
    """assign_steps sorts only the events inside the steps: the same rows and order (ties by capture row) as
    sorting every event by start and dropping those outside, each column the capture's value of its row."""
    from xladiag.analyzer.steps.windows import assigned_steps

    capture = _capture(sample)
    events = capture.events
    step_ops, by_row = assigned_steps(events, find_steps(capture))
    order = np.argsort(events["start_ps"].to_numpy(), kind="stable")
    expected = order[by_row[order] >= 0]
    assert 0 < len(expected) < len(events)  # some events fall outside the steps (the warm-up)
    np.testing.assert_array_equal(step_ops["event"].to_numpy(), expected)
    for col in events.columns:
        assert step_ops[col].dtype == events[col].dtype
        np.testing.assert_array_equal(step_ops[col].to_numpy(), events[col].to_numpy()[expected])
    assert list(step_ops.index) == list(range(len(step_ops)))


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_rows_in_start_order_keep_ties_in_row_order(chunk, monkeypatch):
    """The rows inside the steps by (start, row), the others dropped in place a chunk at a time (any chunk
    size), and their step numbers: the full stable sort with the others dropped, and a plain gather."""
    from xladiag.analyzer.steps import windows
    from xladiag.analyzer.steps.windows import _in_start_order, _step_of

    monkeypatch.setattr(windows, "_CHUNK", chunk)
    rng = np.random.default_rng(3)
    start = np.sort(rng.integers(0, 40, 500)).reshape(5, 100).ravel()  # 5 devices, each in time order, many ties
    order = np.argsort(start, kind="stable")
    for by_row in (np.zeros(500, np.int64), np.where(rng.random(500) < 0.3, -1, 2)):
        events = _in_start_order(start, by_row)
        np.testing.assert_array_equal(events, order[by_row[order] >= 0])
        step = rng.integers(0, 9, 3)
        np.testing.assert_array_equal(_step_of(step, by_row, events), step[by_row[events]])


def test_ops_never_inside_by_codes_as_by_strings():
    """_never_inside on the key columns' category codes gives what the strings' MultiIndex gives (the path
    taken for columns that are not categorical), a missing value being a key value of its own."""
    import pandas as pd

    from xladiag.analyzer.steps.op_stats import OP_KEY, _never_inside

    rng = np.random.default_rng(5)
    n = 400
    names = rng.choice(["fusion.1", "copy.2", "dot.3", "init.4", None], n)
    events = pd.DataFrame({"module": pd.Categorical(rng.choice(["jit_a", "jit_b"], n)),
                           "program_id": pd.Categorical(rng.choice(["1", "2", None], n)),
                           "op_name": pd.Categorical(names)})
    outside = rng.random(n) < 0.4
    outside[names == "init.4"] = True  # an op that never runs inside
    got = _never_inside(events, outside)
    plain = events.astype(object)  # not categorical: the strings' path
    assert got.tolist() == _never_inside(plain, outside).tolist()
    want = ~pd.MultiIndex.from_frame(events.loc[outside, OP_KEY].astype(str)).isin(
        pd.MultiIndex.from_frame(events.loc[~outside, OP_KEY].astype(str)))
    assert got.tolist() == want.tolist() and got.any() and not got.all()

"""Async transfers: the kind of each op, each done op's start, and the per-op transfer columns."""

from __future__ import annotations

import pandas as pd
import pytest

from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.analyzer.hlo.dump import DumpModule
from xladiag.analyzer.hlo.facts import attach_hlo_facts
from xladiag.analyzer.hlo.op_bytes import wrapped_instruction
from xladiag.analyzer.models.collective_pricing import price_collectives
from xladiag.analyzer.steps.transfers import attach_transfers
from xladiag.analyzer.steps.windows import Steps
from xladiag.parsers.hlo_text import parse_hlo_module

MODULE = """HloModule jit_step, is_scheduled=true

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}

%wrapped_reduce_scatter (p: f32[1024]) -> (f32[128]) {
  %p = f32[1024]{0} parameter(0)
  %rs = f32[128]{0} reduce-scatter(f32[1024]{0} %p), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add
  ROOT %t = (f32[128]{0}) tuple(f32[128]{0} %rs)
}

ENTRY %main (a: bf16[128,4096], b: f32[1024], c: f32[256]) -> f32[256] {
  %a = bf16[128,4096]{1,0} parameter(0)
  %b = f32[1024]{0} parameter(1)
  %c = f32[256]{0} parameter(2)
  %all-gather-start = (bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) all-gather-start(bf16[128,4096]{1,0} %a), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}
  %all-gather-done = bf16[1024,4096]{1,0} all-gather-done((bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) %all-gather-start)
  %rs-start = ((f32[1024]{0}), (f32[128]{0})) async-start(f32[1024]{0} %b), calls=%wrapped_reduce_scatter
  %rs-done = (f32[128]{0}) async-done(((f32[1024]{0}), (f32[128]{0})) %rs-start), calls=%wrapped_reduce_scatter
  %copy-start = (f32[256]{0:S(5)}, f32[256]{0}, u32[]) copy-start(f32[256]{0} %c)
  %copy-done = f32[256]{0:S(5)} copy-done((f32[256]{0:S(5)}, f32[256]{0}, u32[]) %copy-start)
  ROOT %n = f32[256]{0} negate(f32[256]{0} %c)
}
"""


def _facts():
    module = parse_hlo_module(MODULE, "m.txt", strict=True)
    names = ["all-gather-start", "all-gather-done", "rs-start", "rs-done", "copy-start", "copy-done", "n"]
    table = pd.DataFrame({"module": "jit_step", "program_id": "", "op_name": names, "mean_s": 1e-6})
    dump = {("jit_step", ""): DumpModule(module)}  # the dump module matched to the program
    return module, price_collectives(attach_hlo_facts(table, None, dump), load_catalog()["v6e"], 8).set_index("op_name")


def test_wrapped_instruction_looks_past_the_tuple_root():
    module, _ = _facts()
    assert wrapped_instruction(module, module.instruction("rs-start")).opcode == "reduce-scatter"
    assert wrapped_instruction(module, module.instruction("rs-done")).opcode == "reduce-scatter"
    assert wrapped_instruction(module, module.instruction("all-gather-start")) is None


def test_every_done_op_knows_its_start_and_kind():
    _, ops = _facts()
    assert ops["start_op"].dropna().to_dict() == {
        "all-gather-done": "all-gather-start", "rs-done": "rs-start", "copy-done": "copy-start"}
    assert ops["transfer_kind"].isna()["n"]
    assert ops["transfer_kind"].dropna().to_dict() == {"all-gather-start": "all-gather", "all-gather-done": "all-gather",
                     "rs-start": "reduce-scatter",
                     "rs-done": "reduce-scatter", "copy-start": "host-offload", "copy-done": "host-offload"}
    # Only the ring model's collectives are priced; the wrapped reduce-scatter gets its start's replica group.
    assert ops.loc["rs-done", "collective_kind"] == "reduce-scatter"
    assert ops.loc["rs-done", "replica_group_size"] == 8
    assert ops["collective_kind"].isna()[["copy-start", "copy-done", "n"]].all()


US = 1_000_000  # ps


def _steps(devices, end_ps):
    table = pd.DataFrame({"device": devices, "step": 1, "start_ps": 0, "end_ps": end_ps, "duration_ps": end_ps,
                          "is_warmup": False})
    return Steps(table, "jit_step", "test", False)


def _ops(names, kinds, opcodes, measured_s, **extra):
    n = len(names)
    frame = pd.DataFrame({
        "module": "jit_step", "program_id": "1", "op_name": names, "op_id": range(n), "in_step": True,
        "transfer_kind": kinds, "opcode": opcodes, "is_async_start": [o.endswith("-start") for o in opcodes],
        "is_async_done": [o.endswith("-done") for o in opcodes], "start_op": None,
        "measured_s_per_step": measured_s, "predicted_s_per_step": 1e-6, "collective_bytes": 1e6, "host_bytes": 0.0,
        "occurrences_per_step": 1.0})
    for col, values in extra.items():
        frame[col] = values
    return frame


def test_gpu_kernel_exposure_is_the_part_no_compute_kernel_covers():
    """A 100 us all-reduce kernel on its own stream, half covered by two overlapping compute kernels."""
    ops = _ops(["all-reduce-start", "fusion.1", "fusion.2"], ["all-reduce", None, None],
               ["all-reduce-start", "fusion", "fusion"], [100e-6, 30e-6, 30e-6])
    step_ops = pd.DataFrame({"device": 0, "step": 1, "op_id": [0, 1, 2], "start_ps": [0, 10 * US, 30 * US],
                             "duration_ps": [100 * US, 30 * US, 30 * US]})
    out, transfers = attach_transfers(ops, step_ops, _steps([0], 200 * US), None, "gpu")
    row = out.set_index("op_name").loc["all-reduce-start"]
    assert row["exposed_s_per_step"] == pytest.approx(50e-6)  # [10, 60) us is covered
    assert row["hidden_fraction"] == pytest.approx(0.5)
    assert out["exposed_s_per_step"].isna().tolist() == [False, True, True]
    assert transfers.non_transfer_s_per_step == pytest.approx(50e-6)  # the two kernels' union
    assert transfers.busy_s_per_step == {"all-reduce": pytest.approx(100e-6)}


def test_tpu_spans_run_to_the_done_op_and_count_the_recording_device_only():
    """Device 0 records the span [0, 50) us; its done op waits [60, 80) us. Device 1 records nothing."""
    ops = _ops(["all-gather-start", "all-gather-done", "fusion"], ["all-gather", "all-gather", None],
               ["all-gather-start", "all-gather-done", "fusion"], [1e-6, 15e-6, 40e-6],
               start_op=[None, "all-gather-start", None])
    step_ops = pd.DataFrame({"device": [0, 0, 0, 1, 1, 1], "step": 1, "op_id": [0, 2, 1, 0, 2, 1],
                             "start_ps": [0, 10 * US, 60 * US, 0, 10 * US, 60 * US],
                             "duration_ps": [1 * US, 40 * US, 20 * US, 1 * US, 40 * US, 10 * US]})
    spans = pd.DataFrame({"device": [0], "program_id": ["1"], "start_op": ["all-gather-start"],
                          "done_op": ["all-gather-done"], "kind": ["all-gather"], "start_ps": [0], "end_ps": [50 * US]})
    out, transfers = attach_transfers(ops, step_ops, _steps([0, 1], 100 * US), spans, "tpu")
    done = out.set_index("op_name").loc["all-gather-done"]
    assert done["start_op_id"] == 0 and (out["start_op_id"] == -1).sum() == 2
    assert done["in_flight_s_per_step"] == pytest.approx(80e-6)  # start to the done op's end on device 0
    assert done["exposed_where_in_flight_measured_s_per_step"] == pytest.approx(20e-6)  # device 0's wait
    assert done["hidden_fraction"] == pytest.approx(0.75)
    assert done["exposed_s_per_step"] == 15e-6  # the op table's mean over both devices
    assert transfers.spans[["device", "step", "op_id", "kind", "start_ps", "end_ps"]].values.tolist() == [
        [0, 1, 1, "all-gather", 0, 80 * US]]
    assert transfers.recording_devices == 1 and transfers.busy_s_per_step == {"all-gather": pytest.approx(80e-6)}
    assert transfers.non_transfer_s_per_step == 40e-6  # TPU: one op at a time, the plain sum
    # Starts only issue the transfer on TPU: no exposure row.
    assert out["exposed_s_per_step"].notna().tolist() == [False, True, False]


def test_spans_outside_the_steps_are_dropped_and_unknown_done_ops_have_no_kind():
    """Only the spans that end in a measured step are kept (the others' columns dropped with them); a span whose
    done op is no op of the step keeps op_id -1 and a missing kind; the kinds' categories are those present."""
    ops = _ops(["all-gather-start", "all-gather-done", "copy-start", "copy-done", "fusion"],
               ["all-gather", "all-gather", "host-to-device", "host-to-device", None],
               ["all-gather-start", "all-gather-done", "copy-start", "copy-done", "fusion"], [1e-6, 15e-6, 1e-6, 2e-6,
                                                                                             40e-6],
               start_op=[None, "all-gather-start", None, "copy-start", None])
    step_ops = pd.DataFrame({"device": [0, 0, 0], "step": 1, "op_id": [0, 1, 4], "start_ps": [0, 10 * US, 60 * US],
                             "duration_ps": [1 * US, 40 * US, 20 * US]})
    spans = pd.DataFrame({"device": [0, 0, 0, 1], "program_id": ["1", "1", "1", "1"],
                          "start_op": ["all-gather-start", "x-start", "all-gather-start", "all-gather-start"],
                          "done_op": ["all-gather-done", "x-done", "all-gather-done", "all-gather-done"],
                          "kind": "all-gather", "start_ps": [0, 5 * US, 200 * US, 0],
                          "end_ps": [50 * US, 30 * US, 300 * US, 50 * US]})  # the third ends after the step
    _, transfers = attach_transfers(ops, step_ops, _steps([0, 1], 100 * US), spans, "tpu")
    got = transfers.spans
    assert got[["device", "op_id", "start_ps", "end_ps"]].values.tolist() == [
        [0, 1, 0, 50 * US], [0, -1, 5 * US, 30 * US], [1, 1, 0, 50 * US]]
    assert got["kind"].astype(object).where(got["kind"].notna(), None).tolist() == ["all-gather", None, "all-gather"]
    assert list(got["kind"].cat.categories) == ["all-gather"]  # host-to-device: no span of it


@pytest.mark.parametrize("seed", range(12))
def test_done_ends_against_brute_force(seed):
    # Per span: the earliest end, at or after its start, of its done op's events in its device-step; captures
    # hours long (times near 2**62 ps apart across steps) too.
    import numpy as np

    from xladiag.analyzer.steps.transfer_spans import done_ends

    rng = np.random.default_rng(seed)
    n_rows, n_ops = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    step_start = np.sort(rng.integers(0, 2**62 if seed % 2 else 10**6, n_rows))
    rows, op = rng.integers(-1, n_rows, 30), rng.integers(-1, n_ops, 30)
    start = step_start[np.maximum(rows, 0)] + rng.integers(0, 100, 30)
    ev_rows, ev_op = rng.integers(0, n_rows, 60), rng.integers(0, n_ops + 1, 60)
    ev_end = step_start[ev_rows] + rng.integers(0, 120, 60)
    want = []
    for s, r, o in zip(start, rows, op):
        later = [e for e, er, eo in zip(ev_end, ev_rows, ev_op) if er == r and eo == o and e >= s]
        want.append(min(later) if later and r >= 0 and o >= 0 else -1)
    assert done_ends(start, rows, op, ev_rows, ev_op, ev_end).tolist() == want


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_first_rows_and_first_seen_ids_in_chunks(chunk, monkeypatch):
    """first_rows and first_seen_ids work a chunk of rows at a time (bounded temporaries): any chunk size gives
    np.unique's first indices and pandas' ngroup in order of appearance."""
    import numpy as np

    from xladiag.analyzer.steps import codes
    from xladiag.analyzer.steps.op_stats import first_seen_ids

    monkeypatch.setattr(codes, "CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    values = rng.integers(0, 30, 1000)
    values[values == 17] = 3  # a code that never occurs
    first = codes.first_rows(values, 31)
    distinct, index = np.unique(values, return_index=True)
    assert first[distinct].tolist() == index.tolist()
    assert (first[np.setdiff1d(np.arange(31), distinct)] == len(values)).all()
    keys = pd.DataFrame({"module": rng.choice(["a", "b"], 1000), "op_name": pd.Categorical(values.astype(str))})
    want = keys.groupby(["module", "op_name"], sort=False, observed=True).ngroup().to_numpy()
    assert first_seen_ids(keys).tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_code_lookups_match_numpy(seed):
    # steps.codes: lookup tables over the codes' range give what np.unique, np.isin and a join give.
    import numpy as np

    from xladiag.analyzer.steps.codes import among, op_rows, unique_codes

    rng = np.random.default_rng(seed)
    top = 40 if seed % 2 else 10**6  # a small range (counted) and a wide one (np.unique)
    codes = rng.integers(0, top, 300)
    for got, want in zip(unique_codes(codes, top), np.unique(codes, return_index=True, return_inverse=True)):
        assert got.tolist() == want.tolist()
    values, wanted = rng.integers(-2, 50, 200), rng.integers(-3, 60, 10)
    assert among(values, wanted).tolist() == np.isin(values, wanted[wanted >= 0]).tolist()
    assert among(np.abs(values), wanted).tolist() == np.isin(np.abs(values), wanted[wanted >= 0]).tolist()
    ops = pd.DataFrame({"op_id": rng.permutation(np.append(np.arange(20), [-1, -1]))})
    queried = rng.integers(-1, 25, 50)
    rows = {op: i for i, op in enumerate(ops["op_id"]) if op >= 0}
    assert op_rows(ops, queried).tolist() == [rows.get(q, -1) if q >= 0 else -1 for q in queried]

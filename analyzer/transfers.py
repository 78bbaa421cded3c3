"""Transfers the step waits on: async spans assigned to steps once, and per-op exposure columns.

A transfer is an op of :data:`~.collectives.TRANSFER_KINDS` (``transfer_kind``, from ``hlo_facts``). Async
transfers come in pairs: a start op issues the transfer and a done op waits for it (``start_op``, found
once in ``hlo_facts`` from the done op's operand, becomes ``start_op_id`` here). What the device waits is
the *exposed* time; the start-to-done time is the time *in flight*:

* TPU: the done op's time on the op line is the wait; the "Async XLA Ops" line records each transfer's
  start-to-done span (possibly on one device only), extended to the end of its done op.
* GPU: the communication kernels do the transfer; the part no compute kernel on the same device overlaps
  (any stream) is exposed, and the kernel time is in flight.
* CPU: collectives are synchronous: all of their time is exposed.
* HLO only: the predicted transfer time stands in for the exposed time.

Everything is per step: seconds summed over the measured device-steps (of the devices that recorded
spans, for in-flight time) and divided by their number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .intervals import covered, first_at_or_after, union_length
from .steps import PS_PER_S, Steps, measured_rows, step_rows
from .tables import TRANSFER_SPANS

@dataclass(frozen=True)
class Transfers:
    """Step-level transfer numbers; the per-op ones are columns of the ops table (tables.OPS)."""

    spans: pd.DataFrame  # tables.TRANSFER_SPANS
    recording_devices: int = 0  # devices whose capture recorded async spans
    non_transfer_s_per_step: float = 0.0  # union of the other ops per step: what transfers can hide behind
    busy_s_per_step: dict[str, float] = field(default_factory=dict)  # per kind: union of its transfers' time


def _flag(ops: pd.DataFrame, col: str) -> np.ndarray:
    return ops[col].fillna(False).to_numpy(dtype=bool)


def _op_ids(ops: pd.DataFrame, module, program_id, name) -> np.ndarray:
    """op_id of each (module or None, program_id, op_name) among the step's ops, -1 when none."""
    step = ops[ops["op_id"] >= 0]
    keys = ["program_id", "op_name"] if module is None else ["module", "program_id", "op_name"]
    table = step[keys + ["op_id"]].astype({k: str for k in keys}).drop_duplicates(keys)
    query = pd.DataFrame({"program_id": pd.Series(program_id).astype(object).fillna("").astype(str).to_numpy(),
                          "op_name": pd.Series(name).astype(str).to_numpy()})
    if module is not None:
        query["module"] = pd.Series(module).astype(str).to_numpy()
    joined = query.merge(table, on=keys, how="left")
    return joined["op_id"].fillna(-1).to_numpy(np.int64)


def _by_op(op_ids: np.ndarray, values: np.ndarray, ops: pd.DataFrame) -> np.ndarray:
    """Sum of ``values`` per op_id, aligned with the rows of ``ops`` (0 for ops without values)."""
    ids = ops["op_id"].to_numpy(np.int64)
    size = max(int(ids.max(initial=-1)), int(op_ids.max(initial=-1))) + 1
    sums = np.bincount(op_ids[op_ids >= 0], weights=values[op_ids >= 0], minlength=size)
    return np.where(ids >= 0, sums[np.maximum(ids, 0)], 0.0)


def transfer_spans(async_spans: pd.DataFrame, ops: pd.DataFrame, step_ops: pd.DataFrame,
                   steps: Steps) -> pd.DataFrame:
    """The recorded async spans that end in a measured step (tables.TRANSFER_SPANS)."""
    if async_spans is None or async_spans.empty:
        return TRANSFER_SPANS.empty()
    span_end = async_spans["end_ps"].to_numpy(np.int64)
    rows = step_rows(steps, async_spans["device"].to_numpy(np.int64), span_end - 1)
    inside = rows >= 0
    sp = async_spans[inside]
    rows, span_end = rows[inside], span_end[inside]
    start = sp["start_ps"].to_numpy(np.int64)
    op_id = _op_ids(ops, None, sp["program_id"], sp["done_op"])
    # The recorded span can end before its done op does (v6e: copy-done.5 waits 182 ms behind a span that
    # closed 115 ms after the start), so the transfer runs to the done op's end: the first event of that
    # done op in the same device-step that ends at or after the span began.
    done_ops = np.unique(op_id[op_id >= 0])
    done = step_ops[np.isin(step_ops["op_id"].to_numpy(np.int64), done_ops)]
    ev_rows = measured_rows(steps, done["device"], done["step"])
    ev_end = done["start_ps"].to_numpy(np.int64) + done["duration_ps"].to_numpy(np.int64)
    # Group = (device-step, done op), the op numbered densely among the done ops: small codes, one sort key.
    width = len(done_ops)
    ev_group = ev_rows * width + np.searchsorted(done_ops, done["op_id"].to_numpy(np.int64))
    span_group = np.where(op_id >= 0, rows * width + np.searchsorted(done_ops, op_id), -1)
    hit = first_at_or_after(start, span_group, ev_end, ev_group)
    end = np.maximum(span_end, np.where(hit >= 0, ev_end[np.maximum(hit, 0)], 0))
    kind = ops.set_index("op_id")["transfer_kind"] if len(ops) else pd.Series(dtype=object)
    kind = kind[kind.index >= 0]
    measured = steps.after_warmup
    return TRANSFER_SPANS.coerce(pd.DataFrame({
        "device": sp["device"].to_numpy(np.int64), "step": measured["step"].to_numpy(np.int64)[rows],
        "op_id": op_id, "kind": kind.reindex(op_id).astype(object).to_numpy(), "start_ps": start, "end_ps": end}))


def _gpu_exposed_ps(step_ops: pd.DataFrame, is_comm: np.ndarray) -> np.ndarray:
    """Per communication event: the part no compute kernel on the same device overlaps (any stream)."""
    start = step_ops["start_ps"].to_numpy(np.int64)
    end = start + _extent(step_ops)
    device = step_ops["device"].to_numpy(np.int64)
    hidden = covered(start[is_comm], end[is_comm], device[is_comm], start[~is_comm], end[~is_comm],
                     device[~is_comm])
    return (end - start)[is_comm] - hidden


def _extent(step_ops: pd.DataFrame) -> np.ndarray:
    """Timeline extent of each event, for overlaps (GPU kernels: their span on the stream)."""
    return step_ops["span_ps" if "span_ps" in step_ops else "duration_ps"].to_numpy(np.int64)


def _union_s(steps: Steps, device, step, start, end) -> float:
    rows = measured_rows(steps, device, step)
    return float(union_length(start, end, rows, len(steps.after_warmup)).sum()) / PS_PER_S


def attach_transfers(ops: pd.DataFrame, step_ops: pd.DataFrame | None, steps: Steps | None,
                     async_spans: pd.DataFrame | None, platform: str) -> tuple[pd.DataFrame, Transfers]:
    """``ops`` with the transfer columns (tables.OPS: ``start_op_id`` ... ``hidden_fraction``), and the
    step-level :class:`Transfers`."""
    ops = ops.copy()
    kind = ops["transfer_kind"].astype(object).where(ops["transfer_kind"].notna(), None)
    is_kind = kind.notna().to_numpy()
    done = _flag(ops, "is_async_done")
    start = _flag(ops, "is_async_start") | ops["opcode"].isin(["send", "recv"]).to_numpy()
    in_step = _flag(ops, "in_step")
    gpu, measured = platform == "gpu", platform != "hlo" and steps is not None
    ops["start_op_id"] = np.where(done, _op_ids(ops, ops["module"], ops["program_id"], ops["start_op"]), -1) \
        if len(ops) else np.zeros(0, np.int64)
    ops["transfer_is_async"] = start | done
    per_occurrence = ops["collective_bytes"].astype(float).fillna(ops["host_bytes"].astype(float))
    ops["transfer_bytes_per_step"] = per_occurrence * ops["occurrences_per_step"].astype(float).fillna(1.0)
    # The rows whose time is a wait: on GPU the start kernel does the transfer; on TPU starts only issue it.
    waits = in_step & is_kind & (gpu | ~start)
    spans, recording, n_span = TRANSFER_SPANS.empty(), 0, 1
    plain = ~is_kind & ~start & ~done
    busy: dict[str, float] = {}
    if not measured:
        exposed = ops["predicted_s_per_step"].fillna(0.0).to_numpy(float)
        in_flight = np.full(len(ops), np.nan)
        exposed_where = exposed
        non_transfer = float(ops.loc[plain, "predicted_s_per_step"].sum())
    else:
        n = max(len(steps.after_warmup), 1)
        ev_ids = step_ops["op_id"].to_numpy(np.int64)
        pos = pd.Series(np.arange(len(ops)), index=ops["op_id"].to_numpy())
        pos = pos[pos.index >= 0].reindex(ev_ids).fillna(-1).to_numpy(np.int64)
        ev_kind = np.where(pos >= 0, kind.to_numpy(dtype=object)[np.maximum(pos, 0)], None)
        ev_is_comm = pd.notna(ev_kind)
        ev_async = np.where(pos >= 0, (start | done)[np.maximum(pos, 0)], False)
        ev_start = step_ops["start_ps"].to_numpy(np.int64)
        ev_end = ev_start + _extent(step_ops)
        if gpu:
            exposed = _by_op(ev_ids[ev_is_comm], _gpu_exposed_ps(step_ops, ev_is_comm).astype(float), ops)
            exposed = exposed / PS_PER_S / len(steps.after_warmup)
            in_flight = ops["measured_s_per_step"].to_numpy(float)
            exposed_where = exposed
        else:
            exposed = ops["measured_s_per_step"].fillna(0.0).to_numpy(float)
            spans = transfer_spans(async_spans, ops, step_ops, steps)
            recording = int(async_spans["device"].nunique()) if async_spans is not None and len(async_spans) else 0
            span_devices = spans["device"].unique()
            n_span = max(int(steps.after_warmup["device"].isin(span_devices).sum()), 1)
            has_span = np.isin(ops["op_id"].to_numpy(np.int64), spans["op_id"].to_numpy(np.int64))
            has_span &= ops["op_id"].to_numpy(np.int64) >= 0
            in_flight = _by_op(spans["op_id"].to_numpy(np.int64),
                               (spans["end_ps"] - spans["start_ps"]).to_numpy(float), ops) / PS_PER_S / n_span
            in_flight = np.where(has_span, in_flight, np.nan)
            # The done ops' waits on the span devices only, over the same device-steps as the spans.
            on_span = np.isin(step_ops["device"].to_numpy(np.int64), span_devices)
            exposed_where = _by_op(ev_ids[on_span], step_ops["duration_ps"].to_numpy(float)[on_span],
                                   ops) / PS_PER_S / n_span
            sync = ~(start | done)
            in_flight = np.where(sync, exposed, in_flight)
            exposed_where = np.where(sync, exposed, exposed_where)
        if platform == "tpu":  # one op at a time on the op line: the union is the plain sum
            non_transfer = float(ops.loc[in_step & plain, "measured_s_per_step"].sum())
        else:
            compute = ~ev_is_comm & ~ev_async
            non_transfer = _union_s(steps, step_ops["device"][compute], step_ops["step"][compute],
                                    ev_start[compute], ev_end[compute]) / n
        if gpu:
            parts = pd.DataFrame({"device": step_ops["device"].to_numpy(), "step": step_ops["step"].to_numpy(),
                                  "start_ps": ev_start, "end_ps": ev_end, "kind": ev_kind})[ev_is_comm]
        else:
            parts = spans[spans["kind"].notna()]
            n = n_span if len(spans) else n
        for k, part in parts.groupby("kind", sort=True, observed=True):
            busy[k] = _union_s(steps, part["device"], part["step"], part["start_ps"].to_numpy(np.int64),
                               part["end_ps"].to_numpy(np.int64)) / n
        sync_waits = waits & ~(start | done)
        for k, part in pd.Series(exposed[sync_waits]).groupby(kind[sync_waits].to_numpy(), sort=True):
            busy[k] = busy.get(k, 0.0) + float(part.sum())  # synchronous: the time is the transfer
    ops["exposed_s_per_step"] = np.where(waits, exposed, np.nan)
    ops["exposed_where_in_flight_measured_s_per_step"] = np.where(waits, exposed_where, np.nan)
    ops["in_flight_s_per_step"] = np.where(waits, in_flight, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        hidden = np.clip(1.0 - ops["exposed_where_in_flight_measured_s_per_step"] / ops["in_flight_s_per_step"],
                         0.0, 1.0)
    ops["hidden_fraction"] = hidden.where(ops["in_flight_s_per_step"] > 0)
    return ops, Transfers(spans, recording, non_transfer, busy)

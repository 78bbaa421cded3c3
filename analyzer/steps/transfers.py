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
* HLO only: the wait the schedule predicts (analyzer/hlo/schedule.py: what of the transfer no work between its
  start and done hides; a synchronous one all of it, plus any wait for its link) stands in for the exposed time.

Everything is per step: seconds summed over the measured device-steps (of the devices that recorded
spans, for in-flight time) and divided by their number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..capture.intervals import covered, union_length
from ..tables import TRANSFER_SPANS
from .codes import among, op_rows
from .transfer_spans import op_ids, transfer_spans
from .windows import PS_PER_S, Steps, measured_rows


@dataclass(frozen=True)
class Transfers:
    """Step-level transfer numbers; the per-op ones are columns of the ops table (tables.OPS)."""

    spans: pd.DataFrame  # tables.TRANSFER_SPANS
    recording_devices: int = 0  # devices whose capture recorded async spans
    non_transfer_s_per_step: float = 0.0  # union of the other ops per step: what transfers can hide behind
    busy_s_per_step: dict[str, float] = field(default_factory=dict)  # per kind: union of its transfers' time


@dataclass(frozen=True)
class HostTotals:
    """What the transfer numbers need of the step's events when hosts were reduced where they were read
    (analyzer/hosts/merge.py), the step events then being one representative step per device."""

    span_device_ps: pd.Series  # op_id -> device time summed over the devices with spans in measured steps
    recording_devices: int  # devices whose capture recorded any async span
    # GPU and CPU hosts (analyzer/hosts/transfer_totals.py), summed over their measured device-steps: the union
    # of the compute events; GPU: op_id -> exposed time of its communication kernels, kind -> their union.
    non_transfer_ps: int | None = None
    exposed_ps: pd.Series | None = None
    kind_busy_ps: dict | None = None
    # TPU and CPU hosts (analyzer/hosts/span_sums.py): the async spans in measured steps as sums, the span rows
    # then being the representative steps' only: op_id -> in-flight time, kind -> union, devices with spans.
    in_flight_ps: pd.Series | None = None
    span_kind_ps: dict | None = None
    span_devices: np.ndarray | None = None


def _flag(ops: pd.DataFrame, col: str) -> np.ndarray:
    return ops[col].fillna(False).to_numpy(dtype=bool)


def _by_op(op_ids: np.ndarray, values: np.ndarray, ops: pd.DataFrame) -> np.ndarray:
    """Sum of ``values`` per op_id, aligned with the rows of ``ops`` (0 for ops without values)."""
    ids = ops["op_id"].to_numpy(np.int64)
    size = max(int(ids.max(initial=-1)), int(op_ids.max(initial=-1)), 0) + 1  # >= 1: the take below reads row 0
    some = op_ids >= 0
    if not some.all():  # (copies of millions of events only where some have no op)
        op_ids, values = op_ids[some], values[some]
    sums = np.bincount(op_ids, weights=values, minlength=size)
    return np.where(ids >= 0, sums[np.maximum(ids, 0)], 0.0)


def _extent(step_ops: pd.DataFrame) -> np.ndarray:
    """Timeline extent of each event, for overlaps (GPU kernels: their span on the stream)."""
    return step_ops["span_ps" if "span_ps" in step_ops else "duration_ps"].to_numpy(np.int64)


def _union_s(steps: Steps, device, step, start, end) -> float:
    """Seconds covered by the intervals, summed over the measured device-steps."""
    rows = measured_rows(steps, device, step)
    return float(union_length(start, end, rows, len(steps.after_warmup)).sum()) / PS_PER_S


@dataclass(frozen=True)
class _Ops:
    """What the transfer arithmetic needs of each op row."""

    kind: pd.Series  # transfer kind or None
    start: np.ndarray  # issues a transfer (async start, send, recv)
    done: np.ndarray  # waits for one
    waits: np.ndarray  # its time is a wait: the rows that get exposure columns

    @property
    def is_async(self) -> np.ndarray:
        return self.start | self.done


@dataclass(frozen=True)
class _Events:
    """The step's events seen through their op (kind, async) with their timeline extent."""

    op_row: np.ndarray  # the event's row in the ops table, -1 for none
    op_kind: np.ndarray  # object, per ops row and one more (None, read by op_row -1): transfer kind or None
    is_comm: np.ndarray
    is_async: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def kind(self, which: np.ndarray) -> np.ndarray:
        """The transfer kind (object: str or None) of the events ``which`` selects."""
        return self.op_kind[self.op_row[which]]


def _events(ops: pd.DataFrame, step_ops: pd.DataFrame, o: _Ops) -> _Events:
    # Per-op values with one more slot (no op) that row -1 reads: a gather per event, no join or mask.
    row = op_rows(ops, step_ops["op_id"].to_numpy(np.int64))
    op_kind = np.append(o.kind.to_numpy(dtype=object), None)
    start = step_ops["start_ps"].to_numpy(np.int64)
    return _Events(row, op_kind, np.append(pd.notna(op_kind[:-1]), False)[row], np.append(o.is_async, False)[row],
                   start, start + _extent(step_ops))


def _gpu_exposure(ops, step_ops, steps, ev: _Events):
    """(exposed, in flight, exposed where in flight) per op: the part of each communication kernel no compute
    kernel on the same device overlaps (any stream); the kernel time is in flight."""
    device = step_ops["device"].to_numpy(np.int64)
    comm, other = ev.is_comm, ~ev.is_comm
    hidden = covered(ev.start[comm], ev.end[comm], device[comm], ev.start[other], ev.end[other], device[other])
    per_op = _by_op(step_ops["op_id"].to_numpy(np.int64)[comm], ((ev.end - ev.start)[comm] - hidden).astype(float),
                    ops)
    exposed = per_op / PS_PER_S / len(steps.after_warmup)
    return exposed, ops["measured_s_per_step"].to_numpy(float), exposed


def _span_exposure(ops, step_ops, steps, spans: pd.DataFrame, o: _Ops, totals: HostTotals | None = None):
    """(exposed, in flight, exposed where in flight, span device-steps) per op from the op line and the
    recorded spans: in-flight time and the matching wait over the device-steps of the devices that recorded
    spans; synchronous transfers are in flight exactly while exposed."""
    exposed = ops["measured_s_per_step"].fillna(0.0).to_numpy(float)
    summed = totals is not None and totals.in_flight_ps is not None
    span_devices = totals.span_devices if summed else spans["device"].unique()
    n_span = max(int(steps.after_warmup["device"].isin(span_devices).sum()), 1)
    ids = ops["op_id"].to_numpy(np.int64)
    span_ids, flight = ((totals.in_flight_ps.index.to_numpy(np.int64), totals.in_flight_ps.to_numpy(float)) if summed
                        else (spans["op_id"].to_numpy(np.int64), (spans["end_ps"] - spans["start_ps"]).to_numpy(float)))
    in_flight = _by_op(span_ids, flight, ops) / PS_PER_S / n_span
    in_flight = np.where(among(ids, span_ids), in_flight, np.nan)  # (a lookup table: no sort of the spans' ids)
    if totals is not None:
        on_span_ps = totals.span_device_ps[totals.span_device_ps.index >= 0]
        exposed_where = _by_op(on_span_ps.index.to_numpy(np.int64), on_span_ps.to_numpy(float), ops) / PS_PER_S / n_span
    else:
        ev_op, duration = step_ops["op_id"].to_numpy(np.int64), step_ops["duration_ps"].to_numpy(float)
        on_span = among(step_ops["device"].to_numpy(np.int64), span_devices.astype(np.int64))
        if not on_span.all():  # (usually every device records spans: no copy then)
            ev_op, duration = ev_op[on_span], duration[on_span]
        exposed_where = _by_op(ev_op, duration, ops) / PS_PER_S / n_span
    sync = ~o.is_async
    return exposed, np.where(sync, exposed, in_flight), np.where(sync, exposed, exposed_where), n_span


def _kind_union_ps(parts: pd.DataFrame, steps: Steps) -> dict[str, int]:
    """Per kind (sorted): the union of its transfers' time over the measured device-steps, summed (ps)."""
    return {k: int(union_length(p["start_ps"].to_numpy(np.int64), p["end_ps"].to_numpy(np.int64),
                                 measured_rows(steps, p["device"], p["step"]), len(steps.after_warmup)).sum())
            for k, p in parts.groupby("kind", sort=True, observed=True)}


def _busy_by_kind(union_ps: dict[str, int], n: int, sync_exposed: pd.Series) -> dict[str, float]:
    """Per kind: the union of its transfers' time per step, plus its synchronous transfers' time."""
    busy = {k: float(v) / PS_PER_S / n for k, v in union_ps.items()}
    for k, part in sync_exposed.groupby(sync_exposed.index.to_numpy(), sort=True):
        busy[k] = busy.get(k, 0.0) + float(part.sum())  # synchronous: the time is the transfer
    return busy


def _gpu_from_totals(ops: pd.DataFrame, steps: Steps, totals: HostTotals):
    """_gpu_exposure's columns from the hosts' sums of exposed time per op."""
    per_op = _by_op(totals.exposed_ps.index.to_numpy(np.int64), totals.exposed_ps.to_numpy(float), ops)
    exposed = per_op / PS_PER_S / len(steps.after_warmup)
    return exposed, ops["measured_s_per_step"].to_numpy(float), exposed


def _measured(ops, step_ops, steps: Steps, async_spans, platform: str, totals: HostTotals | None, o: _Ops):
    """(exposed, in flight, exposed where in flight, spans, recording devices, non-transfer s, busy by kind)
    per step of a measured capture; ``totals``: its hosts' sums where they were reduced where read."""
    n = max(len(steps.after_warmup), 1)
    summed = totals is not None and totals.non_transfer_ps is not None  # GPU/CPU hosts reduced where read
    ev = None if summed or platform == "tpu" else _events(ops, step_ops, o)  # TPU: the op line and spans suffice
    spans, recording = TRANSFER_SPANS.empty(), 0
    if platform == "gpu" and summed:
        (exposed, in_flight, exposed_where), union_ps = _gpu_from_totals(ops, steps, totals), totals.kind_busy_ps
    elif platform == "gpu":
        exposed, in_flight, exposed_where = _gpu_exposure(ops, step_ops, steps, ev)
        comm = ev.is_comm
        parts = pd.DataFrame({"device": step_ops["device"].to_numpy()[comm], "step": step_ops["step"].to_numpy()[comm],
                              "start_ps": ev.start[comm], "end_ps": ev.end[comm], "kind": ev.kind(comm)})
        union_ps = _kind_union_ps(parts, steps)
    else:
        spans = transfer_spans(async_spans, ops, step_ops, steps)
        recording = int(async_spans["device"].nunique()) if async_spans is not None and len(async_spans) else 0
        recording = totals.recording_devices if totals else recording
        exposed, in_flight, exposed_where, n_span = _span_exposure(ops, step_ops, steps, spans, o, totals)
        if totals is not None and totals.span_kind_ps is not None:  # hosts' sums: the rows are a sample
            union_ps, n = totals.span_kind_ps, (n_span if len(totals.span_devices) else n)
        else:
            union_ps, n = _kind_union_ps(spans[spans["kind"].notna()], steps), (n_span if len(spans) else n)
    plain = o.kind.isna().to_numpy() & ~o.is_async
    if platform == "tpu":  # one op at a time on the op line: the union is the plain sum
        non_transfer = float(ops.loc[_flag(ops, "in_step") & plain, "measured_s_per_step"].sum())
    elif summed:
        non_transfer = float(totals.non_transfer_ps) / PS_PER_S / max(len(steps.after_warmup), 1)
    else:
        compute = ~ev.is_comm & ~ev.is_async
        non_transfer = _union_s(steps, step_ops["device"].to_numpy()[compute], step_ops["step"].to_numpy()[compute],
                                ev.start[compute], ev.end[compute]) / max(len(steps.after_warmup), 1)
    sync = o.waits & ~o.is_async
    busy = _busy_by_kind(union_ps, n, pd.Series(exposed[sync], index=o.kind[sync].to_numpy()))
    return exposed, in_flight, exposed_where, spans, recording, non_transfer, busy


def attach_transfers(ops: pd.DataFrame, step_ops: pd.DataFrame | None, steps: Steps | None,
                     async_spans: pd.DataFrame | None, platform: str,
                     totals: HostTotals | None = None) -> tuple[pd.DataFrame, Transfers]:
    """``ops`` with the transfer columns (tables.OPS: ``start_op_id`` ... ``hidden_fraction``), and the
    step-level :class:`Transfers`. ``totals``: a TPU capture reduced per host (its step_ops a sample)."""
    ops = ops.copy()
    kind = ops["transfer_kind"].astype(object).where(ops["transfer_kind"].notna(), None)
    start = _flag(ops, "is_async_start") | ops["opcode"].isin(["send", "recv"]).to_numpy()
    done, in_step = _flag(ops, "is_async_done"), _flag(ops, "in_step")
    gpu = platform == "gpu"
    # The rows whose time is a wait: on GPU the start kernel does the transfer; on TPU starts only issue it.
    o = _Ops(kind, start, done, in_step & kind.notna().to_numpy() & (gpu | ~start))
    ops["start_op_id"] = np.where(done, op_ids(ops, ops["module"], ops["program_id"], ops["start_op"]), -1) \
        if len(ops) else np.zeros(0, np.int64)
    ops["transfer_is_async"] = o.is_async
    per_occurrence = ops["collective_bytes"].astype(float).fillna(ops["host_bytes"].astype(float))
    ops["transfer_bytes_per_step"] = per_occurrence * ops["occurrences_per_step"].astype(float).fillna(1.0)
    plain = kind.isna().to_numpy() & ~o.is_async
    spans, recording, busy = TRANSFER_SPANS.empty(), 0, {}
    if platform == "hlo" or steps is None:
        # The schedule's predicted wait (steps/schedule.py), else the whole predicted transfer time.
        exposed = ops["static_exposed_s_per_step"].fillna(ops["predicted_s_per_step"]).fillna(0.0).to_numpy(float)
        in_flight = np.where(o.is_async & o.waits, ops["predicted_s_per_step"].to_numpy(float), np.nan)
        exposed_where = exposed
        non_transfer = float(ops.loc[plain, "predicted_s_per_step"].sum())
    else:
        exposed, in_flight, exposed_where, spans, recording, non_transfer, busy = _measured(
            ops, step_ops, steps, async_spans, platform, totals, o)
    ops["exposed_s_per_step"] = np.where(o.waits, exposed, np.nan)
    ops["exposed_where_in_flight_measured_s_per_step"] = np.where(o.waits, exposed_where, np.nan)
    ops["in_flight_s_per_step"] = np.where(o.waits, in_flight, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        hidden = np.clip(1.0 - ops["exposed_where_in_flight_measured_s_per_step"] / ops["in_flight_s_per_step"],
                         0.0, 1.0)
    ops["hidden_fraction"] = hidden.where(ops["in_flight_s_per_step"] > 0)
    return ops, Transfers(spans, recording, non_transfer, busy)

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

from ..capture.intervals import covered, first_at_or_after, union_length
from ..tables import TRANSFER_SPANS
from .codes import among, op_rows, unique_codes
from .windows import PS_PER_S, Steps, measured_rows, step_rows


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


def _op_ids(ops: pd.DataFrame, module, program_id, name) -> np.ndarray:
    """op_id of each (module or None, program_id, op_name) among the step's ops, -1 when none."""
    step = ops[ops["op_id"] >= 0]
    keys = ["program_id", "op_name"] if module is None else ["module", "program_id", "op_name"]
    table = step[keys + ["op_id"]].astype({k: str for k in keys}).drop_duplicates(keys)
    # The query's distinct keys are joined (a few hundred), then spread back over its rows (spans: 100ks).
    raw = {"program_id": program_id, "op_name": name, **({} if module is None else {"module": module})}
    codes, uniques = zip(*(_factorized(v) for v in raw.values()))
    combined = np.zeros(len(codes[0]), np.int64)
    for c, u in zip(codes, uniques):
        combined = combined * len(u) + c
    distinct, first, inverse = unique_codes(combined, int(np.prod([len(u) for u in uniques], dtype=np.float64)))
    query = pd.DataFrame({k: u[c[first]] for k, c, u in zip(raw, codes, uniques)})
    query["program_id"] = pd.Series(query["program_id"]).astype(object).fillna("").astype(str).to_numpy()
    for k in raw:
        if k != "program_id":
            query[k] = pd.Series(query[k]).astype(str).to_numpy()
    joined = query.merge(table, on=keys, how="left")
    return joined["op_id"].fillna(-1).to_numpy(np.int64)[inverse.reshape(-1)]


def _factorized(values) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of the values (missing ones a value too), its uniques as an object array."""
    codes, uniques = pd.Series(values).factorize(use_na_sentinel=False)
    return codes, np.asarray(uniques, dtype=object)


def _by_op(op_ids: np.ndarray, values: np.ndarray, ops: pd.DataFrame) -> np.ndarray:
    """Sum of ``values`` per op_id, aligned with the rows of ``ops`` (0 for ops without values)."""
    ids = ops["op_id"].to_numpy(np.int64)
    size = max(int(ids.max(initial=-1)), int(op_ids.max(initial=-1)), 0) + 1  # >= 1: the take below reads row 0
    some = op_ids >= 0
    if not some.all():  # (copies of millions of events only where some have no op)
        op_ids, values = op_ids[some], values[some]
    sums = np.bincount(op_ids, weights=values, minlength=size)
    return np.where(ids >= 0, sums[np.maximum(ids, 0)], 0.0)


def done_ends(start, rows, op, ev_rows, ev_op, ev_end) -> np.ndarray:
    """Per span (its start, measured device-step row, done op code, -1 for none): the end of the first event of
    that done op in the same device-step that ends at or after the span began; -1 where there is none.

    The recorded span can end before its done op does (v6e: copy-done.5 waits 182 ms behind a span that
    closed 115 ms after the start), so the transfer runs to the done op's end."""
    start, rows, op = (np.asarray(x, np.int64) for x in (start, rows, op))
    ev_rows, ev_op, ev_end = (np.asarray(x, np.int64) for x in (ev_rows, ev_op, ev_end))
    keep = among(ev_op, op) & (ev_rows >= 0)
    ev_rows, ev_op, ev_end = ev_rows[keep], ev_op[keep], ev_end[keep]
    out = np.full(len(start), -1, np.int64)
    asks = np.flatnonzero((op >= 0) & (rows >= 0))  # spans with a done op in a measured step
    if len(ev_end) == 0 or len(asks) == 0:
        return out
    start, rows, op = start[asks], rows[asks], op[asks]
    # Group = (device-step, done op), the op numbered densely among the done ops: small codes, one sort key.
    dense = np.cumsum(among(np.arange(max(int(op.max()), int(ev_op.max())) + 1), op)) - 1
    width = int(dense[-1]) + 1
    # Times from their device-step's earliest: (group, time) fits one int64 key however long the capture.
    base = np.full(int(max(rows.max(), ev_rows.max())) + 1, np.iinfo(np.int64).max)
    np.minimum.at(base, rows, start)
    np.minimum.at(base, ev_rows, ev_end)
    hit = first_at_or_after(start - base[rows], rows * width + dense[op], ev_end - base[ev_rows],
                            ev_rows * width + dense[ev_op])
    out[asks] = np.where(hit >= 0, ev_end[np.maximum(hit, 0)], -1)
    return out


def transfer_spans(async_spans: pd.DataFrame, ops: pd.DataFrame, step_ops: pd.DataFrame,
                   steps: Steps) -> pd.DataFrame:
    """The recorded async spans that end in a measured step (tables.TRANSFER_SPANS)."""
    if async_spans is None or async_spans.empty:
        return TRANSFER_SPANS.empty()
    span_end = async_spans["end_ps"].to_numpy(np.int64)
    rows = step_rows(steps, async_spans["device"].to_numpy(np.int64), span_end - 1)
    inside = np.flatnonzero(rows >= 0)
    every = len(inside) == len(rows)  # (usually: no copies of the spans' columns then)

    def kept(col: str) -> np.ndarray:  # the numpy column of the spans inside: not a copy of the span frame
        values = async_spans[col].to_numpy()
        return values if every else values[inside]

    rows, span_end, start = _kept(rows, inside, every), _kept(span_end, inside, every), kept("start_ps")
    op_id = _kept(_op_ids(ops, None, async_spans["program_id"], async_spans["done_op"]), inside, every)
    if "done_end_ps" in async_spans:  # hosts reduced where read: each found its spans' done ends (host_reduce)
        waited = kept("done_end_ps").astype(np.int64)
    else:
        ev_op = step_ops["op_id"].to_numpy(np.int64)
        done = np.flatnonzero(among(ev_op, op_id))  # the done ops' events (numpy columns: no frame copy)
        col = {c: np.take(step_ops[c].to_numpy(np.int64), done) for c in ("device", "step", "start_ps", "duration_ps")}
        waited = done_ends(start, rows, op_id, measured_rows(steps, col["device"], col["step"]), ev_op[done],
                           col["start_ps"] + col["duration_ps"])
    end = np.maximum(span_end, np.where(waited >= 0, waited, 0))
    return TRANSFER_SPANS.coerce(pd.DataFrame({
        "device": kept("device").astype(np.int64), "step": steps.after_warmup["step"].to_numpy(np.int64)[rows],
        "op_id": op_id, "kind": _kinds(ops, op_id), "start_ps": start.astype(np.int64), "end_ps": end}))


def _kept(values: np.ndarray, inside: np.ndarray, every: bool) -> np.ndarray:
    return values if every else values[inside]


def _kinds(ops: pd.DataFrame, op_id: np.ndarray) -> pd.Categorical:
    """The transfer kind of each op_id (NaN for none), categories sorted and all present (as ``astype``
    makes them): the ops' kinds gathered by a lookup on op_id, no join or hash of the spans' strings."""
    step = ops["op_id"].to_numpy(np.int64) >= 0
    kind = pd.Categorical(ops["transfer_kind"].astype(object).where(step).to_numpy())
    codes = np.append(kind.codes, -1)  # row -1 (no op) reads the last slot: NaN
    gathered = pd.Categorical.from_codes(codes[op_rows(ops, op_id)], dtype=kind.dtype, validate=False)
    return gathered.remove_unused_categories()


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
    ops["start_op_id"] = np.where(done, _op_ids(ops, ops["module"], ops["program_id"], ops["start_op"]), -1) \
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

"""The recorded async spans that end in a measured step (tables.TRANSFER_SPANS), each extended to the end of
the done op it waits for; and op ids found by name (:func:`op_ids`). Read by :mod:`.transfers`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..capture.intervals import first_at_or_after
from ..tables import TRANSFER_SPANS
from .codes import among, op_rows, unique_codes
from .windows import Steps, measured_rows, step_rows


def op_ids(ops: pd.DataFrame, module, program_id, name) -> np.ndarray:
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
    op_id = _kept(op_ids(ops, None, async_spans["program_id"], async_spans["done_op"]), inside, every)
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

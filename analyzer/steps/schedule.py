"""The schedule's columns of the ops table: transfers made synchronous, independent work beside each, waits.

Which transfers XLA made synchronous, how much independent work the schedule window of each transfer holds,
and (without a trace) the wait each done op predicts.

Read from the dump module of each op's program (analyzer/hlo/schedule.py). Times are per step: the measured
ones with a trace, else the predicted ones (a while / conditional / call with its callees' spans).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..hlo.schedule import CONTROL_OPCODES, Transfer, static_waits, transfer_windows


def _waiting(ops: pd.DataFrame) -> pd.Series:
    """Rows that wait for a transfer: done ops and synchronous transfers (not starts, sends or receives)."""
    start = ops["is_async_start"].fillna(False).astype(bool) | ops["opcode"].isin(["send", "recv"])
    return ops["transfer_kind"].notna() & ~start


def _is_transfer(ops: pd.DataFrame) -> np.ndarray:
    return (ops["transfer_kind"].notna() | ops["is_async_start"].fillna(False).astype(bool)
            | ops["is_async_done"].fillna(False).astype(bool)).to_numpy()


def _link(kind) -> str:
    return "host" if kind == "host-offload" else "interconnect"  # one link for all collectives: conservative


def _own_time(part: pd.DataFrame, measured: bool) -> dict[str, float]:
    """Each op's own time per step, 0 for transfers (their time is the link's, or a wait)."""
    t = part["measured_s_per_step" if measured else "predicted_s_per_step"].fillna(0.0).to_numpy(float)
    return dict(zip(part["op_name"].astype(str), np.where(_is_transfer(part), 0.0, t)))


def _static(module, part: pd.DataFrame, own: dict[str, float]) -> tuple[dict, dict]:
    """(wait per waiting op, span per computation) of the predicted timeline of one program's ops."""
    wait_rows = part[_waiting(part)]
    transfers = {str(r.op_name): Transfer(r.start_op if isinstance(r.start_op, str) else None,
                                          float(np.nan_to_num(r.predicted_s_per_step)), _link(r.transfer_kind))
                 for r in wait_rows.itertuples()}
    windows = transfer_windows(module, {n: t.start for n, t in transfers.items()})
    transfers = {n: Transfer(t.start, t.seconds, t.link, n in windows and windows[n].is_sync)
                 for n, t in transfers.items()}
    computations = {module.instruction(n).computation for n in own if _known(module, n)}
    order = [c for c in module.computations if c in computations]
    start_time = {n: float(np.nan_to_num(t)) for n, t in
                  zip(part["op_name"].astype(str), part["predicted_s_per_step"].to_numpy(float))}
    issue = {n: start_time.get(n, 0.0) for n in part.loc[part["is_async_start"].fillna(False).astype(bool), "op_name"]}
    return static_waits(module, order, {**own, **issue}, transfers)


def _known(module, name: str) -> bool:
    try:
        module.instruction(name)
    except KeyError:
        return False
    return True


def _independent(module, part: pd.DataFrame, time: dict[str, float]) -> tuple[dict[str, float], dict[str, bool]]:
    """(independent work per step in each transfer's window outside its start..done, all of it when XLA made the
    pair synchronous; whether it did), by the op names of the waiting ops and of their starts. Windows are taken
    in schedule order and each op's work goes to the first window holding it: the link serves one transfer at a
    time, so work beside one transfer is not counted again beside the next."""
    wait_rows = part[_waiting(part)]
    starts = {str(r.op_name): (r.start_op if isinstance(r.start_op, str) else None) for r in wait_rows.itertuples()}
    windows = transfer_windows(module, starts)
    free: dict[str, np.ndarray] = {}
    work, sync = {}, {}
    for name, w in sorted(windows.items(), key=lambda item: (item[1].computation, item[1].done)):
        if w.computation not in free:
            instructions = module.computations[w.computation].instructions
            free[w.computation] = np.array([time.get(i.name, 0.0) for i in instructions])
        left, total = free[w.computation], 0.0
        # Work between the start and the done already runs beside an async transfer, not beside a synchronous one.
        ranges = ((w.producer + 1, w.consumer),) if w.is_sync else ((w.producer + 1, w.start), (w.done + 1, w.consumer))
        for lo, hi in ranges:
            if hi > lo:
                total += float(left[lo:hi].sum())
                left[lo:hi] = 0.0
        for key in (name, starts[name]):
            if key:
                work[key], sync[key] = total, w.is_sync
    return work, sync


def attach_schedule(ops: pd.DataFrame, by_program: Mapping, measured: bool) -> pd.DataFrame:
    """``ops`` with ``transfer_is_sync``, ``hlo_computation`` and ``schedule_independent_s_per_step`` (tables.OPS),
    and without a trace ``static_exposed_s_per_step`` (the predicted wait of each waiting op: a working column
    that attach_transfers reads)."""
    ops = ops.copy()
    ops["transfer_is_sync"] = False
    ops["hlo_computation"] = None
    ops["schedule_independent_s_per_step"] = np.nan
    ops["static_exposed_s_per_step"] = np.nan
    if not len(ops):
        return ops
    keys = pd.Series(list(zip(ops["module"].astype(str), ops["program_id"].fillna("").astype(str))), index=ops.index)
    for key in pd.unique(keys):
        dm = by_program.get(key)
        if dm is None:
            continue
        index = ops.index[(keys == key).to_numpy()]
        part = ops.loc[index]
        ops.loc[index, "hlo_computation"] = [dm.module.instruction(n).computation if _known(dm.module, n) else None
                                             for n in part["op_name"].astype(str)]
        own = _own_time(part, measured)
        time = dict(own)
        if not measured:
            waits, spans = _static(dm.module, part, own)
            names = part["op_name"].astype(str)
            ops.loc[index, "static_exposed_s_per_step"] = names.map(waits).to_numpy(float)
            for r in part[part["opcode"].isin(CONTROL_OPCODES)].itertuples():
                called = dm.module.instruction(r.op_name).called_computations() if _known(dm.module, r.op_name) else ()
                time[r.op_name] = own[r.op_name] + sum(spans.get(c, 0.0) for c in called)
        work, sync = _independent(dm.module, part, time)
        names = part["op_name"].astype(str)
        ops.loc[index, "schedule_independent_s_per_step"] = names.map(work).to_numpy(float)
        ops.loc[index, "transfer_is_sync"] = np.array([bool(sync.get(n, False)) for n in names], dtype=bool)
    return ops

"""A GPU or CPU host reduced where it is read: which of its ops are transfers, and the transfer totals that the
all-events path takes from every step event (steps/transfers.py), summed per host so the merge adds them up.

Which ops are transfers comes from the HLO: every host file carries the modules of the programs it ran
(``/host:metadata``), so the host classifies its own ops as the analysis does (``attach_hlo_facts``). A host
running a program whose HLO it does not carry cannot: ``op_roles`` gives None and the capture is read the
all-events way.

Per host, with the measured device-steps as the rows (``measured_rows``):

- GPU: per op, the part of its communication kernels no compute kernel on the same device overlaps (the
  exposed time), and per transfer kind the union of its kernels' time;
- GPU and CPU: the union of the compute events (neither transfer nor async), what transfers can hide behind;
- every platform: per step, the first launch (a device op's start where none is recorded), where the input
  rule measures the host's lead from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...parsers.hlo_proto import parse_hlo_proto
from ...parsers.hlo_text import HloParseError
from ..capture.intervals import covered, union_length
from ..hlo.dump import DumpModule
from ..hlo.embedded import CAPTURE_ORIGIN
from ..hlo.facts import attach_hlo_facts
from ..steps.op_stats import OP_KEY, first_seen_ids
from ..steps.windows import Steps, measured_rows

KEY = ["program_id", "op_name"]


@dataclass(frozen=True)
class HostSums:
    """A host's transfer sums (picoseconds) over its measured device-steps."""

    non_transfer_ps: int  # the union of the compute events
    exposed: pd.DataFrame | None = None  # GPU: KEY + exposed_ps, the uncovered time of each op's comm kernels
    kind_busy_ps: dict | None = None  # GPU: transfer kind (sorted) -> the union of its kernels' time


def _op_keys(step_ops: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Per event its op's number (-1: no key), and the ops' keys (OP_KEY, text) in that numbering: from the
    columns' category codes, no string per event."""
    ids = first_seen_ids(step_ops[OP_KEY])
    rows = np.flatnonzero(ids >= 0)
    first = np.full(int(ids.max(initial=-1)) + 1, len(ids), np.int64)
    np.minimum.at(first, ids[rows], rows)
    return ids, step_ops[OP_KEY].iloc[first].astype(str).reset_index(drop=True)


_PARSED: dict[tuple[str, bytes], DumpModule | None] = {}  # (program id, sha1 of its HloProto) -> its module


def _module(program_id: str, data: bytes, source: str) -> DumpModule | None:
    """The parsed module of a program, once per worker process: the hosts of a run carry the same bytes."""
    key = (program_id, hashlib.sha1(data).digest())
    if key not in _PARSED:
        if len(_PARSED) >= 16:
            _PARSED.clear()
        try:
            module = parse_hlo_proto(data, source)
        except HloParseError:  # as embedded_modules: the program's facts come from the trace only
            module = None
        _PARSED[key] = module and DumpModule(module, None, int(program_id) if program_id.isdigit() else None,
                                             origin=CAPTURE_ORIGIN)
    return _PARSED[key]


def forget_programs() -> None:
    """Drop the parsed modules (a run read in this process: the analysis parses its own)."""
    _PARSED.clear()


def _programs(traced: pd.DataFrame, hlo) -> dict:
    """(module, program id) -> the module this host carries, where its name is the traced one (as
    ``with_capture_hlo`` matches them without a dump)."""
    first: dict[str, bytes] = {}
    for program_id, _, data in hlo.hlo_protos:
        first.setdefault(program_id, data)
    out = {}
    file = Path(str(hlo.path)).name  # a URL too (storage.RemotePath)
    for name, program_id in sorted(set(zip(traced["module"], traced["program_id"]))):
        own = _module(program_id, first[program_id], f"{file}: HLO of {name}({program_id})")
        if own is not None and own.name == name:
            out[(name, program_id)] = own
    return out


def op_roles(step_ops: pd.DataFrame, op_metadata: pd.DataFrame | None, hlo) -> pd.DataFrame | None:
    """Per op key of the step's events: ``kind`` (transfer kind or None), ``is_async`` (starts or waits for a
    transfer), from the HLO this host carries; None when it lacks the HLO of a program it ran."""
    keys = _op_keys(step_ops)[1]
    carried = {pid for pid, _, _ in hlo.hlo_protos}
    traced = keys[(keys["module"] != "") & (keys["program_id"] != "")]
    if not set(traced["program_id"]) <= carried:
        return None
    facts = attach_hlo_facts(keys.assign(mean_s=np.nan), op_metadata, _programs(traced, hlo))
    kind = facts["transfer_kind"].astype(object).where(facts["transfer_kind"].notna(), None)
    start = facts["is_async_start"].fillna(False).to_numpy(bool) | facts["opcode"].isin(["send", "recv"]).to_numpy()
    return keys.assign(kind=kind.to_numpy(), is_async=start | facts["is_async_done"].fillna(False).to_numpy(bool))


def _event_roles(step_ops: pd.DataFrame, roles: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step event: (its op's transfer kind or None, whether its op is async)."""
    ids, keys = _op_keys(step_ops)
    joined = keys.merge(roles, on=OP_KEY, how="left")
    kind = np.append(joined["kind"].to_numpy(object), None)  # [-1]: an event without a key
    return kind[ids], np.append(joined["is_async"].fillna(False).to_numpy(bool), False)[ids]


def transfer_totals(step_ops: pd.DataFrame, steps: Steps, roles: pd.DataFrame, gpu: bool) -> HostSums:
    """The host's transfer sums; per op and kind on GPU only (its communication kernels)."""
    kind, is_async = _event_roles(step_ops, roles)
    comm = pd.notna(kind)
    start = step_ops["start_ps"].to_numpy(np.int64)
    end = start + step_ops["span_ps"].to_numpy(np.int64)
    rows = measured_rows(steps, step_ops["device"], step_ops["step"])
    n = len(steps.after_warmup)
    compute = ~comm & ~is_async
    non_transfer = int(union_length(start[compute], end[compute], rows[compute], n).sum())
    if not gpu:
        return HostSums(non_transfer)
    device = step_ops["device"].to_numpy(np.int64)
    hidden = covered(start[comm], end[comm], device[comm], start[~comm], end[~comm], device[~comm])
    exposed = step_ops.loc[comm, KEY].reset_index(drop=True).assign(exposed_ps=(end - start)[comm] - hidden)
    exposed = exposed.groupby(KEY, sort=False, observed=True, dropna=False)["exposed_ps"].sum().reset_index()
    by_kind = {k: int(union_length(start[comm & (kind == k)], end[comm & (kind == k)], rows[comm & (kind == k)],
                                   n).sum()) for k in sorted(set(kind[comm]))}
    return HostSums(non_transfer, exposed, by_kind)


def first_launch(step_ops: pd.DataFrame) -> pd.Series:
    """Per step: its events' first launch, a device op's start where no launch is recorded (rules/input_bound)."""
    launch = step_ops["launch_ps"].to_numpy(np.int64)
    first = np.where(launch >= 0, launch, step_ops["start_ps"].to_numpy(np.int64))
    return pd.Series(first, index=step_ops["step"].to_numpy(np.int64)).groupby(level=0).min()

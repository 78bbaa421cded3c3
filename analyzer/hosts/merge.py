"""The reduced hosts of a multi-host capture (:mod:`.host_reduce`) merged into the tables the analysis
reads, as :func:`.op_stats.measure` makes them from all events: the same steps, op ids, per-op statistics
and busy times; the step events of one representative step per device; the transfer inputs as totals.

Devices are numbered across hosts in file order and events by their row in the run's event table, as
``build_capture`` numbers them, so ties in time break the same way: an op's id is its rank by its first
event in (start, device, row) order, the other programs' ops are listed by first event in (device, row)
order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ...errors import XladiagError
from ..capture.build import Capture
from ..capture.intervals import union_length
from ..capture.planes import empty_table
from ..capture.sanity import check_warnings
from ..steps.choice import StepChoice, choose_steps
from ..steps.op_stats import OP_KEY
from ..steps.transfers import HostTotals
from ..steps.windows import PS_PER_S, Steps
from .compact import KeyBook, compact, rep_events
from .heap import release_freed
from .reduce import KEY, HostPart

# {index: (host file, the run's steps for its devices)} -> {index: the host reduced with those steps}
Rerun = Callable[[dict[int, tuple[str, Steps]]], dict[int, HostPart]]


@dataclass(frozen=True)
class Measured:
    """The measured side of a capture, whichever way its hosts were read."""

    platform: str
    hosts: tuple[str, ...]
    devices: pd.DataFrame
    warnings: tuple[str, ...]
    op_metadata: pd.DataFrame
    async_spans: pd.DataFrame
    steps: Steps
    step_ops: pd.DataFrame  # tables.STEP_EVENTS: every step's events, or a representative step per device
    op_table: pd.DataFrame  # op_stats.measure's per-op table
    hlo_sources: tuple  # what embedded_hlo reads the capture's HLO from (spaces or HostHlo)
    totals: HostTotals | None = None  # set when step_ops holds representative steps only


def _shifted(frame: pd.DataFrame, by: int, *columns: str) -> pd.DataFrame:
    return frame.assign(**{c: frame[c].to_numpy(np.int64) + by for c in columns}) if len(frame) else frame


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The hosts' rows in file order; a column categorical on every host stays categorical (its categories
    united), not one Python string per row."""
    out = pd.concat(frames, ignore_index=True)
    for col in frames[0].columns if frames else ():
        if all(isinstance(f[col].dtype, pd.CategoricalDtype) for f in frames) and len(frames) > 1:
            out[col] = union_categoricals([f[col].array for f in frames])
    return out


def devices_that_ran(devices: pd.DataFrame, event_devices) -> tuple[pd.DataFrame, str | None]:
    """The devices with an op event: a plane with none (another process's GPU, an idle card) is no device of
    this run. (devices, a note naming the planes left out, None when none is.)"""
    ran = devices["device"].isin(pd.unique(np.asarray(event_devices)))
    if ran.all() or not ran.any():
        return devices, None
    idle = devices.loc[~ran, "plane_name"].astype(str).tolist()
    shown = ", ".join(idle[:4]) + (f" (+{len(idle) - 4} more)" if len(idle) > 4 else "")
    return devices[ran].reset_index(drop=True), (
        f"{len(idle)} of {len(devices)} device planes have no op event ({shown}): counted as not part of this run "
        f"({int(ran.sum())} device{'s' if ran.sum() != 1 else ''})")


def _lite_capture(parts: list[HostPart], bases: list[int], hosts: tuple[str, ...], devices: pd.DataFrame) -> Capture:
    """What ``find_steps`` reads of the whole run: annotations, Steps line, module executions, and per device
    two events spanning its first start, last start and last end (the whole-capture fallback)."""
    ext = _concat([_shifted(p.extents, b, "device") for p, b in zip(parts, bases)])
    events = pd.DataFrame({"device": np.concatenate([ext["device"], ext["device"]]),
                           "start_ps": np.concatenate([ext["first_start_ps"], ext["last_start_ps"]]),
                           "span_ps": np.concatenate([np.zeros(len(ext), np.int64),
                                                      ext["end_ps"] - ext["last_start_ps"]])})
    return Capture(platform=parts[0].platform, hosts=hosts, devices=devices, events=events,
                   modules=_concat([_shifted(p.modules, b, "device") for p, b in zip(parts, bases)]),
                   op_metadata=empty_table(KEY), async_spans=empty_table(["device"]),
                   steps_line=_concat([_shifted(p.steps_line, b, "device") for p, b in zip(parts, bases)]),
                   step_annotations=_concat([_shifted(p.annotations, b, "device") for p, b in zip(parts, bases)]),
                   step_marker=next((p.step_marker for p in parts if p.step_marker), ""))


def _host_steps(steps: Steps, base: int, n: int) -> pd.DataFrame:
    table = steps.table
    mine = table[(table["device"] >= base) & (table["device"] < base + n)]
    return _shifted(mine, -base, "device").reset_index(drop=True)


def _same_steps(part: HostPart, steps: Steps, local: pd.DataFrame) -> bool:
    own = part.steps
    if (own.by_launch, own.program, own.program_id) != (steps.by_launch, steps.program, steps.program_id):
        return False
    mine = own.table.reset_index(drop=True)
    return list(mine.columns) == list(local.columns) and len(mine) == len(local) and all(
        np.array_equal(mine[c].to_numpy(), local[c].to_numpy()) for c in mine.columns)


def _module_names(modules: pd.DataFrame) -> pd.Series:
    """program_id -> module name, from the first execution that names one (as build_capture)."""
    return modules.dropna(subset=["program_id"]).drop_duplicates("program_id").set_index("program_id")["module"]


def _grouped(frame: pd.DataFrame, order_cols: list[str], book: KeyBook) -> pd.DataFrame:
    """Per op key (``key``, its number in ``book``) over the hosts: summed counts and times, least/most time, and
    the key's first event (least ``order_cols``); rows in first-event order."""
    used, codes = np.unique(frame["key"].to_numpy(np.int64), return_inverse=True)
    keys = book.key_frame(used).assign(key=used)
    n = len(keys)
    out = keys.assign(occurrences=np.bincount(codes, weights=frame["occurrences"], minlength=n).astype(np.int64))
    for col, fn, init in (("total_ps", np.add, 0), ("min_ps", np.minimum, np.iinfo(np.int64).max),
                          ("max_ps", np.maximum, np.iinfo(np.int64).min)):
        acc = np.full(n, init, np.int64)
        fn.at(acc, codes, frame[col].to_numpy(np.int64))
        out[col] = acc
    order = np.lexsort([frame[c].to_numpy(np.int64) for c in reversed(order_cols)])
    _, at = np.unique(codes[order], return_index=True)  # at[k]: where key k's first event comes in that order
    return out.iloc[np.argsort(at, kind="stable")].reset_index(drop=True)


def _times(stats: pd.DataFrame) -> pd.DataFrame:
    total_s = stats["total_ps"].to_numpy(np.float64) / PS_PER_S
    return stats.assign(total_s=total_s, mean_s=total_s / stats["occurrences"].to_numpy(np.float64),
                        min_s=stats["min_ps"].to_numpy(np.float64) / PS_PER_S,
                        max_s=stats["max_ps"].to_numpy(np.float64) / PS_PER_S)


def _op_table(parts, bases, steps: Steps, module_of: pd.Series, book: KeyBook):
    """(the per-op table, (program_id, op_name) -> op_id of the step's ops, the op_id of each key of ``book``:
    -1 where the key is no step op)."""
    in_step = _grouped(_concat([_shifted(p.step_ops, b, "first_device") for p, b in zip(parts, bases)]),
                       ["first_start_ps", "first_device", "first_event"], book)
    in_step = _times(in_step.assign(op_id=np.arange(len(in_step), dtype=np.int64)))
    in_step["module"] = in_step["program_id"].map(module_of).fillna("").astype(str)
    device_steps = max(len(steps.after_warmup), 1)
    in_step["occurrences_per_step"] = in_step["occurrences"] / device_steps
    in_step["measured_s_per_step"] = in_step["total_s"] / device_steps
    mean_step = steps.mean_s
    in_step["share_of_step"] = in_step["measured_s_per_step"] / mean_step if mean_step > 0 else np.nan
    columns = ["op_id", *OP_KEY, "occurrences", "occurrences_per_step", "total_s", "mean_s", "min_s", "max_s",
               "measured_s_per_step", "share_of_step"]
    table = in_step.sort_values("measured_s_per_step", ascending=False, kind="stable")[columns]
    table = table.reset_index(drop=True).assign(in_step=True)
    others = _other_ops(parts, bases, steps, module_of, in_step, book)
    if len(others):
        table = pd.concat([table, others], ignore_index=True)
    op_of_key = np.full(len(book.keys), -1, np.int64)
    op_of_key[in_step["key"].to_numpy(np.int64)] = in_step["op_id"].to_numpy(np.int64)
    return table, in_step[[*KEY, "op_id"]], op_of_key


def _other_ops(parts, bases, steps: Steps, module_of: pd.Series, in_step: pd.DataFrame, book: KeyBook) -> pd.DataFrame:
    """The ops of events outside the steps that are not the step program's (op_stats._other_program_ops)."""
    if not (steps.program or steps.annotated):
        return pd.DataFrame()
    frame = _concat([_shifted(p.other_ops, b, "first_device") for p, b in zip(parts, bases)])
    if frame.empty:
        return pd.DataFrame()
    stats = _times(_grouped(frame, ["first_device", "first_event"], book))
    stats["module"] = stats["program_id"].map(module_of).fillna("").astype(str)
    if steps.program:
        keep = (stats["module"] != steps.program) | (stats["program_id"] != steps.program_id)
    else:
        step_keys = pd.MultiIndex.from_frame(in_step[KEY].astype(str))
        keep = ~pd.MultiIndex.from_frame(stats[KEY].astype(str)).isin(step_keys)
    stats = stats[keep].sort_values("total_s", ascending=False, kind="stable")
    return stats[[*OP_KEY, "occurrences", "total_s", "mean_s", "min_s", "max_s"]].assign(in_step=False, op_id=-1)


def _op_ids(frame: pd.DataFrame, ids: pd.DataFrame) -> np.ndarray:
    pid = frame["program_id"].astype(object).where(frame["program_id"].notna(), "").astype(str)
    query = pd.DataFrame({"program_id": pid.to_numpy(), "op_name": frame["op_name"].astype(str).to_numpy()})
    return query.merge(ids, on=KEY, how="left")["op_id"].fillna(-1).to_numpy(np.int64)


def _busy(parts, steps: Steps) -> Steps:
    """The run's steps with busy times: per device-step from its host, per step the union over hosts."""
    busy = np.concatenate([p.steps.busy_ps for p in parts]) if parts else np.zeros(0, np.int64)
    step_values = np.unique(steps.after_warmup["step"].to_numpy(np.int64))
    blocks = _concat([p.busy_blocks for p in parts])
    rows = np.searchsorted(step_values, blocks["step"].to_numpy(np.int64))
    any_ps = union_length(blocks["start_ps"], blocks["end_ps"], rows, len(step_values))
    return replace(steps, busy_ps=busy, busy_any_ps=any_ps)


def _capture_warnings(parts: list[HostPart]) -> tuple[str, ...]:
    """build_capture's warnings as over all hosts at once: each host's in file order, the one that program
    executions were inferred once, last."""
    inferred = [w for p in parts for w in p.warnings if "program executions were inferred" in w]
    return (*[w for p in parts for w in p.warnings if w not in inferred], *inferred[:1])


def _first_launch(parts: list[HostPart]) -> pd.Series | None:
    launches = [p.first_launch for p in parts if p.first_launch is not None]
    return pd.concat(launches).groupby(level=0).min() if launches else None


class SpansNotSummable(XladiagError):
    """A host's spans wait for a done op it did not run in its steps, but another host did: its kind is not
    known where the spans were summed (span_sums), so the capture is read the all-events way."""


def _span_totals(parts: list[HostPart], bases: list[int], ids: pd.DataFrame, op_of_key: np.ndarray) -> dict:
    """HostTotals' span fields summed over the hosts (none where a host has no span sums: GPU)."""
    sums = [p.span_sums for p in parts]
    if not sums or any(s is None for s in sums):
        return {}
    orphans = _concat([s.orphans for s in sums])
    if len(orphans) and (_op_ids(orphans, ids) >= 0).any():
        raise SpansNotSummable
    flight = _concat([s.in_flight for s in sums])
    by_op = pd.Series(flight["in_flight_ps"].to_numpy(np.int64), index=op_of_key[flight["key"].to_numpy(np.int64)])
    kinds = sorted({k for s in sums for k in s.kind_ps})
    return {"in_flight_ps": by_op[by_op.index >= 0].groupby(level=0).sum(),
            "span_kind_ps": {k: sum(s.kind_ps.get(k, 0) for s in sums) for k in kinds},
            "span_devices": np.array(sorted(d + b for s, b in zip(sums, bases) for d in s.devices), np.int64)}


def _totals(parts: list[HostPart], bases: list[int], ids: pd.DataFrame, op_of_key: np.ndarray) -> HostTotals:
    """The transfer inputs summed over the hosts: per op device time on the devices with spans, and on GPU and
    CPU the sums of transfer_totals.transfer_totals (exposed time per op id, unions per kind and of compute)."""
    span_ops = _concat([p.span_ops for p in parts])
    span_ps = pd.Series(span_ops["duration_ps"].to_numpy(np.int64), index=op_of_key[span_ops["key"].to_numpy(np.int64)])
    recording = {d + b for p, b in zip(parts, bases) for d in p.recording}
    totals = replace(HostTotals(span_ps.groupby(level=0).sum(), len(recording)),
                     **_span_totals(parts, bases, ids, op_of_key))
    if any(p.totals is None for p in parts):
        return totals
    sums = [p.totals for p in parts]
    totals = replace(totals, non_transfer_ps=sum(t.non_transfer_ps for t in sums))
    if any(t.exposed is None for t in sums):  # CPU
        return totals
    exposed = _concat([t.exposed for t in sums])
    by_op = pd.Series(exposed["exposed_ps"].to_numpy(np.int64), index=_op_ids(exposed, ids)).groupby(level=0).sum()
    kinds = sorted({k for t in sums for k in t.kind_busy_ps})
    return replace(totals, exposed_ps=by_op,
                   kind_busy_ps={k: sum(t.kind_busy_ps.get(k, 0) for t in sums) for k in kinds})


def _kept(parts: list[HostPart]) -> tuple[list[HostPart], Counter]:
    """The hosts in file order but those repeating another's planes (as sanity.checked_spaces), sanity counts."""
    counts, kept, seen = Counter(), [], set()
    for part in parts:
        if part.fingerprint and part.fingerprint in seen:
            counts["duplicate_hosts"] += 1
            continue
        seen.add(part.fingerprint)
        counts.update(part.checks)
        kept.append(part)
    return kept, counts


def merge_hosts(parts: list[HostPart], rerun: Rerun, choice: StepChoice | None = None,
                book: KeyBook | None = None) -> Measured:
    """One run's measured tables from its hosts' reductions, coded against ``book`` as they arrived (compact;
    ``parts`` is emptied: the merge frees each host's tables as it is done with them). ``rerun``: reduce hosts
    again with given steps; ``choice``: the program or steps the user gave, step_choice."""
    book = book if book is not None else KeyBook()
    kept, counts = _kept([compact(p, book) for p in parts])
    parts.clear()
    sizes = [len(p.devices) for p in kept]
    bases = list(np.cumsum([0, *sizes[:-1]]).astype(int))
    hosts = tuple(p.hostname for p in kept)
    devices = _concat([_shifted(p.devices, b, "device") for p, b in zip(kept, bases)])
    steps = choose_steps(_lite_capture(kept, bases, hosts, devices), choice)
    local = [_host_steps(steps, b, n) for b, n in zip(bases, sizes)]
    differ = {i: (p.path, replace(steps, table=local[i], busy_ps=None, busy_any_ps=None))
              for i, p in enumerate(kept) if not _same_steps(p, steps, local[i])}
    for i, part in (rerun(differ) if differ else {}).items():
        kept[i] = compact(replace(part, hlo=kept[i].hlo), book)  # the same file: its HLO was already taken once
    steps = replace(_busy(kept, steps), first_launch=_first_launch(kept))
    module_of = _module_names(_concat([p.modules for p in kept]))
    op_table, ids, op_of_key = _op_table(kept, bases, steps, module_of, book)
    totals = _totals(kept, bases, ids, op_of_key)
    kept = [replace(p, step_ops=None, other_ops=None, span_ops=None, span_sums=None) for p in kept]
    event_bases = list(np.cumsum([0, *[p.n_events for p in kept[:-1]]]).astype(int))
    release_freed()  # the per-op tables' pages back before the step events' columns are made
    rep = rep_events(kept, bases, event_bases, book, op_of_key, module_of)
    release_freed()  # the hosts' tables are gone: their heap pages back to the system before the analysis
    metadata = _concat([p.op_metadata for p in kept]).drop_duplicates(["program_id", "op_name"])
    spans = _concat([_shifted(p.spans, b, "device") for p, b in zip(kept, bases)])
    devices, idle = devices_that_ran(devices, _concat([_shifted(p.extents, b, "device")
                                                       for p, b in zip(kept, bases)])["device"])
    return Measured(platform=kept[0].platform, hosts=hosts, devices=devices,
                    warnings=(*check_warnings(counts), *_capture_warnings(kept), *([idle] if idle else [])),
                    op_metadata=metadata.reset_index(drop=True), async_spans=spans, steps=steps, step_ops=rep,
                    op_table=op_table, hlo_sources=tuple(p.hlo for p in kept), totals=totals)

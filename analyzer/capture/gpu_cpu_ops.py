"""Op events of GPU and CPU captures, which record no program executions of their own.

- GPU: kernels on ``Stream #k(...)`` lines; the HLO op is on the kernel's stats or on the host launch
  event sharing its ``correlation_id`` (whose time also says which annotated step launched the kernel).
- CPU: host thread events carrying an ``hlo_op`` stat, one device per XLA host device ordinal.
- Program executions are derived from the op events (:func:`.derived_runs.derived_module_runs`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...parsers.xplane import XSpaceTables
from ...units import format_seconds
from .host_steps import cpu_launch_ps
from .planes import (
    GPU_PLANE,
    device_planes,
    device_table,
    events_with_stats,
    metadata_rows,
    on_lines,
    scaled_peak,
)
from .tpu_ops import METADATA_COLUMNS


def gpu_tables(space: XSpaceTables, device_base: int):
    planes, plane_to_device = device_planes(space, GPU_PLANE, device_base)

    stat_cols = ["hlo_op", "hlo_module", "program_id", "correlation_id"]
    kernels = events_with_stats(space, planes["plane"], lambda n: n.str.startswith("Stream"), stat_cols)
    # Host launch events name the HLO op for kernels that do not carry it themselves.
    launches = _launches(space, stat_cols)
    launch_columns = ["hlo_op", "hlo_module", "program_id", "start_ps"]
    by_corr = launches.set_index("correlation_id")[launch_columns].add_suffix("_launch")
    joined = kernels.join(by_corr, on="correlation_id")
    for col in ("hlo_op", "hlo_module", "program_id"):
        joined[col] = joined[col].where(joined[col].notna(), joined[f"{col}_launch"])

    kernel_name = _kernel_names(space, joined)
    warnings = []
    unattributed = joined["hlo_op"].isna()
    if unattributed.any():
        share = joined.loc[unattributed, "duration_ps"].sum() / max(joined["duration_ps"].sum(), 1)
        warnings.append(
            f"{int(unattributed.sum())} GPU kernels ({share:.0%} of kernel time) have no HLO op "
            "(no hlo_op stat and no matching launch correlation_id); they are listed under their kernel names"
        )
    # Name columns as categoricals (sorted categories, missing kept missing): the merges, group-bys and sorts
    # that follow compare codes, not a string per kernel event.
    events = pd.DataFrame(
        {
            "device": joined["plane"].map(plane_to_device),
            "module": joined["hlo_module"].fillna("").astype("category"),
            "program_id": joined["program_id"].astype("category"),
            "op_name": joined["hlo_op"].where(~unattributed, kernel_name.astype(object)).astype("category"),
            "start_ps": joined["start_ps"],
            "duration_ps": joined["duration_ps"],
            "span_ps": joined["span_ps"],
            "line": joined["line_name"].astype("category"),
            # The host call that launched the kernel (same correlation_id): which annotated step it belongs to.
            "launch_ps": joined["start_ps_launch"].fillna(-1).astype("int64"),
        }
    )
    kernel = kernel_name.cat.add_categories([""]) if "" not in kernel_name.cat.categories else kernel_name
    kernel = kernel.where(~unattributed, "")
    per_kernel = events.assign(_kernel=kernel.array)
    events = one_event_per_execution(events, kernel)
    devices = device_table(
        space, planes,
        device_type=_gpu_device_type,
        vendor=lambda st: st.get("device_vendor"),
        peak_flops_per_s=lambda st: np.nan,  # GPU planes carry no FLOP/s peak
        hbm_bytes_per_s=lambda st: scaled_peak(st.get("memory_bandwidth"), 1.0, "hbm_bytes_per_s"),
        core_count=lambda st: st.get("core_count", np.nan),
    )
    return devices, events, kernel_metadata(per_kernel, events), warnings


def _kernel_names(space: XSpaceTables, joined: pd.DataFrame) -> pd.Series:
    """Per kernel event, the name of its metadata (missing where it has none), as a categorical of the
    metadata's names: no string per event."""
    meta = space.event_metadata
    row = metadata_rows(meta, joined["plane"].to_numpy(), joined["metadata_id"].to_numpy())
    codes, names = pd.factorize(meta["name"])
    return pd.Series(pd.Categorical.from_codes(np.append(codes, -1)[row], categories=names), index=joined.index)


def _launches(space: XSpaceTables, stat_cols: list) -> pd.DataFrame:
    """Events of the /host:CPU planes with a correlation_id and an HLO op, the first of each correlation_id.
    Only the events carrying both stats are joined (a host plane holds most of a GPU capture's events)."""
    host_planes = space.planes.loc[space.planes["name"] == "/host:CPU", "plane"]
    lines = space.lines.loc[space.lines["plane"].isin(host_planes) & space.lines["name"].notna(), "line"]
    stats = space.event_stats
    stats = stats[stats["correlation_id"].notna() & stats["hlo_op"].notna()]
    events = space.events
    rows = stats["event"].to_numpy(np.int64)
    if events.index.equals(pd.RangeIndex(len(events))):  # stats name events by row: a mask, no hash lookup
        carries = np.zeros(len(events), bool)
        carries[rows[(rows >= 0) & (rows < len(events))]] = True
    else:
        carries = events.index.isin(rows)
    launches = events[carries & on_lines(events["line"].to_numpy(), lines)]
    return launches.join(stats.set_index("event")[stat_cols], how="left").drop_duplicates("correlation_id")


MAX_KERNELS_LISTED = 5


def kernel_metadata(per_kernel: pd.DataFrame, executions: pd.DataFrame) -> pd.DataFrame:
    """METADATA_COLUMNS rows, one per (program_id, op_name), with ``kernels``: the kernels the op launched, the
    costliest first, each with its mean time per execution of the op ('Im3d2Col.kd 20.1 us; Cijk_... 312 us'),
    the rest counted; the other columns empty (a GPU trace holds no per-op costs).

    Computed on integer codes (a kernel per op per event, hundreds of thousands of events); ops and kernels
    come in the order a sort-free group-by and a stable sort by time give them, rows without an op or kernel
    name left out as a group-by leaves them."""
    key = ["program_id", "op_name"]
    named = per_kernel[per_kernel["_kernel"] != ""]
    if named.empty:
        return pd.DataFrame(columns=METADATA_COLUMNS)
    kernel, kernel_names = _short_kernels(named["_kernel"])
    op, pids, ops = _op_codes(named, executions)
    n = len(named)
    runs = np.bincount(op[n:][op[n:] >= 0], minlength=len(ops)).tolist()
    keep = (op[:n] >= 0) & (kernel >= 0)
    op_kernel, pairs = pd.factorize(op[:n][keep] * len(kernel_names) + kernel[keep])
    ps = np.zeros(len(pairs), np.int64)
    np.add.at(ps, op_kernel, named["duration_ps"].to_numpy(np.int64)[keep])
    costliest = np.argsort(-ps, kind="stable")
    top_op, top_kernel = pairs[costliest] // len(kernel_names), pairs[costliest] % len(kernel_names)
    top_ps = ps[costliest]
    group, group_ops = pd.factorize(top_op)
    by_group = np.argsort(group, kind="stable")
    rows = []
    for g, rows_of_op in enumerate(np.split(by_group, np.flatnonzero(np.diff(group[by_group])) + 1)):
        o, first = int(group_ops[g]), rows_of_op[:MAX_KERNELS_LISTED]
        listed = [f"{kernel_names[k]} {format_seconds(t / 1e12 / max(runs[o], 1))}"
                  for k, t in zip(top_kernel[first].tolist(), top_ps[first].tolist())]
        more = len(rows_of_op) - len(listed)
        rows.append((pids[o], ops[o], "; ".join(listed) + (f"; +{more} more" if more > 0 else "")))
    out = pd.DataFrame(rows, columns=[*key, "kernels"])
    for col in METADATA_COLUMNS:
        if col not in out:
            out[col] = np.nan if col in ("flops", "model_flops", "bytes_accessed", "hbm_bytes") else None
    return out[METADATA_COLUMNS]


def _short_kernels(kernels: pd.Series) -> tuple[np.ndarray, list]:
    """Per kernel event, a code into the kernels' short names (-1: none): a C++ kernel's signature is its name
    plus the argument list, and the name says which kernel it is. Per distinct name, not per event."""
    codes, distinct = pd.factorize(kernels, use_na_sentinel=False)  # (a missing name reads 'nan', as str() has it)
    short = pd.Series(distinct.astype(str)).str.replace(r"\(.*\)\s*$", "", regex=True).str.slice(0, 120)
    short_code, names = pd.factorize(short)
    return short_code[codes], list(names)


def _op_codes(named: pd.DataFrame, executions: pd.DataFrame) -> tuple[np.ndarray, list, list]:
    """Per row of ``named`` then of ``executions``, a code for its (program_id, op_name), NaN program ids as ''
    so that the keys meet (-1 where op_name is missing, or for an execution of a key no named row has); and
    each code's program_id and op_name. The executions are looked up in the named rows' keys (no joint table)."""
    def blank(ids: pd.Series) -> pd.Series:
        if isinstance(ids.dtype, pd.CategoricalDtype):  # on codes: no object per row
            return (ids if "" in ids.cat.categories else ids.cat.add_categories([""])).fillna("")
        ids = ids.astype(object)
        return ids.where(ids.notna(), "")

    pid_code, pid_values = pd.factorize(blank(named["program_id"]))
    op_code, op_values = pd.factorize(named["op_name"])
    run_pid = pid_values.get_indexer(blank(executions["program_id"]))
    run_op = op_values.get_indexer(executions["op_name"])
    code = np.full(len(named) + len(executions), -1, np.int64)
    valid = np.concatenate([op_code >= 0, (run_op >= 0) & (run_pid >= 0)])
    pair = np.concatenate([pid_code, run_pid]).astype(np.int64) * len(op_values) + np.concatenate([op_code, run_op])
    code[valid], pairs = pd.factorize(pair[valid])
    return code, list(pid_values.take(pairs // len(op_values))), list(op_values.take(pairs % len(op_values)))


def one_event_per_execution(events: pd.DataFrame, kernel: pd.Series) -> pd.DataFrame:
    """One event per execution of an HLO op, not per kernel it launched.

    An op may launch several kernels each time it runs (a ROCm convolution: Im2Col then a GEMM; a cuBLAS
    split-K GEMM and its reduction; a fused attention's kernels). Counted as events, the op would run twice
    per step and its FLOPs be priced twice. On each device and stream line, an op's run of kernels is one
    execution when no other op's kernel comes between them and the op's first kernel (the kernel it starts
    with, by name) does not come again: its start is the first kernel's, its cost the kernels' summed time (so
    per-op totals are unchanged), its extent to the last kernel's end. Ops launching one kernel are unchanged.
    (The bundled MI300 capture: each cudnn-conv is Im3d2Col then a GEMM, 20-900 us apart on its stream.)
    """
    if events.empty:
        return events
    order, joins = _kernel_joins(events, kernel)
    if not joins.any():
        return events
    return _merged(events.iloc[order], np.flatnonzero(~joins)).sort_values(
        ["device", "start_ps"], kind="stable").reset_index(drop=True)


def _kernel_joins(events: pd.DataFrame, kernel: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The events' order by (device, line, start) and, in that order, whether each kernel continues the
    execution before it; on integer codes, with a missing name equal to none (as pandas compares them)."""
    line, _ = pd.factorize(events["line"], sort=True)
    op, _ = pd.factorize(events["op_name"])
    device, _ = pd.factorize(events["device"])
    kc, kernels = pd.factorize(kernel)
    order = np.lexsort((events["start_ps"].to_numpy(), np.where(line < 0, len(line), line), device))
    line, op, device, kc = line[order], op[order], device[order], kc[order]
    same_op = np.zeros(len(order), bool)
    same_op[1:] = ((device[1:] == device[:-1]) & (line[1:] == line[:-1]) & (line[1:] >= 0)
                   & (op[1:] == op[:-1]) & (op[1:] >= 0))
    # The first named kernel of each (device, op) in that order: where the op's executions start.
    group = np.where(op >= 0, device.astype(np.int64) * (int(op.max()) + 1) + op, -1)
    group, _ = pd.factorize(group)  # -1 keeps its own code: rows without an op never join anyway
    first = np.full(int(group.max()) + 1, -1, np.int64)
    named = np.flatnonzero(kc >= 0)[::-1]
    first[group[named]] = kc[named]  # the last write is the first named kernel
    empty = kernels.get_loc("") if "" in kernels else -2
    joins = same_op & ((kc < 0) | (first[group] < 0) | (kc != first[group])) & (kc != empty)
    return order, joins


def _merged(ev: pd.DataFrame, starts: np.ndarray) -> pd.DataFrame:
    """One row per execution (the rows of ``ev`` from each of ``starts`` to the next): each column's first
    present value (as a group-by's ``first``), the summed cost, the extent to the last kernel's end, the
    earliest known launch."""
    out = {col: _first_present(ev[col], starts) for col in ev.columns}
    start = ev["start_ps"].to_numpy()
    out["duration_ps"] = pd.Series(np.add.reduceat(ev["duration_ps"].to_numpy(), starts))
    out["span_ps"] = pd.Series(np.maximum.reduceat(start + ev["span_ps"].to_numpy(), starts) - start[starts])
    launch = ev["launch_ps"].to_numpy(np.float64)
    earliest = np.minimum.reduceat(np.where(launch >= 0, launch, np.inf), starts)
    out["launch_ps"] = pd.Series(np.where(np.isinf(earliest), -1, earliest).astype(np.int64))
    return pd.DataFrame(out)


def _first_present(values: pd.Series, starts: np.ndarray) -> pd.Series:
    missing = values.isna().to_numpy()
    if not missing.any():
        return values.iloc[starts].reset_index(drop=True)
    n = len(values)
    first = np.minimum.reduceat(np.where(missing, n, np.arange(n)), starts)
    taken = values.iloc[np.minimum(first, n - 1)].reset_index(drop=True)
    return taken.where(pd.Series(first < n)) if (first == n).any() else taken


def _gpu_device_type(stats: dict) -> str:
    vendor = stats.get("device_vendor") or "GPU"
    model = stats.get("device_model") or stats.get("model") or ""
    cap = ""
    if "compute_cap_major" in stats:
        cap = f" (compute capability {stats.get('compute_cap_major')}.{stats.get('compute_cap_minor', 0)})"
    cores = f", {stats['core_count']} cores" if "core_count" in stats else ""
    return f"{vendor} {model}".strip() + cap + cores


def cpu_tables(space: XSpaceTables, device_base: int):
    host_planes = space.planes.loc[space.planes["name"].str.startswith("/host:CPU"), "plane"]
    ev = events_with_stats(
        space, host_planes, lambda n: n.notna(), ["hlo_op", "hlo_module", "program_id", "device_ordinal", "run_id"]
    )
    ev = ev.dropna(subset=["hlo_op"])
    # Each XLA host device is one device; without an ordinal all ops belong to device 0.
    ordinal = ev["device_ordinal"].fillna(0).astype("int64")
    local = np.sort(ordinal.unique()) if len(ev) else np.array([0])
    to_device = {o: device_base + i for i, o in enumerate(local)}
    events = pd.DataFrame(
        {
            "device": ordinal.map(to_device),
            "module": ev["hlo_module"].fillna(""),
            "program_id": ev["program_id"],
            "op_name": ev["hlo_op"],
            "start_ps": ev["start_ps"],
            "duration_ps": ev["duration_ps"],
            "span_ps": ev["span_ps"],
            "line": ev["line_name"],
            "run_id": ev["run_id"],
            "launch_ps": cpu_launch_ps(space, ev["run_id"]),
        }
    )
    devices = pd.DataFrame(
        {
            "device": [to_device[o] for o in local],
            "host": space.hostname,
            "plane_name": "/host:CPU",
            "local_index": list(local),
            "device_type": "CPU",
            "vendor": "",
            "peak_flops_per_s": np.nan,
            "hbm_bytes_per_s": np.nan,
            "core_count": np.nan,
        }
    )
    devices["plane_stats"] = [{} for _ in range(len(devices))]
    return devices, events

"""Op events of GPU and CPU captures, which record no program executions of their own.

- GPU: kernels on ``Stream #k(...)`` lines; the HLO op is on the kernel's stats or on the host launch
  event sharing its ``correlation_id`` (whose time also says which annotated step launched the kernel).
- CPU: host thread events carrying an ``hlo_op`` stat, one device per XLA host device ordinal.
- Program executions are derived from the op events (:func:`derived_module_runs`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...parsers.xplane import XSpaceTables
from ...units import format_seconds
from .host_steps import cpu_launch_ps
from .planes import (
    GPU_PLANE,
    MODULE_COLUMNS,
    device_planes,
    device_table,
    empty_table,
    events_with_stats,
    scaled_peak,
)
from .tpu_ops import METADATA_COLUMNS


def gpu_tables(space: XSpaceTables, device_base: int):
    planes, plane_to_device = device_planes(space, GPU_PLANE, device_base)

    stat_cols = ["hlo_op", "hlo_module", "program_id", "correlation_id"]
    kernels = events_with_stats(space, planes["plane"], lambda n: n.str.startswith("Stream"), stat_cols)
    # Host launch events name the HLO op for kernels that do not carry it themselves.
    host_planes = space.planes.loc[space.planes["name"] == "/host:CPU", "plane"]
    launches = events_with_stats(space, host_planes, lambda n: n.notna(), stat_cols)
    launches = launches.dropna(subset=["correlation_id", "hlo_op"]).drop_duplicates("correlation_id")
    launch_columns = ["hlo_op", "hlo_module", "program_id", "start_ps"]
    by_corr = launches.set_index("correlation_id")[launch_columns].add_suffix("_launch")
    joined = kernels.join(by_corr, on="correlation_id")
    for col in ("hlo_op", "hlo_module", "program_id"):
        joined[col] = joined[col].where(joined[col].notna(), joined[f"{col}_launch"])

    meta = space.event_metadata.set_index(["plane", "metadata_id"])["name"]
    kernel_keys = pd.MultiIndex.from_arrays([joined["plane"], joined["metadata_id"]])
    kernel_name = pd.Series(meta.reindex(kernel_keys).to_numpy(), index=joined.index)
    warnings = []
    unattributed = joined["hlo_op"].isna()
    if unattributed.any():
        share = joined.loc[unattributed, "duration_ps"].sum() / max(joined["duration_ps"].sum(), 1)
        warnings.append(
            f"{int(unattributed.sum())} GPU kernels ({share:.0%} of kernel time) have no HLO op "
            "(no hlo_op stat and no matching launch correlation_id); they are listed under their kernel names"
        )
    events = pd.DataFrame(
        {
            "device": joined["plane"].map(plane_to_device),
            "module": joined["hlo_module"].fillna(""),
            "program_id": joined["program_id"],
            "op_name": joined["hlo_op"].where(~unattributed, kernel_name),
            "start_ps": joined["start_ps"],
            "duration_ps": joined["duration_ps"],
            "span_ps": joined["span_ps"],
            "line": joined["line_name"],
            # The host call that launched the kernel (same correlation_id): which annotated step it belongs to.
            "launch_ps": joined["start_ps_launch"].fillna(-1).astype("int64"),
        }
    )
    per_kernel = events.assign(_kernel=kernel_name.where(~unattributed, "").to_numpy())
    events = one_event_per_execution(events, kernel_name.where(~unattributed, ""))
    devices = device_table(
        space, planes,
        device_type=_gpu_device_type,
        vendor=lambda st: st.get("device_vendor"),
        peak_flops_per_s=lambda st: np.nan,  # GPU planes carry no FLOP/s peak
        hbm_bytes_per_s=lambda st: scaled_peak(st.get("memory_bandwidth"), 1.0, "hbm_bytes_per_s"),
        core_count=lambda st: st.get("core_count", np.nan),
    )
    return devices, events, kernel_metadata(per_kernel, events), warnings


MAX_KERNELS_LISTED = 5


def kernel_metadata(per_kernel: pd.DataFrame, executions: pd.DataFrame) -> pd.DataFrame:
    """METADATA_COLUMNS rows, one per (program_id, op_name), with ``kernels``: the kernels the op launched, the
    costliest first, each with its mean time per execution of the op ('Im3d2Col.kd 20.1 us; Cijk_... 312 us'),
    the rest counted; the other columns empty (a GPU trace holds no per-op costs)."""
    key = ["program_id", "op_name"]

    def keyed(frame: pd.DataFrame) -> pd.DataFrame:  # NaN program ids as '' so that the keys meet
        return frame.assign(program_id=frame["program_id"].astype(object).where(frame["program_id"].notna(), ""))

    named = keyed(per_kernel[per_kernel["_kernel"] != ""])
    if named.empty:
        return pd.DataFrame(columns=METADATA_COLUMNS)
    # A C++ kernel's signature is its name plus the argument list: the name says which kernel it is.
    named["_kernel"] = named["_kernel"].astype(str).str.replace(r"\(.*\)\s*$", "", regex=True).str.slice(0, 120)
    runs = keyed(executions).groupby(key, sort=False).size().rename("_runs")
    totals = (named.groupby([*key, "_kernel"], sort=False)["duration_ps"].sum().rename("_ps")
              .reset_index().join(runs, on=key).sort_values("_ps", ascending=False, kind="stable"))
    rows = []
    for (program_id, op_name), group in totals.groupby(key, sort=False):
        listed = [f"{k} {format_seconds(ps / 1e12 / max(n, 1))}"
                  for k, ps, n in zip(group["_kernel"], group["_ps"], group["_runs"].fillna(1))][:MAX_KERNELS_LISTED]
        more = len(group) - len(listed)
        rows.append((program_id, op_name, "; ".join(listed) + (f"; +{more} more" if more > 0 else "")))
    out = pd.DataFrame(rows, columns=[*key, "kernels"])
    for col in METADATA_COLUMNS:
        if col not in out:
            out[col] = np.nan if col in ("flops", "model_flops", "bytes_accessed", "hbm_bytes") else None
    return out[METADATA_COLUMNS]


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
    ev = events.assign(_kernel=kernel.to_numpy()).sort_values(["device", "line", "start_ps"], kind="stable")
    same_op = ((ev["device"] == ev["device"].shift()) & (ev["line"] == ev["line"].shift())
               & (ev["op_name"] == ev["op_name"].shift()))
    first_kernel = ev.groupby(["device", "op_name"], observed=True, sort=False)["_kernel"].transform("first")
    joins = same_op & (ev["_kernel"] != first_kernel) & (ev["_kernel"] != "")
    if not joins.any():
        return events
    execution = (~joins).cumsum().to_numpy()
    end = (ev["start_ps"] + ev["span_ps"]).to_numpy()
    launch = ev["launch_ps"].where(ev["launch_ps"] >= 0)
    grouped = ev.assign(_end=end, _launch=launch).groupby(execution, sort=False)
    first = grouped.first()
    merged = first[list(events.columns)].assign(
        duration_ps=grouped["duration_ps"].sum().to_numpy(),
        span_ps=(grouped["_end"].max() - first["start_ps"]).to_numpy(),
        launch_ps=grouped["_launch"].min().fillna(-1).astype("int64").to_numpy())
    return merged.sort_values(["device", "start_ps"], kind="stable").reset_index(drop=True)


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


def derived_module_runs(events: pd.DataFrame) -> pd.DataFrame:
    """Program executions where the capture records none (GPU, CPU).

    CPU op events carry the execution's ``run_id``. Without it (GPU kernels), a run
    of a program starts each time the program's first op (in time order on the
    device) appears again: every op of a program runs once per execution, so the
    count of that first op numbers the executions.
    """
    events = events[events["module"].astype(str) != ""]  # kernels of no program (driver copies) form no runs
    if events.empty:
        return empty_table(MODULE_COLUMNS)
    # A program is its id, not its name: one jitted function compiled for six shapes is six programs.
    events = events.assign(program_id=events["program_id"].astype(object).where(events["program_id"].notna(), ""))
    key = ["device", "module", "program_id"]
    o = events.sort_values([*key, "start_ps"], kind="stable")
    if "run_id" in o and o["run_id"].notna().all():
        run = o["run_id"].astype("int64")
    else:
        first_op = o.groupby(key)["op_name"].transform("first")
        run = (o["op_name"] == first_op).astype(np.int64).groupby([o[k] for k in key]).cumsum()
    o = o.assign(run_id=run, end_ps=o["start_ps"] + o["span_ps"])
    runs = o.groupby([*key, "run_id"], as_index=False).agg(start_ps=("start_ps", "min"), end_ps=("end_ps", "max"))
    runs["duration_ps"] = runs["end_ps"] - runs["start_ps"]
    return runs[MODULE_COLUMNS]

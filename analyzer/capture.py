"""One capture, all hosts, as platform-neutral tables.

Whatever the platform, the analysis downstream sees the same tables:

- ``devices``: one row per accelerator (or, on CPU captures, per XLA host device).
- ``events``: one row per op event (one execution of one HLO op on one device); columns declared in
  ``tables.EVENTS``.
- ``modules``: one row per program execution on a device (the basis of steps).
- ``op_metadata``: per (program_id, op_name), what the trace says about the op: HLO
  text, category, flops, bytes.
- ``async_spans``: TPU start→done spans of asynchronous ops (collectives, copies).
- ``steps_line``: events of an explicit ``Steps`` line when the capture has one.
- ``step_annotations``: the user's annotated steps (``StepTraceAnnotation``), one row per device and step;
  each op event's ``launch_ps`` says which step launched it (``host_steps``).

How each platform records ops (see shared reference ``xplane.md``):
- TPU: ``XLA Ops`` line per ``/device:TPU:N`` plane; op identity in the event metadata.
- GPU: kernels on ``Stream #k(...)`` lines; the HLO op is on the kernel's stats or on
  the host launch event sharing its ``correlation_id``.
- CPU: host thread events carrying an ``hlo_op`` stat.
"""

from __future__ import annotations

from ..errors import InputError

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..parsers.xplane import XSpaceTables
from .host_steps import ANNOTATION_COLUMNS, cpu_launch_ps, step_annotations, tpu_launch_ps
from .sanity import checked_spaces
from .tables import EVENTS

_TPU_PLANE = re.compile(r"^/device:TPU:(\d+)$")
_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_MODULE_EVENT = re.compile(r"^(?P<module>.*)\((?P<program_id>\d+)\)$")

MODULE_COLUMNS = ["device", "module", "program_id", "run_id", "start_ps", "duration_ps"]
METADATA_COLUMNS = [
    "program_id",
    "op_name",
    "hlo_text",
    "category",
    "flops",
    "model_flops",
    "bytes_accessed",
    "hbm_bytes",
    "tf_op",
    "source",
]


class CaptureError(InputError):
    """The capture was read but holds nothing we can measure."""


@dataclass(frozen=True)
class Capture:
    platform: str  # 'tpu' | 'gpu' | 'cpu'
    hosts: tuple[str, ...]
    devices: pd.DataFrame
    events: pd.DataFrame  # one row per op event: tables.EVENTS
    modules: pd.DataFrame
    op_metadata: pd.DataFrame
    async_spans: pd.DataFrame
    steps_line: pd.DataFrame
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # One row per (device, annotated step): device, name, step_num, start_ps, end_ps (host_steps).
    step_annotations: pd.DataFrame = field(default_factory=lambda: _empty(["device", *ANNOTATION_COLUMNS]))


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def _op_name_from_text(name: pd.Series) -> pd.Series:
    """``%copy-done.2 = f32[...] copy-done(...)`` -> ``copy-done.2`` (fallback when no display name)."""
    extracted = name.str.extract(r"^%?([^\s=]+)\s*=", expand=False)
    return extracted.fillna(name)


def _op_names(meta: pd.DataFrame) -> pd.Series:
    """An op's name: the metadata display name, else parsed from its HLO text."""
    display = meta["display_name"].fillna("")
    return display.where(display != "", _op_name_from_text(meta["name"].fillna("")))


def _split_module_names(names: pd.Series) -> tuple[pd.Series, pd.Series]:
    parts = names.str.extract(_MODULE_EVENT)
    module = parts["module"].fillna(names)
    return module, parts["program_id"]


def _platform_of(space: XSpaceTables) -> str:
    names = space.planes["name"]
    if names.str.match(_TPU_PLANE).any():
        return "tpu"
    if names.str.match(_GPU_PLANE).any():
        return "gpu"
    return "cpu"


def _line_ids(space: XSpaceTables, plane_rows, line_name: str) -> pd.Series:
    lines = space.lines
    return lines.loc[lines["plane"].isin(plane_rows) & (lines["name"] == line_name), "line"]


def _device_planes(space: XSpaceTables, pattern: re.Pattern, device_base: int):
    """Device planes in index order, numbered from ``device_base`` (devices are global across hosts)."""
    planes = space.planes[space.planes["name"].str.match(pattern)].copy()
    planes["local_index"] = planes["name"].str.extract(pattern, expand=False).astype(int)
    planes = planes.sort_values("local_index")
    planes["device"] = device_base + np.arange(len(planes))
    return planes, dict(zip(planes["plane"], planes["device"]))


def _tpu_tables(space: XSpaceTables, device_base: int):
    planes, plane_to_device = _device_planes(space, _TPU_PLANE, device_base)

    meta = space.event_metadata[space.event_metadata["plane"].isin(planes["plane"])]

    ops_ev = space.events[space.events["line"].isin(_line_ids(space, planes["plane"], "XLA Ops"))]
    # Name and program are properties of the metadata: resolve them once per op, then give each
    # event its op's category codes (no string handling per event).
    op_meta = meta[["plane", "metadata_id"]].reset_index(drop=True)
    name_codes, name_values = pd.factorize(_op_names(meta).to_numpy())
    program_codes, program_values = pd.factorize(meta["program_id"].fillna("").to_numpy())
    position = pd.Series(np.arange(len(op_meta)), index=pd.MultiIndex.from_frame(op_meta))
    row = position.reindex(pd.MultiIndex.from_arrays([ops_ev["plane"], ops_ev["metadata_id"]])).to_numpy()
    # Events whose metadata is missing stay, as one visible '<unknown op>' (the last code).
    row = np.where(np.isnan(row), len(op_meta), row).astype(np.int64)
    name_codes = np.append(name_codes, len(name_values))
    program_codes = np.append(program_codes, list(program_values).index("") if "" in program_values else len(program_values))
    events = pd.DataFrame(
        {
            "device": ops_ev["plane"].map(plane_to_device).to_numpy(),
            "program_id": pd.Categorical.from_codes(
                program_codes[row], categories=[*program_values, *([] if "" in program_values else [""])]),
            "op_name": pd.Categorical.from_codes(name_codes[row], categories=[*name_values, "<unknown op>"]),
            "start_ps": ops_ev["start_ps"].to_numpy(),
            "duration_ps": ops_ev["duration_ps"].to_numpy(),
            "span_ps": ops_ev["span_ps"].to_numpy(),
            "line": "XLA Ops",
        }
    )

    mod_ev = _events_with_stats(space, planes["plane"], "XLA Modules", ["run_id"])
    mod_ev = mod_ev.merge(meta[["plane", "metadata_id", "name"]], on=["plane", "metadata_id"], how="left")
    module, program_id = _split_module_names(mod_ev["name"].fillna("").astype(str))
    modules = pd.DataFrame(
        {
            "device": mod_ev["plane"].map(plane_to_device),
            "module": module,
            "program_id": program_id,
            "run_id": mod_ev["run_id"],
            "start_ps": mod_ev["start_ps"],
            "duration_ps": mod_ev["duration_ps"],
        }
    )

    async_ev = _events_with_stats(space, planes["plane"], "Async XLA Ops", ["hlo_op"])
    if len(async_ev):
        async_ev = async_ev.merge(meta[["plane", "metadata_id", "name", "display_name", "program_id"]], on=["plane", "metadata_id"], how="left")
        async_spans = pd.DataFrame(
            {
                "device": async_ev["plane"].map(plane_to_device),
                "program_id": async_ev["program_id"],
                "start_op": _op_name_from_text(async_ev["name"].fillna("").astype("category")),
                "done_op": async_ev["hlo_op"],
                "kind": async_ev["display_name"],
                "start_ps": async_ev["start_ps"],
                "end_ps": async_ev["start_ps"] + async_ev["duration_ps"],
            }
        )
    else:
        async_spans = _empty(["device", "program_id", "start_op", "done_op", "kind", "start_ps", "end_ps"])

    events["launch_ps"] = tpu_launch_ps(space, events, modules, dict(zip(planes["device"], planes["local_index"])))

    steps_ev = space.events[space.events["line"].isin(_line_ids(space, planes["plane"], "Steps"))]
    steps_line = pd.DataFrame(
        {
            "device": steps_ev["plane"].map(plane_to_device),
            "start_ps": steps_ev["start_ps"],
            "duration_ps": steps_ev["duration_ps"],
        }
    )

    md = meta.copy()
    md["op_name"] = _op_names(md)
    md = md.rename(columns={"name": "hlo_text", "hlo_category": "category"})
    # Ops appear once per device plane with identical metadata: keep one row per op.
    md = md[md["hlo_text"].str.startswith("%", na=False) | md["category"].notna()]
    op_metadata = md.drop_duplicates(["program_id", "op_name"])[METADATA_COLUMNS]

    devices = _device_table(
        space, planes,
        device_type=lambda st: st.get("device_type_string"),
        vendor=lambda st: "Google",
        peak_flops_per_s=lambda st: _scaled(st.get("peak_teraflops_per_second"), 1e12),
        hbm_bytes_per_s=lambda st: _scaled(st.get("peak_hbm_bw_gigabytes_per_second"), 1e9),
        core_count=lambda st: np.nan,
    )
    return devices, events, modules, op_metadata, async_spans, steps_line


def _device_table(space: XSpaceTables, planes: pd.DataFrame, **from_stats) -> pd.DataFrame:
    """One row per device plane; each keyword maps the plane's stats to one column."""
    stats = [space.plane_stats[p] for p in planes["plane"]]
    devices = pd.DataFrame(
        {
            "device": planes["device"].to_numpy(),
            "host": space.hostname,
            "plane_name": planes["name"].to_numpy(),
            "local_index": planes["local_index"].to_numpy(),
        }
    )
    for column, extract in from_stats.items():
        devices[column] = [extract(st) for st in stats]
    devices["plane_stats"] = stats
    return devices


def _scaled(value, factor: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return np.nan
    return value * factor if value > 0 else np.nan


def _events_with_stats(space: XSpaceTables, plane_rows, line_name_or_pred, columns) -> pd.DataFrame:
    """Events of some lines with the given per-event stat columns joined (NaN where absent)."""
    pred = line_name_or_pred if callable(line_name_or_pred) else (lambda n: n == line_name_or_pred)
    lines = space.lines[space.lines["plane"].isin(plane_rows) & pred(space.lines["name"])]
    mask = space.events["line"].isin(lines["line"])
    ev = space.events[mask]
    ev = ev.join(space.event_stats.set_index("event")[list(columns)], how="left")
    names = lines.set_index("line")["name"]
    ev = ev.assign(line_name=ev["line"].map(names))
    return ev


def _gpu_tables(space: XSpaceTables, device_base: int):
    planes, plane_to_device = _device_planes(space, _GPU_PLANE, device_base)

    stat_cols = ["hlo_op", "hlo_module", "program_id", "correlation_id"]
    kernels = _events_with_stats(space, planes["plane"], lambda n: n.str.startswith("Stream"), stat_cols)
    # Host launch events name the HLO op for kernels that do not carry it themselves.
    host_planes = space.planes.loc[space.planes["name"] == "/host:CPU", "plane"]
    launches = _events_with_stats(space, host_planes, lambda n: n.notna(), stat_cols)
    launches = launches.dropna(subset=["correlation_id", "hlo_op"]).drop_duplicates("correlation_id")
    by_corr = launches.set_index("correlation_id")[["hlo_op", "hlo_module", "program_id", "start_ps"]].add_suffix("_launch")
    joined = kernels.join(by_corr, on="correlation_id")
    for col in ("hlo_op", "hlo_module", "program_id"):
        joined[col] = joined[col].where(joined[col].notna(), joined[f"{col}_launch"])

    meta = space.event_metadata.set_index(["plane", "metadata_id"])["name"]
    kernel_name = pd.Series(meta.reindex(pd.MultiIndex.from_arrays([joined["plane"], joined["metadata_id"]])).to_numpy(), index=joined.index)
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
    devices = _device_table(
        space, planes,
        device_type=_gpu_device_type,
        vendor=lambda st: st.get("device_vendor"),
        peak_flops_per_s=lambda st: np.nan,  # GPU planes carry no FLOP/s peak
        hbm_bytes_per_s=lambda st: _scaled(st.get("memory_bandwidth"), 1.0),
        core_count=lambda st: st.get("core_count", np.nan),
    )
    return devices, events, warnings


def _gpu_device_type(stats: dict) -> str:
    vendor = stats.get("device_vendor") or "GPU"
    model = stats.get("device_model") or stats.get("model") or ""
    cap = ""
    if "compute_cap_major" in stats:
        cap = f" (compute capability {stats.get('compute_cap_major')}.{stats.get('compute_cap_minor', 0)})"
    cores = f", {stats['core_count']} cores" if "core_count" in stats else ""
    return f"{vendor} {model}".strip() + cap + cores


def _cpu_tables(space: XSpaceTables, device_base: int):
    host_planes = space.planes.loc[space.planes["name"].str.startswith("/host:CPU"), "plane"]
    ev = _events_with_stats(
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


def _derived_module_runs(events: pd.DataFrame) -> pd.DataFrame:
    """Program executions where the capture records none (GPU, CPU).

    CPU op events carry the execution's ``run_id``. Without it (GPU kernels), a run
    of a program starts each time the program's first op (in time order on the
    device) appears again: every op of a program runs once per execution, so the
    count of that first op numbers the executions.
    """
    events = events[events["module"].astype(str) != ""]  # kernels of no program (driver copies) form no runs
    if events.empty:
        return _empty(MODULE_COLUMNS)
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


def build_capture(spaces: list[XSpaceTables]) -> Capture:
    """Combine the hosts of one run into platform-neutral tables."""
    if not spaces:
        raise CaptureError("no xplane files to read")
    spaces, warnings = checked_spaces(spaces)  # duplicated hosts and impossible values out, with warnings
    platforms = {_platform_of(s) for s in spaces}
    platform = "tpu" if "tpu" in platforms else "gpu" if "gpu" in platforms else "cpu"

    all_devices, all_events, all_modules, all_meta, all_async, all_steps = [], [], [], [], [], []
    all_annotations = []
    device_base = 0
    for space in spaces:
        if platform == "tpu":
            devices, events, modules, meta, async_spans, steps = _tpu_tables(space, device_base)
            all_modules.append(modules)
            all_meta.append(meta)
            all_async.append(async_spans)
            all_steps.append(steps)
        elif platform == "gpu":
            devices, events, w = _gpu_tables(space, device_base)
            warnings.extend(w)
        else:
            devices, events = _cpu_tables(space, device_base)
        all_devices.append(devices)
        all_events.append(events)
        # A host's annotations hold the steps of every device it drives.
        annotations = step_annotations(space)
        all_annotations.append(annotations.merge(devices[["device"]], how="cross")[["device", *ANNOTATION_COLUMNS]])
        device_base += len(devices)

    devices = pd.concat(all_devices, ignore_index=True)
    events = pd.concat(all_events, ignore_index=True)
    if events.empty:
        hosts = ", ".join(str(s.path) for s in spaces)
        raise CaptureError(f"{hosts}: no HLO op events found in this capture (was the program running while tracing?)")

    if platform == "tpu":
        modules = pd.concat(all_modules, ignore_index=True)
        op_metadata = pd.concat(all_meta, ignore_index=True).drop_duplicates(["program_id", "op_name"])
        # Name each op's program after its module execution events.
        module_names = modules.dropna(subset=["program_id"]).drop_duplicates("program_id").set_index("program_id")["module"]
        events["module"] = events["program_id"].map(module_names).astype(object).fillna("")
        async_spans = pd.concat(all_async, ignore_index=True)
        steps_line = pd.concat(all_steps, ignore_index=True)
    else:
        modules = _derived_module_runs(events)
        op_metadata = _empty(METADATA_COLUMNS)
        async_spans = _empty(["device", "program_id", "start_op", "done_op", "kind", "start_ps", "end_ps"])
        steps_line = _empty(["device", "start_ps", "duration_ps"])
        if "run_id" not in events or events["run_id"].isna().any():
            warnings.append(
                f"{platform.upper()} capture: program executions were inferred from op order "
                "(no 'XLA Modules' line); each repeat of a program's first op starts a new run"
            )

    events = events[EVENTS.names].sort_values(["device", "start_ps"], kind="stable").reset_index(drop=True)
    # Few distinct names over millions of events: categoricals make every later groupby cheap.
    for col in ("module", "program_id", "op_name", "line"):
        if not isinstance(events[col].dtype, pd.CategoricalDtype):
            events[col] = events[col].astype(object).where(events[col].notna(), "").astype("category")
    events = EVENTS.coerce(events)
    return Capture(
        platform=platform,
        hosts=tuple(s.hostname for s in spaces),
        devices=devices,
        events=events,
        modules=modules.reset_index(drop=True),
        op_metadata=op_metadata.reset_index(drop=True),
        async_spans=async_spans.reset_index(drop=True),
        steps_line=steps_line.reset_index(drop=True),
        warnings=tuple(warnings),
        step_annotations=pd.concat(all_annotations, ignore_index=True),
    )

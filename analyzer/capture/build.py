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

from ...errors import InputError

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ...parsers.xplane import XSpaceTables
from .gpu_cpu_ops import cpu_tables, derived_module_runs, gpu_tables
from .host_steps import ANNOTATION_COLUMNS, step_annotations, tpu_launch_ps
from .planes import (
    GPU_PLANE,
    TPU_PLANE,
    device_planes,
    device_table,
    empty_table,
    events_with_stats,
    line_events,
    metadata_rows,
    scaled_peak,
)
from .sanity import checked_spaces
from ..tables import EVENTS

_NAME_COLUMNS = ("module", "program_id", "op_name", "line")
_MODULE_EVENT = re.compile(r"^(?P<module>.*)\((?P<program_id>\d+)\)$")

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


ASYNC_COLUMNS = ["device", "program_id", "start_op", "done_op", "kind", "start_ps", "end_ps"]


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
    step_annotations: pd.DataFrame = field(default_factory=lambda: empty_table(["device", *ANNOTATION_COLUMNS]))


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
    if names.str.match(TPU_PLANE).any():
        return "tpu"
    if names.str.match(GPU_PLANE).any():
        return "gpu"
    return "cpu"



def _tpu_tables(space: XSpaceTables, device_base: int):
    planes, plane_to_device = device_planes(space, TPU_PLANE, device_base)

    meta = space.event_metadata[space.event_metadata["plane"].isin(planes["plane"])]
    device_of_plane = np.full(len(space.planes), -1, np.int64)
    device_of_plane[planes["plane"].to_numpy(np.int64)] = planes["device"].to_numpy(np.int64)

    ev = space.events
    rows = line_events(space, planes["plane"], "XLA Ops")
    ev_plane = ev["plane"].to_numpy()[rows]
    # Name and program are properties of the metadata: resolve them once per op, then give each
    # event its op's category codes (no string handling per event).
    name_codes, name_values = pd.factorize(_op_names(meta).to_numpy())
    program_codes, program_values = pd.factorize(meta["program_id"].fillna("").to_numpy())
    row = metadata_rows(meta, ev_plane, ev["metadata_id"].to_numpy()[rows])
    # Events whose metadata is missing stay, as one visible '<unknown op>' (the last code).
    row = np.where(row < 0, len(meta), row)
    name_codes = np.append(name_codes, len(name_values))
    program_codes = np.append(program_codes, list(program_values).index("") if "" in program_values else len(program_values))
    events = pd.DataFrame(
        {
            "device": device_of_plane[ev_plane],
            "program_id": pd.Categorical.from_codes(
                program_codes[row], categories=[*program_values, *([] if "" in program_values else [""])]),
            "op_name": pd.Categorical.from_codes(name_codes[row], categories=[*name_values, "<unknown op>"]),
            "start_ps": ev["start_ps"].to_numpy()[rows],
            "duration_ps": ev["duration_ps"].to_numpy()[rows],
            "span_ps": ev["span_ps"].to_numpy()[rows],
            "line": pd.Categorical.from_codes(np.zeros(len(rows), np.int8), categories=["XLA Ops"]),
        },
        copy=False,
    )

    mod_ev = events_with_stats(space, planes["plane"], "XLA Modules", ["run_id"])
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

    async_spans = _async_spans(space, planes, meta, device_of_plane)

    events["launch_ps"] = tpu_launch_ps(space, events, modules, dict(zip(planes["device"], planes["local_index"])))

    steps_ev = line_events(space, planes["plane"], "Steps")
    steps_line = pd.DataFrame(
        {
            "device": device_of_plane[ev["plane"].to_numpy()[steps_ev]],
            "start_ps": ev["start_ps"].to_numpy()[steps_ev],
            "duration_ps": ev["duration_ps"].to_numpy()[steps_ev],
        }
    )

    md = meta.copy()
    md["op_name"] = _op_names(md)
    md = md.rename(columns={"name": "hlo_text", "hlo_category": "category"})
    # Ops appear once per device plane with identical metadata: keep one row per op.
    md = md[md["hlo_text"].str.startswith("%", na=False) | md["category"].notna()]
    op_metadata = md.drop_duplicates(["program_id", "op_name"])[METADATA_COLUMNS]

    devices = device_table(
        space, planes,
        device_type=lambda st: st.get("device_type_string"),
        vendor=lambda st: "Google",
        peak_flops_per_s=lambda st: scaled_peak(st.get("peak_teraflops_per_second"), 1e12),
        hbm_bytes_per_s=lambda st: scaled_peak(st.get("peak_hbm_bw_gigabytes_per_second"), 1e9),
        core_count=lambda st: np.nan,
    )
    return devices, events, modules, op_metadata, async_spans, steps_line


def _async_spans(space: XSpaceTables, planes: pd.DataFrame, meta: pd.DataFrame, device_of_plane: np.ndarray):
    """TPU start->done spans of the ``Async XLA Ops`` lines: what they start, and the done op they wait for."""
    async_ev = events_with_stats(space, planes["plane"], "Async XLA Ops", ["hlo_op"])
    if not len(async_ev):
        return empty_table(ASYNC_COLUMNS)
    # Per metadata row once: the start op's name, its kind and program; per event a lookup (-1: none).
    row = metadata_rows(meta, async_ev["plane"].to_numpy(), async_ev["metadata_id"].to_numpy())
    by_row = meta[["display_name", "program_id"]].reset_index(drop=True)
    start_op = _op_name_from_text(meta["name"].fillna("").astype("category")).to_numpy(object)
    start = async_ev["start_ps"].to_numpy()
    return pd.DataFrame(
        {
            "device": device_of_plane[async_ev["plane"].to_numpy()],
            "program_id": by_row["program_id"].reindex(row).to_numpy(),
            "start_op": pd.Series(np.append(start_op, "")[row], dtype=object),  # no metadata: ''
            "done_op": async_ev["hlo_op"].to_numpy(),
            "kind": by_row["display_name"].reindex(row).to_numpy(),
            "start_ps": start,
            "end_ps": start + async_ev["duration_ps"].to_numpy(),
        }
    )


def _concat_events(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The hosts' op events as one table. Name columns that are categorical on every host are combined as
    codes: the same categories where every host has them, else the sorted used ones (what converting the
    concatenated strings gives)."""
    if len(frames) == 1:
        return frames[0]
    columns = {}
    for col in frames[0].columns:
        parts = [f[col] for f in frames]
        if col in _NAME_COLUMNS and all(isinstance(p.dtype, pd.CategoricalDtype) for p in parts):
            if all(p.dtype == parts[0].dtype for p in parts):  # same categories: kept (as pandas.concat does)
                columns[col] = union_categoricals([p.array for p in parts])
            else:
                columns[col] = union_categoricals([p.array for p in parts], sort_categories=True).remove_unused_categories()
        else:
            columns[col] = pd.concat(parts, ignore_index=True)
    return pd.DataFrame(columns, copy=False)


def _module_of_program(program_id: pd.Series, module_names: pd.Series) -> pd.Series:
    """Each event's module, named after its program's module executions ('' when none), as a categorical
    whose categories are the sorted names in use."""
    if not isinstance(program_id.dtype, pd.CategoricalDtype) or program_id.isna().any():
        return program_id.map(module_names).astype(object).fillna("")
    per_program = pd.Series(program_id.cat.categories).map(module_names).astype(object).fillna("").to_numpy()
    codes = program_id.cat.codes.to_numpy()
    used = np.zeros(len(per_program), bool)
    used[np.unique(codes)] = True
    names, name_codes = np.unique(per_program[used].astype(str), return_inverse=True)
    remap = np.full(len(per_program), -1, np.int64)
    remap[used] = name_codes.reshape(-1)
    return pd.Series(pd.Categorical.from_codes(remap[codes], categories=list(names)), index=program_id.index)


def _by_device_and_start(events: pd.DataFrame) -> pd.DataFrame:
    """Events ordered by (device, start), ties in their order; already ordered tables are not copied."""
    device, start = events["device"].to_numpy(np.int64), events["start_ps"].to_numpy(np.int64)
    ordered = np.all((device[1:] > device[:-1]) | ((device[1:] == device[:-1]) & (start[1:] >= start[:-1])))
    if not ordered:
        events = events.take(np.lexsort((start, device)))  # lexsort is stable
    return events.reset_index(drop=True)


def build_capture(spaces: list[XSpaceTables], *, checked: bool = False) -> Capture:
    """Combine the hosts of one run into platform-neutral tables (``checked``: the spaces already went
    through ``sanity.checked_space``, as a per-host worker does)."""
    if not spaces:
        raise CaptureError("no xplane files to read")
    warnings: list[str] = []
    if not checked:  # duplicated hosts and impossible values out, with warnings
        spaces, warnings = checked_spaces(spaces)
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
            devices, events, w = gpu_tables(space, device_base)
            warnings.extend(w)
        else:
            devices, events = cpu_tables(space, device_base)
        all_devices.append(devices)
        all_events.append(events)
        # A host's annotations hold the steps of every device it drives.
        annotations = step_annotations(space)
        all_annotations.append(annotations.merge(devices[["device"]], how="cross")[["device", *ANNOTATION_COLUMNS]])
        device_base += len(devices)

    devices = pd.concat(all_devices, ignore_index=True)
    events = _concat_events(all_events)
    if events.empty:
        hosts = ", ".join(str(s.path) for s in spaces)
        raise CaptureError(f"{hosts}: no HLO op events found in this capture (was the program running while tracing?)")

    if platform == "tpu":
        modules = pd.concat(all_modules, ignore_index=True)
        op_metadata = pd.concat(all_meta, ignore_index=True).drop_duplicates(["program_id", "op_name"])
        # Name each op's program after its module execution events.
        module_names = modules.dropna(subset=["program_id"]).drop_duplicates("program_id").set_index("program_id")["module"]
        events["module"] = _module_of_program(events["program_id"], module_names)
        async_spans = pd.concat(all_async, ignore_index=True)
        steps_line = pd.concat(all_steps, ignore_index=True)
    else:
        modules = derived_module_runs(events)
        op_metadata = empty_table(METADATA_COLUMNS)
        async_spans = empty_table(ASYNC_COLUMNS)
        steps_line = empty_table(["device", "start_ps", "duration_ps"])
        if "run_id" not in events or events["run_id"].isna().any():
            warnings.append(
                f"{platform.upper()} capture: program executions were inferred from op order "
                "(no 'XLA Modules' line); each repeat of a program's first op starts a new run"
            )

    events = _by_device_and_start(events[EVENTS.names])
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

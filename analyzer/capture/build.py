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

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ...errors import InputError
from ...parsers.xplane import XSpaceTables
from ..tables import EVENTS
from .derived_runs import derived_module_runs
from .gpu_cpu_ops import cpu_tables, gpu_tables
from .host_steps import ANNOTATION_COLUMNS, step_annotations, tf_step_markers
from .planes import GPU_PLANE, TPU_PLANE, empty_table
from .sanity import checked_spaces
from .tpu_ops import ASYNC_COLUMNS, METADATA_COLUMNS, tpu_tables

_NAME_COLUMNS = ("module", "program_id", "op_name", "line")


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
    # What marked the annotated steps ('' : the user's StepTraceAnnotation; else TensorFlow's host markers).
    step_marker: str = ""


def _platform_of(space: XSpaceTables) -> str:
    names = space.planes["name"]
    if names.str.match(TPU_PLANE).any():
        return "tpu"
    if names.str.match(GPU_PLANE).any():
        return "gpu"
    return "cpu"


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
                merged = union_categoricals([p.array for p in parts], sort_categories=True)
                columns[col] = merged.remove_unused_categories()
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
    used = np.bincount(codes, minlength=len(per_program)) > 0  # codes >= 0: no program id is missing
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
    hosts = _HostTables.read(spaces, platform, warnings)
    events = _concat_events(hosts.events)
    if events.empty:
        names = ", ".join(str(s.path) for s in spaces)
        raise CaptureError(f"{names}: no HLO op events found in this capture (was the program running while tracing?)")
    if platform == "tpu":
        modules, op_metadata, async_spans, steps_line = hosts.program_tables()
        # Name each op's program after its module execution events.
        with_program = modules.dropna(subset=["program_id"]).drop_duplicates("program_id")
        module_names = with_program.set_index("program_id")["module"]
        events["module"] = _module_of_program(events["program_id"], module_names)
    else:
        modules, op_metadata, async_spans, steps_line = _derived_program_tables(events, platform, warnings)
        if hosts.op_metadata:  # GPU: each op's kernels
            op_metadata = pd.concat(hosts.op_metadata, ignore_index=True).drop_duplicates(["program_id", "op_name"])
    annotations, marker = pd.concat(hosts.annotations, ignore_index=True), ""
    if platform != "tpu" and annotations.empty and modules.empty:  # no XLA program: TensorFlow's own markers
        annotations, marker = _tf_markers(spaces, hosts.devices)
    return Capture(
        platform=platform,
        hosts=tuple(s.hostname for s in spaces),
        devices=pd.concat(hosts.devices, ignore_index=True),
        events=_final_events(events, platform == "tpu"),
        modules=modules.reset_index(drop=True),
        op_metadata=op_metadata.reset_index(drop=True),
        async_spans=async_spans.reset_index(drop=True),
        steps_line=steps_line.reset_index(drop=True),
        warnings=tuple(warnings),
        step_annotations=annotations, step_marker=marker,
    )


def _tf_markers(spaces: list[XSpaceTables], devices: list[pd.DataFrame]) -> tuple[pd.DataFrame, str]:
    """Each host's TensorFlow step markers for every device it drives (host_steps.tf_step_markers)."""
    frames, kinds = [], []
    for space, host_devices in zip(spaces, devices):
        steps, kind = tf_step_markers(space)
        frames.append(steps.merge(host_devices[["device"]], how="cross")[["device", *ANNOTATION_COLUMNS]])
        kinds += [kind] if kind else []
    return pd.concat(frames, ignore_index=True), (kinds[0] if kinds else "")


@dataclass
class _HostTables:
    """Each host's tables, devices numbered on from the previous hosts' (TPU-only lists stay empty elsewhere)."""

    devices: list = field(default_factory=list)
    events: list = field(default_factory=list)
    annotations: list = field(default_factory=list)
    modules: list = field(default_factory=list)
    op_metadata: list = field(default_factory=list)
    async_spans: list = field(default_factory=list)
    steps_line: list = field(default_factory=list)

    @classmethod
    def read(cls, spaces: list[XSpaceTables], platform: str, warnings: list[str]) -> _HostTables:
        out = cls()
        device_base = 0
        for space in spaces:
            if platform == "tpu":
                devices, events, modules, meta, async_spans, steps = tpu_tables(space, device_base)
                out.modules.append(modules)
                out.op_metadata.append(meta)
                out.async_spans.append(async_spans)
                out.steps_line.append(steps)
            elif platform == "gpu":
                devices, events, kernels, w = gpu_tables(space, device_base)
                out.op_metadata.append(kernels)
                warnings.extend(w)
            else:
                devices, events = cpu_tables(space, device_base)
            out.devices.append(devices)
            out.events.append(events)
            # A host's annotations hold the steps of every device it drives.
            annotations = step_annotations(space)
            out.annotations.append(annotations.merge(devices[["device"]], how="cross")[["device", *ANNOTATION_COLUMNS]])
            device_base += len(devices)
        return out

    def program_tables(self) -> tuple:
        """TPU: (modules, op_metadata, async_spans, steps_line) of all hosts."""
        return (pd.concat(self.modules, ignore_index=True),
                pd.concat(self.op_metadata, ignore_index=True).drop_duplicates(["program_id", "op_name"]),
                pd.concat(self.async_spans, ignore_index=True),
                pd.concat(self.steps_line, ignore_index=True))


def _derived_program_tables(events: pd.DataFrame, platform: str, warnings: list[str]) -> tuple:
    """GPU/CPU: program executions derived from the op events; no trace metadata, async spans or steps line."""
    if "run_id" not in events or events["run_id"].isna().any():
        warnings.append(
            f"{platform.upper()} capture: program executions were inferred from op order "
            "(no 'XLA Modules' line); each repeat of a program's first op starts a new run"
        )
    return (derived_module_runs(events), empty_table(METADATA_COLUMNS), empty_table(ASYNC_COLUMNS),
            empty_table(["device", "start_ps", "duration_ps"]))


def _final_events(events: pd.DataFrame, tpu: bool) -> pd.DataFrame:
    """The EVENTS columns, by device and start, names as categoricals (on GPU and CPU: sorted, missing as '')."""
    events = _by_device_and_start(events[EVENTS.names])
    # Few distinct names over millions of events: categoricals make every later groupby cheap.
    for col in ("module", "program_id", "op_name", "line"):
        if not tpu or not isinstance(events[col].dtype, pd.CategoricalDtype):
            events[col] = _blank_categorical(events[col])
    return EVENTS.coerce(events)


def _blank_categorical(values: pd.Series) -> pd.Series:
    """``values`` (text or a categorical of text) as a categorical, missing ones as '' and the categories
    sorted, unused ones dropped: what ``astype(object).where(notna, "").astype("category")`` gives, from one
    factorize of the values (no per-event object copy)."""
    codes, uniques = pd.factorize(values)
    names = list(uniques)
    if not all(isinstance(n, str) for n in names):  # not all text: pandas' own conversion and ordering
        return values.astype(object).where(values.notna(), "").astype("category")
    if (codes < 0).any():
        if "" not in names:
            names.append("")
        codes = np.where(codes < 0, names.index(""), codes)
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), np.int64)
    rank[order] = np.arange(len(names))
    categories = [names[i] for i in order]
    return pd.Series(pd.Categorical.from_codes(rank[codes] if len(names) else codes, categories=categories),
                     index=values.index)

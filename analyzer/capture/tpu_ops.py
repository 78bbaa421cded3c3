"""Op events and program executions of TPU captures: one ``/device:TPU:N`` plane per chip, its ``XLA Ops``
line holding the op events (op identity in the event metadata), ``XLA Modules`` the program executions,
``Async XLA Ops`` the start->done spans of asynchronous ops and, on some captures, a ``Steps`` line.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...parsers.xplane import XSpaceTables
from .event_runs import select_lines
from .host_steps import tpu_launch_ps
from .planes import (
    TPU_PLANE,
    device_planes,
    device_table,
    empty_table,
    events_with_stats,
    line_events,
    line_ids,
    metadata_rows,
    scaled_peak,
)

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
    "kernels",  # GPU: the kernels an op launched (gpu_cpu_ops.kernel_metadata)
]


ASYNC_COLUMNS = ["device", "program_id", "start_op", "done_op", "kind", "start_ps", "end_ps"]


def _op_name_from_text(name: pd.Series) -> pd.Series:
    """``%copy-done.2 = f32[...] copy-done(...)`` -> ``copy-done.2`` (fallback when no display name)."""
    extracted = name.str.extract(r"^%?([^\s=]+)\s*=", expand=False)
    return extracted.fillna(name)


def _op_names(meta: pd.DataFrame) -> pd.Series:
    """An op's name: the metadata display name, else parsed from its HLO text."""
    display = meta["display_name"].fillna("")
    missing = display == ""
    if not missing.any():
        return display
    # The HLO text is read only where no display name is given (a regex per op text).
    return display.where(~missing, _op_name_from_text(meta["name"][missing].fillna("")))


def _split_module_names(names: pd.Series) -> tuple[pd.Series, pd.Series]:
    parts = names.str.extract(_MODULE_EVENT)
    module = parts["module"].fillna(names)
    return module, parts["program_id"]


def tpu_tables(space: XSpaceTables, device_base: int):
    """(devices, events, modules, op_metadata, async_spans, steps_line) of one host's TPU capture."""
    planes, plane_to_device = device_planes(space, TPU_PLANE, device_base)
    meta = space.event_metadata[space.event_metadata["plane"].isin(planes["plane"])]
    device_of_plane = np.full(len(space.planes), -1, np.int64)
    device_of_plane[planes["plane"].to_numpy(np.int64)] = planes["device"].to_numpy(np.int64)

    events = _op_events(space, planes, meta, device_of_plane)
    modules = _module_runs(space, planes, meta, plane_to_device)
    async_spans = _async_spans(space, planes, meta, device_of_plane)
    events["launch_ps"] = tpu_launch_ps(space, events, modules, dict(zip(planes["device"], planes["local_index"])))
    return (_devices(space, planes), events, modules, _op_metadata(meta), async_spans,
            _steps_line(space, planes, device_of_plane))


def _op_events(space: XSpaceTables, planes: pd.DataFrame, meta: pd.DataFrame, device_of_plane: np.ndarray):
    """The ``XLA Ops`` events of the device planes, program and op name as categoricals."""
    ev = space.events
    runs = select_lines(space, line_ids(space, planes["plane"], "XLA Ops"))
    # Name and program are properties of the metadata: resolve them once per op, then give each
    # event its op's category codes (no string handling per event).
    name_codes, name_values = pd.factorize(_op_names(meta).to_numpy())
    program_codes, program_values = pd.factorize(meta["program_id"].fillna("").to_numpy())
    # Events whose metadata is missing (row -1: the last code) stay, as one visible '<unknown op>'.
    row = runs.metadata_rows(meta, ev["metadata_id"].to_numpy())
    names = [*name_values, "<unknown op>"]
    name_codes = _codes_for(np.append(name_codes, len(name_values)), names)
    empty_code = list(program_values).index("") if "" in program_values else len(program_values)
    programs = [*program_values, *([] if "" in program_values else [""])]
    program_codes = _codes_for(np.append(program_codes, empty_code), programs)
    return pd.DataFrame(
        {
            "device": runs.by_plane(device_of_plane),
            "program_id": pd.Categorical.from_codes(program_codes[row], categories=programs),
            "op_name": pd.Categorical.from_codes(name_codes[row], categories=names),
            "start_ps": runs.take(ev["start_ps"].to_numpy()),
            "duration_ps": runs.take(ev["duration_ps"].to_numpy()),
            "span_ps": runs.take(ev["span_ps"].to_numpy()),
            "line": pd.Categorical.from_codes(np.zeros(len(row), np.int8), categories=["XLA Ops"]),
        },
        copy=False,
    )


def _codes_for(codes: np.ndarray, categories: list) -> np.ndarray:
    """Codes in the integer type a categorical of these categories keeps (gathered per event: no recast)."""
    return codes.astype(pd.Categorical.from_codes([], categories=categories).codes.dtype)


def _module_runs(space: XSpaceTables, planes: pd.DataFrame, meta: pd.DataFrame, plane_to_device) -> pd.DataFrame:
    """One row per program execution: the ``XLA Modules`` events, named ``module(program_id)``."""
    mod_ev = events_with_stats(space, planes["plane"], "XLA Modules", ["run_id"])
    mod_ev = mod_ev.merge(meta[["plane", "metadata_id", "name"]], on=["plane", "metadata_id"], how="left")
    module, program_id = _split_module_names(mod_ev["name"].fillna("").astype(str))
    return pd.DataFrame(
        {
            "device": mod_ev["plane"].map(plane_to_device),
            "module": module,
            "program_id": program_id,
            "run_id": mod_ev["run_id"],
            "start_ps": mod_ev["start_ps"],
            "duration_ps": mod_ev["duration_ps"],
        }
    )


def _steps_line(space: XSpaceTables, planes: pd.DataFrame, device_of_plane: np.ndarray) -> pd.DataFrame:
    ev = space.events
    steps_ev = line_events(space, planes["plane"], "Steps")
    return pd.DataFrame(
        {
            "device": device_of_plane[ev["plane"].to_numpy()[steps_ev]],
            "start_ps": ev["start_ps"].to_numpy()[steps_ev],
            "duration_ps": ev["duration_ps"].to_numpy()[steps_ev],
        }
    )


def _op_metadata(meta: pd.DataFrame) -> pd.DataFrame:
    """What the trace says about each op (METADATA_COLUMNS), once per (program, op)."""
    md = meta.copy()
    md["op_name"] = _op_names(md)
    md = md.rename(columns={"name": "hlo_text", "hlo_category": "category"})
    # Ops appear once per device plane with identical metadata: keep one row per op.
    md = md[md["hlo_text"].str.startswith("%", na=False) | md["category"].notna()].assign(kernels=None)
    return md.drop_duplicates(["program_id", "op_name"])[METADATA_COLUMNS]


def _devices(space: XSpaceTables, planes: pd.DataFrame) -> pd.DataFrame:
    return device_table(
        space, planes,
        device_type=lambda st: st.get("device_type_string"),
        vendor=lambda st: "Google",
        peak_flops_per_s=lambda st: scaled_peak(st.get("peak_teraflops_per_second"), 1e12, "peak_bf16_flops_per_s"),
        hbm_bytes_per_s=lambda st: scaled_peak(st.get("peak_hbm_bw_gigabytes_per_second"), 1e9, "hbm_bytes_per_s"),
        core_count=lambda st: np.nan,
    )


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

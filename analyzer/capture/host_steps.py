"""What the host threads say about steps: the user's step annotations, and when each device op was launched.

``jax.profiler.StepTraceAnnotation(name, step_num=i)`` leaves one event per step on the ``/host:CPU`` plane,
on the line of the thread that ran the step, with a ``step_num`` stat. Its span holds everything the host
did for the step, data loading included, which is why it, not the device's busy time, is the step.

JAX dispatches asynchronously: a program launched inside step i's span may run on the device after that
span ends. So device work belongs to the step whose span *launched* it. What links a device op to its
launch differs by platform (shared reference ``xplane.md``):

- CPU: op events carry the execution's ``run_id``; the host ``...LoadedExecutable::Execute`` event on the
  Python thread carries the same ``run_id`` and is the first host event that does.
- TPU: each ``XLA Modules`` execution carries a ``run_id`` counted per device; the host enqueues it in
  ``DoEnqueueProgram`` with that ``run_id`` and the ``device_ordinal``. An op belongs to the module
  execution whose window holds it.
- GPU: a kernel and the host call that launched it share a ``correlation_id``.

A launch time of -1 means the capture does not say; those ops are placed by their own start time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...parsers.xplane import XSpaceTables
from .intervals import locate

NO_LAUNCH = -1
ANNOTATION_COLUMNS = ["name", "step_num", "start_ps", "end_ps"]


def _host_events(space: XSpaceTables, stats: list[str]) -> pd.DataFrame:
    """Events of the ``/host:*`` planes (not metadata) that carry one of ``stats``, with those stats."""
    host_planes = space.planes.loc[space.planes["name"].str.startswith("/host:")
                                   & (space.planes["name"] != "/host:metadata"), "plane"]
    es = space.event_stats
    present = [s for s in stats if s in es.columns]
    if not present or es.empty:
        return pd.DataFrame(columns=["plane", "line", "metadata_id", "start_ps", "span_ps", *stats])
    es = es[es[present].notna().any(axis=1)]
    ev = space.events.iloc[es["event"].to_numpy()]
    # .array keeps Int64 ids exact: to_numpy() would give floats, which round ids past 2**53.
    ev = ev.assign(**{s: (es[s].array if s in es.columns else pd.NA) for s in stats})
    return ev[ev["plane"].isin(host_planes)]


def step_annotations(space: XSpaceTables) -> pd.DataFrame:
    """One row per annotated step of this host: ``name``, ``step_num``, ``start_ps``, ``end_ps``.

    Only the most used annotation name counts (a script may annotate other things with a step_num);
    a step annotated twice (two threads) spans both."""
    ev = _host_events(space, ["step_num"])
    if ev.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c != "name" else "object") for c in ANNOTATION_COLUMNS})
    meta = space.event_metadata.set_index(["plane", "metadata_id"])["name"]
    names = meta.reindex(pd.MultiIndex.from_arrays([ev["plane"], ev["metadata_id"]])).fillna("").to_numpy()
    ev = ev.assign(name=names, end_ps=ev["start_ps"] + ev["span_ps"], step_num=ev["step_num"].astype("int64"))
    chosen = ev["name"].value_counts().index[0]
    ev = ev[ev["name"] == chosen]
    steps = ev.groupby("step_num", as_index=False).agg(start_ps=("start_ps", "min"), end_ps=("end_ps", "max"))
    steps.insert(0, "name", chosen)
    return steps[ANNOTATION_COLUMNS].sort_values("start_ps", kind="stable").reset_index(drop=True)


def cpu_launch_ps(space: XSpaceTables, run_id: pd.Series) -> np.ndarray:
    """Per CPU op event (its ``run_id``): the start of the first host event of that execution."""
    ev = _host_events(space, ["run_id"]).dropna(subset=["run_id"])
    first = ev.groupby(ev["run_id"].astype("int64"))["start_ps"].min()
    out = pd.Series(run_id.array).astype("Int64").map(first)
    return out.fillna(NO_LAUNCH).to_numpy(np.int64)


def tpu_launch_ps(space: XSpaceTables, events: pd.DataFrame, modules: pd.DataFrame,
                  device_ordinal: dict) -> np.ndarray:
    """Per TPU op event: when the host enqueued the module execution whose window holds it.

    ``device_ordinal`` maps the global device number to the plane's local index (the host's ordinal)."""
    host = _host_events(space, ["run_id", "device_ordinal"]).dropna(subset=["run_id", "device_ordinal"])
    if host.empty or modules.empty or events.empty:
        return np.full(len(events), NO_LAUNCH, np.int64)
    enqueued = host.groupby([host["device_ordinal"].astype("int64"), host["run_id"].astype("int64")])["start_ps"].min()
    mods = modules.dropna(subset=["run_id"])
    ordinal = mods["device"].map(device_ordinal).astype("int64")
    key = pd.MultiIndex.from_arrays([ordinal, mods["run_id"].astype("int64")])
    mod_launch = pd.Series(enqueued.reindex(key).to_numpy()).fillna(NO_LAUNCH).to_numpy(np.int64)
    start = mods["start_ps"].to_numpy(np.int64)
    row = locate(events["start_ps"], events["device"], start, start + mods["duration_ps"].to_numpy(np.int64),
                 mods["device"])
    return np.append(mod_launch, NO_LAUNCH)[row]  # row -1 (in no execution): the last, NO_LAUNCH


# A capture with no XLA program (TensorFlow's own ops) has no step annotation of JAX's kind: its steps are the
# host markers xprof groups steps by (tsl/profiler/utils/group_events.cc, tensorflow/core/profiler/convert/
# xplane_to_step_events.cc): root TraceMes (stat ``_r``, e.g. ``tf.profiler.experimental.Trace("train",
# _r=1)``), else explicit step markers by name (``train*`` / ``test*`` / ``TraceContext`` without a '/'), else
# the implicit roots ``FunctionRun`` / ``SessionRun`` / ``RunGraph``. Step numbers: ``step_num`` or
# ``iter_num`` where the marker carries one, else the markers' order.
ROOT_STAT = "_r"
STEP_NUMBER_STATS = ("step_num", "iter_num")
IMPLICIT_ROOTS = ("FunctionRun", "SessionRun", "RunGraph")


def _named_host_events(space: XSpaceTables) -> pd.DataFrame:
    """Every event of the ``/host:*`` planes (not metadata) with its name and the step stats it carries."""
    planes = space.planes.loc[space.planes["name"].str.startswith("/host:")
                              & (space.planes["name"] != "/host:metadata"), "plane"]
    position = np.flatnonzero(space.events["plane"].isin(planes).to_numpy())  # event_stats' "event"
    ev = space.events.iloc[position]
    meta = space.event_metadata.set_index(["plane", "metadata_id"])["name"]
    names = meta.reindex(pd.MultiIndex.from_arrays([ev["plane"], ev["metadata_id"]])).fillna("").to_numpy()
    ev = ev.assign(name=names)
    # Every EVENT_STAT_NAMES column, rows only where one is set (one event may span rows: first value each).
    by_event = space.event_stats[["event", ROOT_STAT, *STEP_NUMBER_STATS]].groupby("event").first()
    for stat in (ROOT_STAT, *STEP_NUMBER_STATS):
        ev[stat] = by_event[stat].reindex(position).to_numpy()
    return ev


def tf_step_markers(space: XSpaceTables) -> tuple[pd.DataFrame, str]:
    """(one row per step: ``name``, ``step_num``, ``start_ps``, ``end_ps``; what marked them) from the host's
    TensorFlow step markers; an empty table and '' when it has none."""
    ev = _named_host_events(space)
    name = ev["name"].astype(str)
    explicit = (name.str.match(r"^(?:train|test|TraceContext)") & ~name.str.contains("/", regex=False))
    for kind, picked in (("root TraceMe (_r)", ev[ev[ROOT_STAT].notna()]), ("step marker", ev[explicit]),
                         ("implicit root", ev[name.isin(IMPLICIT_ROOTS)])):
        if picked.empty:
            continue
        chosen = picked["name"].value_counts().index[0]
        picked = picked[picked["name"] == chosen].sort_values("start_ps", kind="stable")
        number = next((picked[s] for s in STEP_NUMBER_STATS if picked[s].notna().all()), None)
        steps = pd.DataFrame({"name": chosen,
                              "step_num": (number if number is not None else
                                           pd.Series(np.arange(len(picked)), index=picked.index)).astype("int64"),
                              "start_ps": picked["start_ps"].astype("int64"),
                              "end_ps": (picked["start_ps"] + picked["span_ps"]).astype("int64")})
        steps = steps.groupby("step_num", as_index=False).agg(name=("name", "first"), start_ps=("start_ps", "min"),
                                                              end_ps=("end_ps", "max"))
        return steps[ANNOTATION_COLUMNS].reset_index(drop=True), f"TensorFlow {kind} '{chosen}' on the host"
    return pd.DataFrame({c: pd.Series(dtype="int64" if c != "name" else "object") for c in ANNOTATION_COLUMNS}), ""

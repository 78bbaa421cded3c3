"""The reduced hosts as the main process keeps them while the others arrive: integers, no strings per host.

Every host of a run repeats the same op keys (``program_id``, ``op_name``) and trace lines; as text in each
host's tables they cost more than the numbers beside them (64 hosts x 2,000 ops x 3 tables). So each host
is coded on arrival against one :class:`KeyBook` of the main process: its per-op tables carry a ``key``
column (the book's number of the op key) instead of the two text columns, and its representative step's
events become plain arrays (key and line numbers, times). The merge reads the text back from the book once
per distinct key, and builds the run's step events column by column, each host's copy of a column dropped as
soon as it is in.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from .reduce import KEY, HostPart, key_codes

# The representative step's events kept per host, as arrays (module: from the program id, at the merge).
REP_COLUMNS = ("device", "key", "start_ps", "duration_ps", "span_ps", "line", "launch_ps", "event", "step")


class KeyBook:
    """Op keys and trace line names numbered in order of arrival (a missing name is '', as ``key_codes``)."""

    def __init__(self):
        self.keys: dict[tuple[str, str], int] = {}
        self.lines: dict[str, int] = {}

    def code(self, frame: pd.DataFrame) -> np.ndarray:
        """Per row of ``frame`` (program_id, op_name), the book's number of its key."""
        dense, keys = key_codes(frame)
        book = np.array([self.keys.setdefault(k, len(self.keys))
                         for k in zip(keys["program_id"], keys["op_name"])], np.int64)
        return book[dense] if len(dense) else np.zeros(0, np.int64)

    def line_codes(self, values: pd.Series) -> np.ndarray:
        cat = pd.Categorical(values.astype(object).where(values.notna(), "").astype(str))
        book = np.array([self.lines.setdefault(c, len(self.lines)) for c in cat.categories], np.int64)
        return book[cat.codes] if len(cat) else np.zeros(0, np.int64)

    def key_frame(self, codes: np.ndarray) -> pd.DataFrame:
        """KEY text of each code."""
        names = np.empty((len(self.keys), 2), object)
        for (pid, name), code in self.keys.items():
            names[code] = (pid, name)
        return pd.DataFrame({"program_id": names[codes, 0], "op_name": names[codes, 1]}) if len(codes) else \
            pd.DataFrame({"program_id": pd.Series(dtype=object), "op_name": pd.Series(dtype=object)})

    def line_names(self) -> np.ndarray:
        names = np.empty(len(self.lines), object)
        for line, code in self.lines.items():
            names[code] = line
        return names


def _coded(frame: pd.DataFrame | None, book: KeyBook) -> pd.DataFrame | None:
    if frame is None:
        return frame
    return frame.drop(columns=KEY).assign(key=book.code(frame))


def _rep_arrays(rep: pd.DataFrame, book: KeyBook) -> dict[str, np.ndarray]:
    out = {"key": book.code(rep), "line": book.line_codes(rep["line"]).astype(np.int32)}
    for col in REP_COLUMNS:
        if col not in out:
            out[col] = rep[col].to_numpy(np.int64)
    out["device"], out["step"] = out["device"].astype(np.int32), out["step"].astype(np.int32)
    out["key"] = out["key"].astype(np.int32)
    return out


def compact(part: HostPart, book: KeyBook) -> HostPart:
    """``part`` with its op keys and lines coded against ``book`` (a part already coded is left as it is)."""
    if part.step_ops is None or isinstance(part.rep_events, dict):
        return part
    sums = part.span_sums
    if sums is not None:
        sums = replace(sums, in_flight=_coded(sums.in_flight, book))
    return replace(part, step_ops=_coded(part.step_ops, book), other_ops=_coded(part.other_ops, book),
                   span_ops=_coded(part.span_ops, book), rep_events=_rep_arrays(part.rep_events, book),
                   span_sums=sums)


def _categorical(codes: np.ndarray, names: np.ndarray) -> pd.Categorical:
    """``names[codes]`` as a categorical with sorted categories (what ``astype('category')`` makes of the text),
    built from the codes: no string per row."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(names)))
    cats, inverse = np.unique(names[used].astype(str), return_inverse=True)
    remap = np.zeros(len(names), np.int64)
    remap[used] = inverse
    return pd.Categorical.from_codes(remap[codes], cats)


def rep_events(parts: list[HostPart], bases: list[int], event_bases: list[int], book: KeyBook,
               op_of_key: np.ndarray, module_of: pd.Series) -> pd.DataFrame:
    """The hosts' representative steps' events as one tables.STEP_EVENTS frame in (start, device, event) order;
    each host's arrays are emptied as their column is built."""
    reps = [p.rep_events for p in parts]

    def column(name: str, shift: list[int] | None = None) -> np.ndarray:
        out = np.concatenate([r.pop(name).astype(np.int64) + (shift[i] if shift else 0) for i, r in enumerate(reps)])
        return out[order] if order is not None else out

    order = None
    start, device, event = column("start_ps"), column("device", bases), column("event", event_bases)
    order = np.lexsort((event, device, start))
    frame = {"device": device[order], "start_ps": start[order]}
    del start, device
    keys = column("key")
    names = book.key_frame(np.arange(len(book.keys)))
    pid, name = names["program_id"].to_numpy(object), names["op_name"].to_numpy(object)
    frame["program_id"], frame["op_name"] = _categorical(keys, pid), _categorical(keys, name)
    modules = pd.Series(pid).map(module_of).fillna("").astype(str).to_numpy(object)
    frame["module"] = _categorical(keys, modules)
    for col in ("duration_ps", "span_ps", "launch_ps"):
        frame[col] = column(col)
    frame["line"] = _categorical(column("line"), book.line_names())
    frame["event"], frame["step"] = event[order], column("step")
    frame["op_id"] = op_of_key[keys]
    columns = ["device", "module", "program_id", "op_name", "start_ps", "duration_ps", "span_ps", "line",
               "launch_ps", "event", "step", "op_id"]
    return pd.DataFrame({c: frame.pop(c) for c in columns}, copy=False)

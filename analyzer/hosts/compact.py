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

from .heap import release_freed
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


def _signed(values: np.ndarray) -> np.ndarray:
    """Integers in the narrowest signed type that holds them (signed: hosts' columns concatenate exactly)."""
    if not len(values):
        return values
    lo, hi = int(values.min()), int(values.max())
    return values.astype(next(t for t in (np.int8, np.int16, np.int32, np.int64)
                              if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max))


def _coded(frame: pd.DataFrame | None, book: KeyBook) -> pd.DataFrame | None:
    if frame is None:
        return frame
    coded = frame.drop(columns=KEY).assign(key=book.code(frame))
    return pd.DataFrame({c: _signed(coded[c].to_numpy()) for c in coded.columns})


def _packed(values: np.ndarray) -> tuple[int, np.ndarray | None]:
    """(least value, offsets from it in the narrowest unsigned type); a constant column: (its value, None)."""
    lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    return (lo, None) if lo == hi else (lo, (values - lo).astype(np.min_scalar_type(hi - lo)))


def _rep_arrays(rep: pd.DataFrame, book: KeyBook) -> dict:
    """Each REP_COLUMNS column packed (``_packed``); a span_ps equal to duration_ps (TPU) is not kept twice."""
    values = {"key": book.code(rep), "line": book.line_codes(rep["line"])}
    out = {c: _packed(values[c] if c in values else rep[c].to_numpy(np.int64)) for c in REP_COLUMNS}
    out["n"] = len(rep)
    if np.array_equal(rep["span_ps"].to_numpy(), rep["duration_ps"].to_numpy()):
        out["span_ps"] = "duration_ps"
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
    ends = np.cumsum([r["n"] for r in reps])
    rank = None  # each host row's place in the run's order: columns are written there, no concatenated copy

    def column(name: str, shift: list[int] | None = None, dtype=np.int64) -> np.ndarray:
        out = np.empty(int(ends[-1]) if len(ends) else 0, dtype)
        for i, (r, end) in enumerate(zip(reps, ends)):
            packed = r[r.pop(name)] if isinstance(r[name], str) else r.pop(name)
            lo, offsets = packed[0] + (shift[i] if shift else 0), packed[1]
            at = slice(end - r["n"], end) if rank is None else rank[end - r["n"]:end]
            out[at] = lo if offsets is None else offsets.astype(np.int64) + lo
        return out

    # Device, step and op id as tables.STEP_EVENTS declares them (int32): half their memory, no copy to coerce.
    frame = {"start_ps": column("start_ps"), "device": column("device", bases, np.int32),
             "event": column("event", event_bases)}
    order = np.lexsort((frame["event"], frame["device"], frame["start_ps"]))
    for name in frame:  # one column reordered at a time: its old copy freed before the next is made
        frame[name] = frame[name][order]
    release_freed()  # the hosts' copies of those columns, freed, back to the system before the next are made
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    del order
    keys = column("key")
    names = book.key_frame(np.arange(len(book.keys)))
    pid, name = names["program_id"].to_numpy(object), names["op_name"].to_numpy(object)
    frame["program_id"], frame["op_name"] = _categorical(keys, pid), _categorical(keys, name)
    modules = pd.Series(pid).map(module_of).fillna("").astype(str).to_numpy(object)
    frame["module"] = _categorical(keys, modules)
    release_freed()
    same_span = all(r["span_ps"] == "duration_ps" for r in reps)  # TPU: an op's extent is its duration
    for col in ("span_ps", "duration_ps", "launch_ps"):  # span_ps first: it may read duration_ps
        frame[col] = None if col == "span_ps" and same_span else column(col)
    if same_span:  # one array for both columns (copy-on-write keeps them apart if one is ever changed)
        frame["span_ps"] = frame["duration_ps"]
    frame["line"] = _categorical(column("line"), book.line_names())
    frame["step"] = column("step", None, np.int32)
    frame["op_id"] = op_of_key.astype(np.int32)[keys]
    release_freed()
    columns = ["device", "module", "program_id", "op_name", "start_ps", "duration_ps", "span_ps", "line",
               "launch_ps", "event", "step", "op_id"]
    return pd.DataFrame({c: frame.pop(c) for c in columns}, copy=False)


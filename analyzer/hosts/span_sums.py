"""A TPU or CPU host's async transfer spans reduced to what the transfer numbers need of them, so no span row
travels to the merge (a 64-host capture has half a million spans; the numbers are sums over device-steps):

- per done op (``program_id``, ``op_name``): the in-flight time of its spans ending in a measured step (each
  span from its start to the later of its end and its done op's end, as ``transfers.transfer_spans``);
- per transfer kind: the union of those spans' time over the host's measured device-steps (device-steps
  are a host's own: the run's union is the sum over hosts);
- the devices that have such spans (the in-flight time is per device-step of those devices).

A span's transfer kind is its done op's, from the HLO the host file carries (``attach_hlo_facts``, as the
analysis finds it). Only the host's own step ops are classified: the done ops of spans that are not among them
are named (``orphans``) so the merge can tell whether another host ran them in its steps (then these sums would
miss them: the merge reads the capture the all-events way).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..capture.intervals import union_length
from ..hlo.facts import attach_hlo_facts
from .transfer_totals import _op_keys, _programs

KEY = ["program_id", "op_name"]


@dataclass(frozen=True)
class SpanSums:
    """The host's in-step async spans as sums (picoseconds)."""

    in_flight: pd.DataFrame  # KEY + in_flight_ps: per done op, its spans' in-flight time
    kind_ps: dict  # transfer kind (sorted) -> union of its spans' time over the measured device-steps
    devices: tuple = ()  # the host's devices with in-step spans
    orphans: pd.DataFrame | None = None  # KEY of done ops with spans that are not among the host's step ops


# Per process, what a done op's kind was found from (its key, its program's HLO, its trace metadata) -> the kind:
# a worker reads host after host of one run, whose done ops are the same.
_KINDS: dict[tuple, object] = {}


def _cache_keys(keys: pd.DataFrame, op_metadata, hlo) -> list[tuple]:
    programs: dict[str, bytes] = {}
    for pid, _, data in hlo.hlo_protos if hlo is not None else ():
        programs.setdefault(pid, hashlib.sha1(data).digest())
    meta = op_metadata.drop_duplicates(KEY) if op_metadata is not None and len(op_metadata) else None
    rows = keys.merge(meta, on=KEY, how="left") if meta is not None else keys
    return [(programs.get(row[1]), *map(str, row)) for row in rows.itertuples(index=False)]


def _done_kinds(step_ops: pd.DataFrame, done: pd.DataFrame, op_metadata, hlo) -> pd.DataFrame:
    """KEY + kind (transfer kind or None) of the step's ops among ``done`` (KEY), from the host's HLO."""
    keys = _op_keys(step_ops)[1]
    keys = keys.merge(done, on=KEY).drop_duplicates(KEY).reset_index(drop=True)
    if keys.empty:
        return keys.assign(kind=pd.Series(dtype=object))[[*KEY, "kind"]]
    cache = _cache_keys(keys, op_metadata, hlo)
    new = [i for i, k in enumerate(cache) if k not in _KINDS]
    if new:
        asked = keys.iloc[new]
        carried = {pid for pid, _, _ in hlo.hlo_protos} if hlo is not None else set()
        traced = asked[(asked["module"] != "") & asked["program_id"].isin(carried)]
        facts = attach_hlo_facts(asked.assign(mean_s=np.nan), op_metadata,
                                 _programs(traced, hlo) if len(traced) else {})
        if len(_KINDS) > 100_000:
            _KINDS.clear()
        for i, kind in zip(new, facts["transfer_kind"]):
            _KINDS[cache[i]] = kind if pd.notna(kind) else None
    return keys[KEY].assign(kind=[_KINDS[k] for k in cache])


def span_sums(spans: pd.DataFrame, rows: np.ndarray, n_rows: int, step_ops: pd.DataFrame, op_metadata,
              hlo) -> SpanSums:
    """The sums of ``spans`` (the host's spans ending in a measured step, with ``done_end_ps``; ``rows``: each
    one's measured device-step row of ``n_rows``)."""
    waited = spans["done_end_ps"].to_numpy(np.int64)
    start = spans["start_ps"].to_numpy(np.int64)
    end = np.maximum(spans["end_ps"].to_numpy(np.int64), np.where(waited >= 0, waited, 0))
    keyed = pd.DataFrame({"program_id": spans["program_id"].astype(object).fillna("").astype(str).to_numpy(),
                          "op_name": spans["done_op"].astype(object).fillna("").astype(str).to_numpy(),
                          "in_flight_ps": end - start})
    in_flight = keyed.groupby(KEY, sort=False)["in_flight_ps"].sum().reset_index()
    kinds = _done_kinds(step_ops, in_flight[KEY], op_metadata, hlo)
    orphans = in_flight[KEY].merge(kinds[KEY], on=KEY, how="left", indicator=True)
    orphans = orphans.loc[orphans["_merge"] == "left_only", KEY].reset_index(drop=True)
    kind = keyed[KEY].merge(kinds, on=KEY, how="left")["kind"].to_numpy(object)
    kind_ps = {}
    for k in sorted({k for k in kind if isinstance(k, str)}):
        mine = kind == k
        kind_ps[k] = int(union_length(start[mine], end[mine], rows[mine], n_rows).sum())
    devices = tuple(sorted(int(d) for d in pd.unique(spans["device"])))
    return SpanSums(in_flight, kind_ps, devices, orphans)

"""A plane's op metadata (``XPlane.event_metadata``): one row per op, with the stats XLA writes on it.

Device planes hold thousands of ops of about ten stats each: they are decoded column-wise from the plane's
bytes (``xmetadata_columns``). The ``/host:metadata`` plane (a few programs' HloProtos) and any plane whose
metadata is not laid out as exporters write it are read through upb's objects, one op at a time, here.
"""

from __future__ import annotations

import re

from . import event_stat_values
from .xmetadata_columns import hbm_bytes, metadata_columns

# Per-op metadata stats written by XLA on TPU (and some GPU) captures.
METADATA_STAT_NAMES = (
    "hlo_category",
    "program_id",
    "flops",
    "model_flops",
    "bytes_accessed",
    "raw_bytes_accessed",
    "shape_with_layout",
    "tf_op",
    "source",
    "deduplicated_name",
)
_NUMERIC_METADATA_STATS = {"flops", "model_flops", "bytes_accessed", "raw_bytes_accessed"}


_MEMORY_SPACE_HBM = 1
# Longer strings are damage (the longest real ones are HLO instruction texts of a few KB): cut, so
# that a garbage length never turns into a str many times its size.
_MAX_TEXT_BYTES = 1 << 20
# The columns of a metadata row, in order (xplane._event_metadata).
META_COLUMNS = ("plane", "metadata_id", "name", "display_name", *METADATA_STAT_NAMES, "hbm_bytes")
_BREAKDOWN_STAT = "memory_access_breakdown"


def _text(raw: bytes) -> str:
    return raw[:_MAX_TEXT_BYTES].decode("utf-8", errors="replace")


def _stat_value(stat, stat_names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "ref_value":
        return stat_names.get(value)
    if kind == "str_value":
        return _text(value)
    return value  # numbers; bytes_value stays bytes


def _stats_dict(stats, stat_names: dict[int, str]) -> dict:
    return {stat_names.get(s.metadata_id, f"#{s.metadata_id}"): _stat_value(s, stat_names) for s in stats}


def plane_stats(stats, stat_names: dict[int, str]) -> dict:
    """A plane's named stats (peaks, vendor, profile window). A stat whose id has no metadata is no
    property: one plane (``/host:__ScopeRangeCallStack__``, JAX 0.11 on GPU) holds 300k of them, a call-stack
    tree of id pairs that took 2 s to turn into a dict nobody reads."""
    return {stat_names[s.metadata_id]: _stat_value(s, stat_names) for s in stats if s.metadata_id in stat_names}


_HLO_PROTO_STAT = "Hlo Proto"
_PROGRAM_NAME = re.compile(r"^(.*)\((\d+)\)$")


def _program_entry(name: str, stats: dict) -> tuple[str, str, bytes]:
    """(program id, program name, HloProto bytes); the id from the stat, else from 'name(<id>)'."""
    m = _PROGRAM_NAME.match(name)
    program = stats.get("program_id")
    program_id = str(program % 2**64) if isinstance(program, int) else (m.group(2) if m else "")
    return program_id, m.group(1) if m else name, stats[_HLO_PROTO_STAT]


METADATA_PLANE = "/host:metadata"


def metadata_rows(plane_idx: int, plane_name: str, plane, stat_names: dict, places) -> tuple[list, list]:
    """(one row per op, in ``META_COLUMNS`` order; the programs' (id, name, HloProto bytes) on the metadata plane).

    ``places``: the plane's bytes and where its fields lie (xevent_runs.PlaneEvents)."""
    if not len(plane.event_metadata):
        return [], []
    if plane_name != METADATA_PLANE and places.metadata is not None:
        try:
            rows = metadata_columns(places.buf, places.metadata, list(plane.event_metadata), stat_names,
                                    METADATA_STAT_NAMES, _NUMERIC_METADATA_STATS)
        except ValueError:  # upb read it: a structure our walk does not (groups)
            rows = None
        if rows is not None:
            return [(plane_idx, *row) for row in zip(*rows)], []
    return _upb_rows(plane_idx, plane.event_metadata, plane_name == METADATA_PLANE, stat_names)


def _upb_rows(plane_idx: int, event_metadata, is_metadata_plane: bool, stat_names: dict) -> tuple[list, list]:
    """:func:`metadata_rows` through upb's objects, op by op."""
    rows, hlo_protos = [], []
    for md_id, md in event_metadata.items():
        stats = _stats_dict(md.stats, stat_names)
        if is_metadata_plane and isinstance(stats.get(_HLO_PROTO_STAT), bytes):
            hlo_protos.append(_program_entry(_text(md.name), stats))
            continue
        rows.append((plane_idx, md_id, _text(md.name), _text(md.display_name),
                     *(event_stat_values.metadata_value(key, stats.get(key), key in _NUMERIC_METADATA_STATS)
                       for key in METADATA_STAT_NAMES),
                     hbm_bytes(stats.get(_BREAKDOWN_STAT))))
    return rows, hlo_protos

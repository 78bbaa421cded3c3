"""Our own wire schema for the XSpace protobuf (package tensorflow.profiler).

Built at import time from a descriptor so that we need no generated code and no
third-party .proto files. Every string field is declared ``bytes``: real captures
hold names that are not valid UTF-8, and a proto3 string field would reject the
whole file. Callers decode names themselves, leniently, per field.

Field numbers follow xplane.proto (see shared reference ``xplane.md``).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from .proto_descriptors import message_classes

_PKG = "xladiag.xplane"

_T = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED

# (message, [(field name, number, type, label, message type name or None, oneof index or None)])
_MESSAGES = {
    "XSpace": [
        ("planes", 1, _T.TYPE_MESSAGE, _REP, "XPlane", None),
        ("errors", 2, _T.TYPE_BYTES, _REP, None, None),
        ("warnings", 3, _T.TYPE_BYTES, _REP, None, None),
        ("hostnames", 4, _T.TYPE_BYTES, _REP, None, None),
    ],
    "XPlane": [
        ("id", 1, _T.TYPE_INT64, _OPT, None, None),
        ("name", 2, _T.TYPE_BYTES, _OPT, None, None),
        ("lines", 3, _T.TYPE_MESSAGE, _REP, "XLine", None),
        ("event_metadata", 4, _T.TYPE_MESSAGE, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _T.TYPE_MESSAGE, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _T.TYPE_MESSAGE, _REP, "XStat", None),
    ],
    "XLine": [
        ("id", 1, _T.TYPE_INT64, _OPT, None, None),
        ("display_id", 10, _T.TYPE_INT64, _OPT, None, None),
        ("name", 2, _T.TYPE_BYTES, _OPT, None, None),
        ("display_name", 11, _T.TYPE_BYTES, _OPT, None, None),
        ("timestamp_ns", 3, _T.TYPE_INT64, _OPT, None, None),
        ("duration_ps", 9, _T.TYPE_INT64, _OPT, None, None),
        ("events", 4, _T.TYPE_MESSAGE, _REP, "XEvent", None),
    ],
    "XEvent": [
        ("metadata_id", 1, _T.TYPE_INT64, _OPT, None, None),
        ("offset_ps", 2, _T.TYPE_INT64, _OPT, None, 0),
        ("num_occurrences", 5, _T.TYPE_INT64, _OPT, None, 0),
        ("duration_ps", 3, _T.TYPE_INT64, _OPT, None, None),
        ("stats", 4, _T.TYPE_MESSAGE, _REP, "XStat", None),
    ],
    "XStat": [
        ("metadata_id", 1, _T.TYPE_INT64, _OPT, None, None),
        ("double_value", 2, _T.TYPE_DOUBLE, _OPT, None, 0),
        ("uint64_value", 3, _T.TYPE_UINT64, _OPT, None, 0),
        ("int64_value", 4, _T.TYPE_INT64, _OPT, None, 0),
        ("str_value", 5, _T.TYPE_BYTES, _OPT, None, 0),
        ("bytes_value", 6, _T.TYPE_BYTES, _OPT, None, 0),
        ("ref_value", 7, _T.TYPE_UINT64, _OPT, None, 0),
    ],
    "XEventMetadata": [
        ("id", 1, _T.TYPE_INT64, _OPT, None, None),
        ("name", 2, _T.TYPE_BYTES, _OPT, None, None),
        ("display_name", 4, _T.TYPE_BYTES, _OPT, None, None),
        ("metadata", 3, _T.TYPE_BYTES, _OPT, None, None),
        ("stats", 5, _T.TYPE_MESSAGE, _REP, "XStat", None),
        ("child_id", 6, _T.TYPE_INT64, _REP, None, None),
    ],
    # The bytes of the TPU `memory_access_breakdown` metadata stat (xprof's MemoryAccessBreakdown).
    "MemoryAccessBreakdown": [
        ("memory_accessed", 1, _T.TYPE_MESSAGE, _REP, "MemoryAccess", None),
    ],
    "MemoryAccess": [
        ("operation_type", 1, _T.TYPE_INT32, _OPT, None, None),  # 1 read, 2 write
        ("memory_space", 2, _T.TYPE_INT64, _OPT, None, None),  # 1 HBM
        ("bytes", 3, _T.TYPE_INT64, _OPT, None, None),
    ],
    "XStatMetadata": [
        ("id", 1, _T.TYPE_INT64, _OPT, None, None),
        ("name", 2, _T.TYPE_BYTES, _OPT, None, None),
        ("description", 3, _T.TYPE_BYTES, _OPT, None, None),
    ],
}

_ONEOFS = {"XEvent": ["data"], "XStat": ["value"]}

# map<int64, V> is wire-identical to a repeated nested entry message {key=1, value=2}.
_MAP_ENTRIES = {
    "XPlane": [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")],
}


# Public for parsers that derive a variant of this schema (xevent_columns: events kept as raw bytes).
PACKAGE, MESSAGES, ONEOFS, MAP_ENTRIES = _PKG, _MESSAGES, _ONEOFS, _MAP_ENTRIES
_CLASSES = message_classes(_PKG, _MESSAGES, _ONEOFS, _MAP_ENTRIES)


def _cls(name: str):
    return _CLASSES[name]


XSpace = _cls("XSpace")
XPlane = _cls("XPlane")
XLine = _cls("XLine")
XEvent = _cls("XEvent")
XStat = _cls("XStat")
XEventMetadata = _cls("XEventMetadata")
XStatMetadata = _cls("XStatMetadata")
MemoryAccessBreakdown = _cls("MemoryAccessBreakdown")

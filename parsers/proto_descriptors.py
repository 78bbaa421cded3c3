"""Protobuf message classes from a field table, with no generated code and no third-party .proto files.

Both captures (XSpace) and the HLO they carry (xla.HloProto) are read with schemas we declare ourselves:
only the fields we read, strings as bytes (decoded leniently by the caller), proto2 semantics so unknown
fields and enum values never reject a file.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

FIELD = descriptor_pb2.FieldDescriptorProto
OPTIONAL, REPEATED = FIELD.LABEL_OPTIONAL, FIELD.LABEL_REPEATED


def message_classes(package: str, messages: dict, oneofs: dict | None = None,
                    map_entries: dict | None = None) -> dict:
    """{message name: class}. ``messages``: name -> [(field, number, type, label, message type or None,
    oneof index or None)]. ``map_entries``: name -> [(entry name, value message)] for ``map<int64, V>``
    fields, which are wire-identical to a repeated nested entry message {key=1, value=2}."""
    f = descriptor_pb2.FileDescriptorProto(name=f"{package.replace('.', '_')}.proto", package=package,
                                           syntax="proto2")
    for msg_name, fields in messages.items():
        m = f.message_type.add(name=msg_name)
        for oneof in (oneofs or {}).get(msg_name, []):
            m.oneof_decl.add(name=oneof)
        for entry_name, value_type in (map_entries or {}).get(msg_name, []):
            e = m.nested_type.add(name=entry_name)
            e.options.map_entry = True
            e.field.add(name="key", number=1, type=FIELD.TYPE_INT64, label=OPTIONAL)
            e.field.add(name="value", number=2, type=FIELD.TYPE_MESSAGE, label=OPTIONAL,
                        type_name=f".{package}.{value_type}")
        for name, number, ftype, label, type_name, oneof in fields:
            fd = m.field.add(name=name, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = f".{package}.{type_name}"
            if oneof is not None:
                fd.oneof_index = oneof
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in messages}

"""Our own wire schema for ``xla.HloProto`` (xla/service/hlo.proto, xla/xla_data.proto).

No package ships an ``hlo_pb2``, so, as for XSpace, the messages are built from a descriptor at import
time. Only the fields the analysis reads are declared; protobuf keeps the rest as unknown fields.
Strings are ``bytes`` (decoded leniently by the caller); enums are plain ints (an unknown value must not
reject a module). Field numbers are XLA's.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from .proto_descriptors import message_classes

_PKG = "xladiag.hlo"
_T = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED
I64, I32, BOOL, BYTES, MSG = _T.TYPE_INT64, _T.TYPE_INT32, _T.TYPE_BOOL, _T.TYPE_BYTES, _T.TYPE_MESSAGE

# message -> [(field, number, type, repeated, message type)]
_MESSAGES: dict[str, list[tuple]] = {
    "HloProto": [("hlo_module", 1, MSG, False, "HloModuleProto")],
    "HloModuleProto": [
        ("name", 1, BYTES, False, None),
        ("entry_computation_name", 2, BYTES, False, None),
        ("computations", 3, MSG, True, "HloComputationProto"),
        ("id", 5, I64, False, None),
        ("entry_computation_id", 6, I64, False, None),
        ("schedule", 7, MSG, False, "HloScheduleProto"),
        ("stack_frame_index", 17, MSG, False, "StackFrameIndexProto"),
    ],
    "StackFrameIndexProto": [
        ("file_names", 1, BYTES, True, None),
        ("function_names", 2, BYTES, True, None),
        ("file_locations", 3, MSG, True, "FileLocation"),
        ("stack_frames", 4, MSG, True, "StackFrame"),
    ],
    "FileLocation": [
        ("file_name_id", 1, I32, False, None),
        ("function_name_id", 2, I32, False, None),
        ("line", 3, I32, False, None),
    ],
    "StackFrame": [("file_location_id", 1, I32, False, None), ("parent_frame_id", 2, I32, False, None)],
    "HloScheduleProto": [("sequences", 1, MSG, True, "HloScheduleProto.SequencesEntry")],
    "InstructionSequence": [("instruction_ids", 1, I64, True, None)],
    "HloComputationProto": [
        ("name", 1, BYTES, False, None),
        ("instructions", 2, MSG, True, "HloInstructionProto"),
        ("id", 5, I64, False, None),
        ("root_id", 6, I64, False, None),
        ("execution_thread", 8, BYTES, False, None),
    ],
    "HloInstructionProto": [
        ("name", 1, BYTES, False, None),
        ("opcode", 2, BYTES, False, None),
        ("shape", 3, MSG, False, "ShapeProto"),
        ("metadata", 7, MSG, False, "OpMetadata"),
        ("parameter_number", 9, I64, False, None),
        ("fusion_kind", 11, BYTES, False, None),
        ("tuple_index", 13, I64, False, None),
        ("dimensions", 14, I64, True, None),
        ("window", 15, MSG, False, "Window"),
        ("convolution_dimension_numbers", 16, MSG, False, "ConvolutionDimensionNumbers"),
        ("channel_id", 26, I64, False, None),
        ("custom_call_target", 28, BYTES, False, None),
        ("dot_dimension_numbers", 30, MSG, False, "DotDimensionNumbers"),
        ("id", 35, I64, False, None),
        ("operand_ids", 36, I64, True, None),
        ("called_computation_ids", 38, I64, True, None),
        ("backend_config", 43, BYTES, False, None),
        ("is_host_transfer", 47, BOOL, False, None),
        ("replica_groups", 49, MSG, True, "ReplicaGroup"),
        ("feature_group_count", 50, I64, False, None),
        ("source_target_pairs", 52, MSG, True, "SourceTarget"),
        ("batch_group_count", 58, I64, False, None),
        ("use_global_device_ids", 71, BOOL, False, None),
        ("async_execution_thread", 79, BYTES, False, None),
        ("collective_device_list", 87, MSG, False, "CollectiveDeviceListProto"),
    ],
    "ShapeProto": [
        ("element_type", 2, I32, False, None),
        ("dimensions", 3, I64, True, None),
        ("tuple_shapes", 4, MSG, True, "ShapeProto"),
        ("layout", 5, MSG, False, "LayoutProto"),
        ("is_dynamic_dimension", 6, BOOL, True, None),
    ],
    "LayoutProto": [
        ("minor_to_major", 1, I64, True, None),
        ("tiles", 6, MSG, True, "TileProto"),
        ("element_size_in_bits", 7, I64, False, None),
        ("memory_space", 8, I64, False, None),
    ],
    "TileProto": [("dimensions", 1, I64, True, None)],
    "OpMetadata": [
        ("op_type", 1, BYTES, False, None),
        ("op_name", 2, BYTES, False, None),
        ("source_file", 3, BYTES, False, None),
        ("source_line", 4, I32, False, None),
        ("stack_frame_id", 15, I32, False, None),
    ],
    "Window": [("dimensions", 1, MSG, True, "WindowDimension")],
    "WindowDimension": [
        ("size", 1, I64, False, None),
        ("stride", 2, I64, False, None),
        ("padding_low", 3, I64, False, None),
        ("padding_high", 4, I64, False, None),
        ("window_dilation", 5, I64, False, None),
        ("base_dilation", 6, I64, False, None),
        ("window_reversal", 7, BOOL, False, None),
    ],
    "ConvolutionDimensionNumbers": [
        ("kernel_input_feature_dimension", 3, I64, False, None),
        ("kernel_output_feature_dimension", 4, I64, False, None),
        ("kernel_spatial_dimensions", 6, I64, True, None),
        ("input_batch_dimension", 7, I64, False, None),
        ("input_feature_dimension", 8, I64, False, None),
        ("output_batch_dimension", 9, I64, False, None),
        ("output_feature_dimension", 10, I64, False, None),
        ("input_spatial_dimensions", 11, I64, True, None),
        ("output_spatial_dimensions", 12, I64, True, None),
    ],
    "DotDimensionNumbers": [
        ("lhs_contracting_dimensions", 1, I64, True, None),
        ("rhs_contracting_dimensions", 2, I64, True, None),
        ("lhs_batch_dimensions", 3, I64, True, None),
        ("rhs_batch_dimensions", 4, I64, True, None),
    ],
    "ReplicaGroup": [("replica_ids", 1, I64, True, None)],
    "SourceTarget": [("source", 1, I64, False, None), ("target", 2, I64, False, None)],
    "IotaReplicaGroupListProto": [
        ("num_replica_groups", 1, I64, False, None),
        ("num_devices_per_group", 2, I64, False, None),
        ("iota_reshape_dims", 3, I64, True, None),
        ("iota_transpose_perm", 4, I32, True, None),
    ],
    "CollectiveDeviceListProto": [
        ("replica_groups", 1, MSG, True, "ReplicaGroup"),
        ("iota_replica_group_list", 2, MSG, False, "IotaReplicaGroupListProto"),
    ],
}

# map<int64, InstructionSequence> is wire-identical to a repeated entry message {key=1, value=2}.
_MAP_ENTRIES = {"HloScheduleProto": [("SequencesEntry", "InstructionSequence")]}

_CLASSES = message_classes(
    _PKG,
    {msg: [(name, number, ftype, _REP if repeated else _OPT, type_name, None)
           for name, number, ftype, repeated, type_name in fields] for msg, fields in _MESSAGES.items()},
    map_entries=_MAP_ENTRIES,
)
HloProto = _CLASSES["HloProto"]
HloModuleProto = _CLASSES["HloModuleProto"]

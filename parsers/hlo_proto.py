"""HLO modules carried as ``xla.HloProto`` bytes: the `/host:metadata` plane of every capture (stat
``Hlo Proto``) and ``<module>(<id>).hlo_proto.pb`` files.

The proto is printed as HLO text in the form XLA's own printer uses (shapes with layouts, operand
shapes, the attributes the cost model reads), and read as the one text parser reads it, so a capture
without a dump gets exactly the FLOPs, bytes and categories a dump would give. The parsed module is built
from the printed pieces where they are plain (:mod:`.hlo_proto_build`, several times faster than reading
the text back), else by parsing the text. Instruction order follows the
module's schedule where it has one (the text of a scheduled module lists ENTRY in execution order).
"""

from __future__ import annotations

import json

from google.protobuf.message import DecodeError

from .hlo_proto_build import PrintedInstruction, PrintedModule, build_module
from .hlo_proto_schema import HloProto
from .hlo_text import HloModule, HloParseError, parse_hlo_module
from .input_files import read_input_bytes
from .storage import as_path

# xla.PrimitiveType numbers -> the names HLO text uses (xla/xla_data.proto).
_DTYPES = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64",
    10: "f16", 11: "f32", 12: "f64", 15: "c64", 16: "bf16", 18: "c128", 19: "f8e5m2",
    20: "f8e4m3fn", 21: "s4", 22: "u4", 23: "f8e4m3b11fnuz", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz",
    26: "s2", 27: "u2", 28: "f8e4m3", 29: "f8e3m4", 30: "s1", 31: "u1", 32: "f4e2m1fn", 33: "f8e8m0fnu",
}
_TUPLE, _OPAQUE, _TOKEN = 13, 14, 17
_MAX_PROTO_BYTES = 2**31  # protobuf's own hard limit for one message


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _quoted(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _ints(values) -> str:
    return ",".join(str(int(v)) for v in values)


def shape_text(shape) -> str:
    """``f32[8,128]{1,0:T(8,128)S(1)}``, ``(f32[2]{0}, s32[])``, ``token[]``."""
    if shape.element_type == _TUPLE:
        return "(" + ", ".join(shape_text(s) for s in shape.tuple_shapes) + ")"
    if shape.element_type == _TOKEN:
        return "token[]"
    if shape.element_type == _OPAQUE:
        return "opaque[]"
    dtype = _DTYPES.get(shape.element_type, f"unknown{shape.element_type}")
    dynamic = list(shape.is_dynamic_dimension)
    dims = ",".join(("<=" if i < len(dynamic) and dynamic[i] else "") + str(d)
                    for i, d in enumerate(shape.dimensions))
    return f"{dtype}[{dims}]{_layout_text(shape)}"


def _layout_text(shape) -> str:
    if not shape.HasField("layout"):
        return ""
    layout = shape.layout
    extra = "".join("T(" + _ints(t.dimensions) + ")" for t in layout.tiles)
    if layout.element_size_in_bits:
        extra += f"E({layout.element_size_in_bits})"
    if layout.memory_space:
        extra += f"S({layout.memory_space})"
    return "{" + _ints(layout.minor_to_major) + (":" + extra if extra else "") + "}"


def _dim_labels(cdn, rank: int) -> str:
    """``b01f_01io->b01f`` from ConvolutionDimensionNumbers (as XLA prints them)."""
    def labels(fixed: dict, spatial) -> str:
        chars = ["?"] * rank
        for dim, char in fixed.items():
            if 0 <= dim < rank:
                chars[dim] = char
        for i, dim in enumerate(spatial):
            if 0 <= dim < rank:
                chars[dim] = str(i)
        return "".join(chars)

    lhs = labels({cdn.input_batch_dimension: "b", cdn.input_feature_dimension: "f"}, cdn.input_spatial_dimensions)
    rhs = labels({cdn.kernel_output_feature_dimension: "o", cdn.kernel_input_feature_dimension: "i"},
                 cdn.kernel_spatial_dimensions)
    out = labels({cdn.output_batch_dimension: "b", cdn.output_feature_dimension: "f"}, cdn.output_spatial_dimensions)
    return f"{lhs}_{rhs}->{out}"


def _window_text(window) -> str:
    dims = list(window.dimensions)
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any(d.stride != 1 for d in dims):
        parts.append("stride=" + "x".join(str(d.stride) for d in dims))
    if any(d.padding_low or d.padding_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in dims))
    if any(d.base_dilation not in (0, 1) for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation or 1) for d in dims))
    if any(d.window_dilation not in (0, 1) for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation or 1) for d in dims))
    return "{" + " ".join(parts) + "}"


def _replica_groups_text(ins) -> str | None:
    iota = ins.collective_device_list.iota_replica_group_list if ins.HasField("collective_device_list") else None
    if iota is not None and iota.num_replica_groups:
        text = f"[{iota.num_replica_groups},{iota.num_devices_per_group}]<=[{_ints(iota.iota_reshape_dims)}]"
        perm = list(iota.iota_transpose_perm)
        if perm and perm != sorted(perm):
            text += f"T({_ints(perm)})"
        return text
    groups = list(ins.collective_device_list.replica_groups) or list(ins.replica_groups)
    if not groups:
        return None
    return "{" + ",".join("{" + _ints(g.replica_ids) + "}" for g in groups) + "}"


def _called_attrs(opcode: str, names: list[str]) -> list[str]:
    if not names:
        return []
    refs = ["%" + n for n in names]
    if opcode == "while" and len(refs) == 2:  # XLA: body is called computation 0, condition 1
        return [f"condition={refs[1]}", f"body={refs[0]}"]
    if opcode == "conditional":
        return ["branch_computations={" + ", ".join(refs) + "}"]
    if opcode == "select-and-scatter" and len(refs) == 2:
        return [f"select={refs[0]}", f"scatter={refs[1]}"]
    if opcode in ("fusion", "async-start", "call") or opcode.endswith("-start"):
        return [f"calls={refs[0]}" if len(refs) == 1 else "calls={" + ", ".join(refs) + "}"]
    if opcode == "custom-call":
        return ["called_computations={" + ", ".join(refs) + "}"]
    return [f"to_apply={refs[0]}"]


def _attributes(ins, opcode: str, called: list[str], operand_shapes: list) -> list[str]:
    attrs: list[str] = []
    if opcode == "fusion" and ins.fusion_kind:
        attrs.append(f"kind={_text(ins.fusion_kind)}")
    if opcode == "get-tuple-element":
        attrs.append(f"index={ins.tuple_index}")
    if ins.dimensions and opcode != "iota":
        attrs.append("dimensions={" + _ints(ins.dimensions) + "}")
    if opcode == "iota" and ins.dimensions:
        attrs.append(f"iota_dimension={ins.dimensions[0]}")
    if ins.HasField("window") and ins.window.dimensions:
        attrs.append(f"window={_window_text(ins.window)}")
    if ins.HasField("convolution_dimension_numbers"):  # convolutions and cuDNN conv custom-calls
        rank = len(operand_shapes[0].dimensions) if operand_shapes else len(ins.shape.dimensions)
        attrs.append(f"dim_labels={_dim_labels(ins.convolution_dimension_numbers, rank)}")
    if ins.feature_group_count > 1:
        attrs.append(f"feature_group_count={ins.feature_group_count}")
    if ins.batch_group_count > 1:
        attrs.append(f"batch_group_count={ins.batch_group_count}")
    if ins.HasField("dot_dimension_numbers"):
        dnums = ins.dot_dimension_numbers
        for key, values in (("lhs_batch_dims", dnums.lhs_batch_dimensions),
                            ("lhs_contracting_dims", dnums.lhs_contracting_dimensions),
                            ("rhs_batch_dims", dnums.rhs_batch_dimensions),
                            ("rhs_contracting_dims", dnums.rhs_contracting_dimensions)):
            if values:
                attrs.append(f"{key}={{{_ints(values)}}}")
    if ins.channel_id > 0:
        attrs.append(f"channel_id={ins.channel_id}")
    groups = _replica_groups_text(ins)
    if groups is not None:
        attrs.append(f"replica_groups={groups}")
    if ins.use_global_device_ids:
        attrs.append("use_global_device_ids=true")
    if ins.source_target_pairs:
        pairs = ",".join(f"{{{p.source},{p.target}}}" for p in ins.source_target_pairs)
        attrs.append("source_target_pairs={" + pairs + "}")
    if ins.is_host_transfer:
        attrs.append("is_host_transfer=true")
    attrs.extend(_called_attrs(opcode, called))
    if ins.custom_call_target:
        attrs.append(f"custom_call_target={_quoted(_text(ins.custom_call_target))}")
    if ins.async_execution_thread:
        attrs.append(f"async_execution_thread={_quoted(_text(ins.async_execution_thread))}")
    if ins.HasField("metadata"):
        md = ins.metadata
        fields = [f"op_type={_quoted(_text(md.op_type))}" if md.op_type else "",
                  f"op_name={_quoted(_text(md.op_name))}" if md.op_name else "",
                  f"source_file={_quoted(_text(md.source_file))}" if md.source_file else "",
                  f"source_line={md.source_line}" if md.source_line > 0 else "",
                  f"stack_frame_id={md.stack_frame_id}" if md.stack_frame_id > 0 else ""]
        fields = [f for f in fields if f]
        if fields:
            attrs.append("metadata={" + " ".join(fields) + "}")
    if ins.backend_config:
        config = _text(ins.backend_config)
        attrs.append(f"backend_config={config}" if config.lstrip().startswith("{") else
                     f"backend_config={_quoted(config)}")
    return attrs


def _decoded_module(data: bytes, source: str):
    if len(data) >= _MAX_PROTO_BYTES:
        raise HloParseError(f"{source}: HloProto of {len(data)} bytes is over protobuf's 2 GiB limit")
    proto = HloProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise HloParseError(f"{source}: not a readable xla.HloProto ({exc})") from None
    if not proto.hlo_module.computations:
        raise HloParseError(f"{source}: HloProto holds no computation")
    return proto.hlo_module


def _printed(data: bytes, source: str) -> PrintedModule:
    """The module printed: its text lines, and the pieces of each instruction line (read back without
    re-parsing the text where they are plain, see :mod:`.hlo_proto_build`)."""
    module = _decoded_module(data, source)
    comps = list(module.computations)
    comp_names = {c.id: _text(c.name) for c in comps}
    schedule = {key: list(seq.instruction_ids) for key, seq in module.schedule.sequences.items()}
    entry_id = module.entry_computation_id or comps[-1].id
    name = _text(module.name) or "module"
    lines = [f"HloModule {name}" + (", is_scheduled=true" if schedule else ""), ""]
    tables = _stack_frame_tables(module.stack_frame_index)
    lines.extend(tables)
    printed = []
    for comp in comps:
        by_id = {ins.id: ins for ins in comp.instructions}
        order = [by_id[i] for i in schedule.get(comp.id, ()) if i in by_id]
        if len(order) != len(by_id):
            order = list(comp.instructions)
        # Each shape and name printed once (operands repeat their definition's); ids repeat only in damaged protos.
        refs = {i: (shape_text(ins.shape), _text(ins.name)) for i, ins in by_id.items()}
        own = refs if len(by_id) == len(order) else None
        head = ("ENTRY " if comp.id == entry_id else "") + "%" + _text(comp.name) + " {"
        lines.append(head)
        pieces = [_instruction_pieces(ins, by_id, comp.root_id, comp_names, (refs, own)) for ins in order]
        printed.append((_text(comp.name), comp.id == entry_id, pieces))
        lines.extend(p.line for p in pieces)
        lines.extend(["}", ""])
    return PrintedModule(name, bool(schedule), lines, tables, tuple(comp_names.values()), printed)


def hlo_proto_to_text(data: bytes, source: str = "<HloProto>") -> str:
    """The module in ``data`` (a serialized ``xla.HloProto``) printed as HLO text."""
    return "\n".join(_printed(data, source).lines)


def _stack_frame_tables(index) -> list[str]:
    """The FileNames/FunctionNames/FileLocations/StackFrames sections XLA prints before the code
    (ids are 1-based positions), so ``stack_frame_id`` in metadata resolves to a file and line."""
    sections = [
        ("FileNames", [_quoted(_text(n)) for n in index.file_names]),
        ("FunctionNames", [_quoted(_text(n)) for n in index.function_names]),
        ("FileLocations", [f"{{file_name_id={loc.file_name_id} function_name_id={loc.function_name_id} "
                           f"line={loc.line}}}" for loc in index.file_locations]),
        ("StackFrames", [f"{{file_location_id={f.file_location_id} parent_frame_id={f.parent_frame_id}}}"
                         for f in index.stack_frames]),
    ]
    out: list[str] = []
    for header, rows in sections:
        if rows:
            out.extend([header, *(f"{i} {row}" for i, row in enumerate(rows, start=1)), ""])
    return out


def _instruction_pieces(ins, by_id: dict, root_id: int, comp_names: dict, refs: tuple) -> PrintedInstruction:
    """``refs``: (shape text, name) by id of the computation's instructions, and the same for ``ins`` itself
    (None where ids repeat: its own are then printed from it)."""
    by_ref, own = refs
    opcode = _text(ins.opcode)
    pairs = [by_ref[i] for i in ins.operand_ids if i in by_ref]
    operand_text = ", ".join(f"{shape} %{name}" for shape, name in pairs)
    if opcode == "parameter":
        operand_text = str(ins.parameter_number)
    called = [comp_names[c] for c in ins.called_computation_ids if c in comp_names]
    conv = ins.HasField("convolution_dimension_numbers")  # the only attribute reading operand shapes
    attrs = _attributes(ins, opcode, called, [by_id[i].shape for i in ins.operand_ids if i in by_id] if conv else [])
    shape, name = own[ins.id] if own is not None else (shape_text(ins.shape), _text(ins.name))
    is_root = ins.id == root_id
    tail = (", " + ", ".join(attrs)) if attrs else ""
    line = f"  {'ROOT ' if is_root else ''}%{name} = {shape} {opcode}({operand_text}){tail}"
    return PrintedInstruction(line, is_root, name, shape, opcode, operand_text, pairs, attrs)


def parse_hlo_proto(data: bytes, source: str = "<HloProto>") -> HloModule:
    """An :class:`HloModule` from serialized ``xla.HloProto`` bytes (one-line HloParseError if unreadable)."""
    printed = _printed(data, source)
    module = build_module(printed, source)  # None where a piece needs the text parser's own reading
    return module if module is not None else parse_hlo_module("\n".join(printed.lines), source=source)


def parse_hlo_proto_file(path) -> HloModule:
    """A ``<module>(<id>).hlo_proto.pb`` file; one-line HloParseError if it cannot be read or decoded."""
    try:
        data = read_input_bytes(as_path(path))
    except OSError as exc:
        raise HloParseError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_hlo_proto(data, str(path))

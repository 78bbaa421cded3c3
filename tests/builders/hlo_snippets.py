"""HLO instruction text as a TPU trace or dump prints it, and the byte/FLOP arithmetic of shapes (test fixtures)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "f64": 8}


def tpu_shape(dtype: str, dims: Sequence[int], minor_to_major: Sequence[int] | None = None,
              memory_space: int | None = None) -> str:
    """An HLO array shape with a TPU tiled layout, e.g. ``bf16[1024,4096]{1,0:T(8,128)(2,1)}``.

    Tiling follows what the v6e compiler prints: ``T(8,128)`` for 32-bit types, an extra ``(2,1)`` (bf16) or
    ``(4,1)`` (8-bit) sub-tile for packed types; rank 1 uses ``T(1024)``; scalars ``T(128)``/``T(256)``.
    """
    dims = list(dims)
    nbytes = _DTYPE_BYTES[dtype]
    pack = {2: "(2,1)", 1: "(4,1)"}.get(nbytes, "")
    if not dims:
        tiling = "T(256)" if nbytes == 2 else "T(128)"
        layout = f":{tiling}"
    else:
        order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
        if len(dims) == 1:
            tiling = "T(1024)" + ("(128)" + pack if pack else "")
        else:
            tiling = "T(8,128)" + pack
        layout = ",".join(str(d) for d in order) + ":" + tiling
    if memory_space:
        layout += f"S({memory_space})"
    return f"{dtype}[{','.join(str(d) for d in dims)}]{{{layout}}}"


def array_bytes(dtype: str, dims: Sequence[int]) -> int:
    """Logical size; the fixtures use tile-aligned dims so this equals the padded size."""
    return _DTYPE_BYTES[dtype] * math.prod(dims)


def tuple_shape(*shapes: str) -> str:
    return "(" + ", ".join(shapes) + ")"


def instruction(name: str, result: str, opcode: str, operands: Iterable[tuple[str, str]] = (),
                attrs: str = "") -> str:
    """``%name = <result> opcode(<shape> %operand, ...), attrs`` as in TPU xplane op metadata names."""
    args = ", ".join(f"{shape} %{op}" for shape, op in operands)
    text = f"%{name} = {result} {opcode}({args})"
    return f"{text}, {attrs}" if attrs else text


def fusion_text(name: str, result: str, operands: Iterable[tuple[str, str]], kind: str, calls: str) -> str:
    return instruction(name, result, "fusion", operands, f"kind={kind}, calls=%{calls}")


def iota_replica_groups(group_size: int, num_devices: int) -> str:
    """Compact iota form: ``[num_groups,group_size]<=[num_devices]`` (e.g. ``[1,4]<=[4]``)."""
    return f"[{num_devices // group_size},{group_size}]<=[{num_devices}]"


def all_gather_start_text(name: str, shard: str, full: str, operand: str, *, dimension: int,
                          group_size: int = 4, num_devices: int = 4, channel_id: int = 1) -> str:
    return instruction(
        name, tuple_shape(shard, full), "all-gather-start", [(shard, operand)],
        f"channel_id={channel_id}, replica_groups={iota_replica_groups(group_size, num_devices)}, "
        f"dimensions={{{dimension}}}, use_global_device_ids=true")


def all_gather_done_text(name: str, shard: str, full: str, start_name: str) -> str:
    return instruction(name, full, "all-gather-done", [(tuple_shape(shard, full), start_name)])


def copy_text(name: str, result: str, operand_shape: str, operand: str) -> str:
    return instruction(name, result, "copy", [(operand_shape, operand)])


def copy_start_text(name: str, dest: str, source: str, operand: str) -> str:
    # Tuple is (destination, source, context) as in the sample's host-offload copies.
    return instruction(name, tuple_shape(dest, source, "u32[]{:S(2)}"), "copy-start", [(source, operand)])


def copy_done_text(name: str, dest: str, source: str, start_name: str) -> str:
    return instruction(name, dest, "copy-done", [(tuple_shape(dest, source, "u32[]{:S(2)}"), start_name)])


_RESULT_SHAPE = re.compile(r"^%\S+ = (.*?) [a-z][a-z0-9\-_]*\(")


def result_shape_of(hlo_text: str) -> str:
    m = _RESULT_SHAPE.match(hlo_text)
    return m.group(1) if m else ""


def matmul_cost(m: int, k: int, n: int, dtype: str = "bf16") -> tuple[int, int]:
    """(flops, HBM bytes) of [m,k]x[k,n]: 2mkn FLOPs; operands read once, output written once."""
    b = _DTYPE_BYTES[dtype]
    return 2 * m * k * n, b * (m * k + k * n + m * n)


_ARRAY = re.compile(r"\b(pred|s8|u8|bf16|f16|s32|u32|f32|s64|f64)\[([\d,]*)\]")


def shape_bytes(shape_text: str) -> int:
    """Bytes of every array in a (possibly tuple) shape string."""
    return sum(array_bytes(t, [int(d) for d in dims.split(",") if d]) for t, dims in _ARRAY.findall(shape_text))


def layer_loop_module(*, side: str = "between", is_sync: bool = False, trips: int = 4, d: int = 4096,
                      tokens: int = 1024) -> str:
    """A scheduled module shaped after a FSDP layer loop (the llama3 / DeepSeek-style train step): ENTRY runs a
    ``while`` of ``trips`` layers; each gathers its weight shard (async all-gather over 4 devices), runs a
    matmul that does not need it (``side``: ``'between'`` the start and the done, ``'before'`` the start, after
    the producer, or ``'none'``: it needs the gathered weight), then the matmul that consumes the weight, and
    all-reduces the result (async; its done comes right after its start). ``is_sync``: every async collective
    carries ``backend_config={"is_sync":true}`` as XLA GPU prints the ones it makes synchronous."""
    act, full, shard = f"bf16[{tokens},{d}]{{1,0}}", f"bf16[{d},{d}]{{1,0}}", f"bf16[{d // 4},{d}]{{1,0}}"
    state = f"(s32[], {act}, {shard}, {full})"
    sync = ', backend_config={"is_sync":true}' if is_sync else ""
    dot = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    side_input = "%ag-done" if side == "none" else "%v"
    side_line = f"  %side = {act} dot(%x, {side_input}), {dot}"
    start = (f"  %ag-start = ({shard}, {full}) all-gather-start(%w), channel_id=1, replica_groups=[1,4]<=[4], "
             f"dimensions={{0}}, use_global_device_ids=true{sync}")
    done = f"  %ag-done = {full} all-gather-done(%ag-start)"
    order = {"between": [start, side_line, done], "before": [side_line, start, done],
             "none": [start, done, side_line]}[side]
    body = [f"%body (p: {state}) -> {state} {{", f"  %p = {state} parameter(0)",
            "  %i = s32[] get-tuple-element(%p), index=0", f"  %x = {act} get-tuple-element(%p), index=1",
            f"  %w = {shard} get-tuple-element(%p), index=2", f"  %v = {full} get-tuple-element(%p), index=3",
            *order, f"  %y = {act} dot(%side, %ag-done), {dot}",
            f"  %ar-start = {act} all-reduce-start(%y), channel_id=2, replica_groups=[1,4]<=[4], "
            f"use_global_device_ids=true, to_apply=%sum{sync}",
            f"  %ar-done = {act} all-reduce-done(%ar-start)", "  %one = s32[] constant(1)",
            "  %next = s32[] add(%i, %one)", f"  ROOT %t = {state} tuple(%next, %ar-done, %w, %v)", "}"]
    cond = [f"%cond (q: {state}) -> pred[] {{", f"  %q = {state} parameter(0)",
            "  %c = s32[] get-tuple-element(%q), index=0", f"  %n = s32[] constant({trips})",
            "  ROOT %lt = pred[] compare(%c, %n), direction=LT", "}"]
    entry = [f"ENTRY %main (x0: {act}, w0: {shard}, v0: {full}) -> {act} {{", f"  %x0 = {act} parameter(0)",
             f"  %w0 = {shard} parameter(1)", f"  %v0 = {full} parameter(2)", "  %zero = s32[] constant(0)",
             f"  %init = {state} tuple(%zero, %x0, %w0, %v0)",
             f"  %loop = {state} while(%init), condition=%cond, body=%body, "
             f'backend_config={{"known_trip_count":{{"n":"{trips}"}}}}',
             f"  ROOT %out = {act} get-tuple-element(%loop), index=1", "}"]
    reducer = ["%sum (a: bf16[], b: bf16[]) -> bf16[] {", "  %a = bf16[] parameter(0)", "  %b = bf16[] parameter(1)",
               "  ROOT %s = bf16[] add(%a, %b)", "}"]
    return "\n".join(["HloModule jit_layers, is_scheduled=true", "", *reducer, "", *body, "", *cond, "", *entry, ""])


def relayout_module(consumer: str, *, moved: str = "consumer", shared: bool = False) -> str:
    """A scheduled module whose ``%t`` transposes f32[64,128,256] and feeds ``consumer``: ``fft`` (an RFFT of
    the last dimension), ``all-to-all`` (split / concat dimension 2) or ``dot`` (contracting dimension 2).
    ``moved='consumer'``: the transpose moves the dimension the consumer works on (it swaps dims 1 and 2),
    ``'batch'``: it swaps dims 0 and 1 only. ``shared``: a second dot reads the transpose's source as it is
    (the source is needed in two orders)."""
    perm, dims = ("{0,2,1}", [64, 256, 128]) if moved == "consumer" else ("{1,0,2}", [128, 64, 256])
    rank3, out = "f32[64,128,256]{2,1,0}", f"f32[{dims[0]},{dims[1]},{dims[2]}]{{2,1,0}}"
    head = f"f32[{dims[0]},{dims[1]}"
    use = {"fft": f"  %f = c64[{dims[0]},{dims[1]},{dims[2] // 2 + 1}]{{2,1,0}} fft(%t), fft_type=RFFT, "
                  f"fft_length={{{dims[2]}}}",
           "all-to-all": f"  %f = {out} all-to-all(%t), channel_id=1, replica_groups=[1,4]<=[4], dimensions={{2}}",
           "dot": f"  %f = {head},32]{{2,1,0}} dot(%t, %w), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}"}
    lines = ["HloModule jit_relayout, is_scheduled=true", "",
             f"ENTRY %main (p: {rank3}, w: f32[{dims[2]},32], v: f32[256,32]) -> f32[] {{",
             f"  %p = {rank3} parameter(0)", f"  %w = f32[{dims[2]},32]{{1,0}} parameter(1)",
             "  %v = f32[256,32]{1,0} parameter(2)", f"  %x = {rank3} negate(%p)",
             f"  %t = {out} transpose(%x), dimensions={perm}", use[consumer]]
    if shared:
        lines.append("  %g = f32[64,128,32]{2,1,0} dot(%x, %v), lhs_contracting_dims={2}, rhs_contracting_dims={0}")
    return "\n".join([*lines, "  ROOT %r = f32[] constant(0)", "}", ""])


def small_gathers_module(trips: int = 1) -> str:
    """Two small all-gathers (bf16[64,256] shards over 4 devices) in ENTRY and two in a ``while`` body run
    ``trips`` times: with one trip all four run once per step, yet only the two of one computation can merge."""
    shard, full = "bf16[64,256]{1,0}", "bf16[256,256]{1,0}"
    state = f"(s32[], {shard}, {shard})"

    def gather(name, operand, channel):
        return (f"  %{name} = {full} all-gather(%{operand}), channel_id={channel}, replica_groups=[1,4]<=[4], "
                "dimensions={0}, use_global_device_ids=true")

    body = [f"%body (p: {state}) -> {state} {{", f"  %p = {state} parameter(0)",
            "  %i = s32[] get-tuple-element(%p), index=0", f"  %a = {shard} get-tuple-element(%p), index=1",
            f"  %b = {shard} get-tuple-element(%p), index=2", gather("ag.body.0", "a", 3), gather("ag.body.1", "b", 4),
            "  %one = s32[] constant(1)", "  %next = s32[] add(%i, %one)",
            f"  ROOT %t = {state} tuple(%next, %a, %b)", "}"]
    cond = [f"%cond (q: {state}) -> pred[] {{", f"  %q = {state} parameter(0)",
            "  %c = s32[] get-tuple-element(%q), index=0", f"  %n = s32[] constant({trips})",
            "  ROOT %lt = pred[] compare(%c, %n), direction=LT", "}"]
    entry = [f"ENTRY %main (x: {shard}, y: {shard}) -> {state} {{", f"  %x = {shard} parameter(0)",
             f"  %y = {shard} parameter(1)", gather("ag.0", "x", 1), gather("ag.1", "y", 2),
             "  %zero = s32[] constant(0)", f"  %init = {state} tuple(%zero, %x, %y)",
             f"  ROOT %loop = {state} while(%init), condition=%cond, body=%body, "
             f'backend_config={{"known_trip_count":{{"n":"{trips}"}}}}', "}"]
    return "\n".join(["HloModule jit_small, is_scheduled=true", "", *body, "", *cond, "", *entry, ""])

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


# ---- whole modules for hostile-input tests: loops, call graphs, dots, memory reports ---------------------------

_LOOP_STATE = "(s32[], f32[64,64]{1,0})"


def loop_module(config: str = "", limit: int | str | None = 32) -> str:
    """``HloModule`` text whose ENTRY runs a while loop of one [64,64] x [64,64] dot per trip (2 x 64^3 FLOPs).

    ``config``: the raw ``backend_config=`` text of the while ('' for none); ``limit``: the constant of the loop
    condition ``i < limit`` (None: a condition with no constant, so the trip count can only come from the
    config)."""
    cond_root = (f"%n = s32[] constant({limit})\n  ROOT %lt = pred[] compare(%ci, %n), direction=LT"
                 if limit is not None else "ROOT %lt = pred[] compare(%ci, %ci), direction=LT")
    attrs = f", backend_config={config}" if config else ""
    return f"""HloModule jit_loop

%body (p: {_LOOP_STATE}) -> {_LOOP_STATE} {{
  %p = {_LOOP_STATE} parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[64,64]{{1,0}} get-tuple-element(%p), index=1
  %y = f32[64,64]{{1,0}} dot(%x, %x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = {_LOOP_STATE} tuple(%next, %y)
}}

%cond (c: {_LOOP_STATE}) -> pred[] {{
  %c = {_LOOP_STATE} parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  {cond_root}
}}

ENTRY %main (x0: f32[64,64]) -> f32[64,64] {{
  %x0 = f32[64,64]{{1,0}} parameter(0)
  %c0 = s32[] constant(0)
  %init = {_LOOP_STATE} tuple(%c0, %x0)
  %loop = {_LOOP_STATE} while(%init), condition=%cond, body=%body{attrs}
  ROOT %out = f32[64,64]{{1,0}} get-tuple-element(%loop), index=1
}}
"""


def _computation(name: str, root: str, entry: bool = False) -> str:
    """A computation of one f32[8,8] parameter and a dot on it, then ``root`` (an instruction on %d)."""
    head = ("ENTRY " if entry else "") + f"%{name} (a: f32[8,8]) -> f32[8,8]"
    return (f"{head} {{\n  %a = f32[8,8]{{1,0}} parameter(0)\n"
            f"  %d = f32[8,8]{{1,0}} dot(%a, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
            f"  ROOT %r = f32[8,8]{{1,0}} {root}\n}}\n")


def cyclic_module(kind: str) -> str:
    """A module whose call graph has a cycle, of ``kind``: ``self-fusion`` (a fusion's calls= names its own
    computation), ``fusion-pair``, ``call-pair``, ``while-body`` (a loop body that runs its own loop) or
    ``branch`` (a conditional branch that is the computation holding the conditional). ENTRY reaches it."""
    calls = {
        "self-fusion": [("f1", "fusion(%d), kind=kLoop, calls=%f1")],
        "fusion-pair": [("f1", "fusion(%d), kind=kLoop, calls=%f2"), ("f2", "fusion(%d), kind=kLoop, calls=%f1")],
        "call-pair": [("f1", "call(%d), to_apply=%f2"), ("f2", "call(%d), to_apply=%f1")],
        "while-body": [("f1", "while(%d), condition=%f2, body=%f1"), ("f2", "add(%d, %a)")],
        "branch": [("f1", "conditional(%p, %d, %d), branch_computations={%f1, %f2}"), ("f2", "add(%d, %a)")],
    }[kind]
    comps = [_computation(name, root) for name, root in calls]
    if kind == "branch":
        comps[0] = comps[0].replace("  ROOT", "  %p = s32[] constant(0)\n  ROOT")
    fusion = "fusion(%d), kind=kLoop, calls=%f1"
    entry_root = {"self-fusion": fusion, "fusion-pair": fusion, "call-pair": "call(%d), to_apply=%f1",
                  "while-body": "while(%d), condition=%f2, body=%f1", "branch": "call(%d), to_apply=%f1"}[kind]
    return "HloModule jit_cycle\n\n" + "\n".join(comps) + "\n" + _computation("main", entry_root, entry=True)


def fusion_chain_module(depth: int) -> str:
    """ENTRY calls a fusion whose body calls the next one, ``depth`` deep, each body holding one [8,8] dot:
    ``depth`` x 2 x 8^3 FLOPs in all. Acyclic; only deep."""
    comps = [_computation(f"f{i}", f"fusion(%d), kind=kOutput, calls=%f{i + 1}") for i in range(depth - 1)]
    comps.append(_computation(f"f{depth - 1}", "add(%d, %a)"))
    return "HloModule jit_chain\n\n" + "\n".join(comps) + "\n" + _computation(
        "main", "fusion(%a), kind=kOutput, calls=%f0", entry=True)


def nested_json(depth: int) -> str:
    """A JSON object nested ``depth`` levels deep: ``{"a":{"a":...{}...}}``."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def dot_module(lhs: str, rhs: str, out: str, attrs: str = "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
               opcode: str = "dot") -> str:
    """A module of one ``opcode`` (a dot by default) of parameters shaped ``lhs`` and ``rhs`` into ``out``."""
    return f"""HloModule jit_dot

ENTRY %main (x: {lhs}, w: {rhs}) -> {out} {{
  %x = {lhs} parameter(0)
  %w = {rhs} parameter(1)
  ROOT %y = {out} {opcode}(%x, %w){", " + attrs if attrs else ""}
}}
"""


def memory_usage_report(total_bytes: int | str) -> str:
    """An XLA ``*-memory-usage-report.txt`` whose default memory space totals ``total_bytes``."""
    return (f"Memory Space: default (color=0)\nTotal bytes: {total_bytes} (?)\n"
            "  cumulative_size;       size;       offset; used_by_n_values; shapes_list\n")
# GPU library custom calls as XLA prints them after optimizations (backend_config fields as in the H100 sample
# sample_profiles/gpu_h100_attention_pair*: cuDNN flash attention from jax.nn.dot_product_attention, cuBLASLt).
def _dnums(lhs_batch, lhs_contract, rhs_batch, rhs_contract) -> str:
    def ints(xs):
        return ",".join(f'"{x}"' for x in xs)
    return (f'{{"lhs_batch_dimensions":[{ints(lhs_batch)}],"lhs_contracting_dimensions":[{ints(lhs_contract)}],'
            f'"rhs_batch_dimensions":[{ints(rhs_batch)}],"rhs_contracting_dimensions":[{ints(rhs_contract)}]}}')


def cudnn_fmha_text(name: str, batch: int, seq_q: int, seq_kv: int, heads: int, head_dim: int, *,
                    mask: str = "NO_MASK", backward: bool = False, dropout: float = 0.0,
                    workspace: int = 0, window: int = 0) -> str:
    """A ``__cudnn$fmhaSoftmax[Dropout][Backward]`` call on JAX's [B, S, H, D] bf16 Q, K, V parameters
    ``%q``, ``%k``, ``%v`` (and ``%do``, ``%o``, ``%stats`` for the backward)."""
    q, kv = f"bf16[{batch},{seq_q},{heads},{head_dim}]", f"bf16[{batch},{seq_kv},{heads},{head_dim}]"
    stats = f"f32[{batch},{heads},{seq_q}]{{2,1,0}}"
    target = "__cudnn$fmhaSoftmax" + ("Dropout" if dropout else "") + ("Backward" if backward else "")
    if backward:
        dims = (f'"bmm1_grad_gemm1_dot_dimension_numbers":{_dnums([0, 1], [2], [0, 2], [1])},'
                f'"bmm2_grad_gemm2_dot_dimension_numbers":{_dnums([0, 2], [3], [0, 2], [3])}')
        result = f"({q}{{3,1,2,0}}, {kv}{{3,1,2,0}}, {kv}{{3,1,2,0}}, u8[{workspace}]{{0}})"
        operands = f"{q} %q, {kv} %k, {kv} %v, {stats} %stats, {q} %do, {q} %o"
    else:
        dims = (f'"bmm1_dot_dimension_numbers":{_dnums([0, 2], [3], [0, 2], [3])},'
                f'"bmm2_dot_dimension_numbers":{_dnums([0, 1], [3], [0, 2], [1])}')
        result = f"({q}{{3,1,2,0}}, {stats}, u8[{workspace}]{{0}})"
        operands = f"{q} %q, {kv} %k, {kv} %v"
    config = (f'{{"cudnn_fmha_backend_config":{{"algorithm":{{"algo_id":"0","is_cudnn_frontend":true}},{dims},'
              f'"dropout_rate":{dropout},"fmha_scale":0.125,"is_flash_attention":true,"mask_type":"{mask}",'
              f'"seed":42,"sliding_window_length":{window}}},"operation_queue_id":"0"}}')
    return (f'%{name} = {result} custom-call({operands}), custom_call_target="{target}", '
            f'api_version=API_VERSION_STATUS_RETURNING, backend_config={config}')


def cublas_lt_text(name: str, m: int, k: int, n: int, *, epilogue: str = "DEFAULT", beta: float = 0.0,
                   workspace: int = 33554432) -> str:
    """A ``__cublas$lt$matmul`` of bf16 ``%a`` [m, k] x ``%b`` [k, n] (+ ``%bias`` [n] for a BIAS epilogue,
    + ``%c`` [m, n] when beta is set), with the s8 workspace cuBLASLt appends to its result."""
    out = f"bf16[{m},{n}]{{1,0}}"
    operands = [f"bf16[{m},{k}]{{1,0}} %a", f"bf16[{k},{n}]{{1,0}} %b"]
    operands += [f"{out} %c"] if beta else []
    operands += [f"bf16[{n}]{{0}} %bias"] if epilogue.startswith("BIAS") else []
    results = [out] + ([out] if epilogue.endswith("_AUX") else []) + [f"s8[{workspace}]{{0}}"]
    config = (f'{{"gemm_backend_config":{{"alpha_imag":0,"alpha_real":1,"beta":{beta},'
              f'"dot_dimension_numbers":{_dnums([], [1], [], [0])},"epilogue":"{epilogue}",'
              f'"precision_config":{{"algorithm":"ALG_UNSET","operand_precision":["DEFAULT","DEFAULT"]}},'
              f'"selected_algorithm":"2"}},"operation_queue_id":"0"}}')
    return (f'%{name} = ({", ".join(results)}) custom-call({", ".join(operands)}), '
            f'custom_call_target="__cublas$lt$matmul", backend_config={config}')


def te_fused_attn_text(name: str, batch: int, seq: int, heads: int, head_dim: int, *, mask_type: int = 2,
                       backward: bool = False, window_left: int = -1) -> str:
    """A TransformerEngine ``te_fused_attn_{forward,backward}_ffi`` call (typed FFI: its attributes print as an
    MLIR dictionary) on [B, S, H, D] bf16 ``%q``, ``%k``, ``%v``; mask_type is NVTE_Mask_Type (2 = CAUSAL)."""
    qkv = f"bf16[{batch},{seq},{heads},{head_dim}]{{3,2,1,0}}"
    attrs = (f"{{attn_heads = {heads} : i64, bias_batch = 0 : i64, bias_heads = 0 : i64, bias_type = 0 : i64, "
             f"deterministic = false, dropout_probability = 0.000000e+00 : f64, head_dim = {head_dim} : i64, "
             f"input_batch = {batch} : i64, is_training = true, kv_max_seqlen = {seq} : i64, mask_type = "
             f"{mask_type} : i64, max_segments_per_seq = 1 : i64, num_gqa_groups = {heads} : i64, "
             f"q_max_seqlen = {seq} : i64, qkv_layout = 3 : i64, scaling_factor = 1.250000e-01 : f64, "
             f"window_size_left = {window_left} : i64, window_size_right = {0 if window_left >= 0 else -1} : i64}}")
    target = f"te_fused_attn_{'backward' if backward else 'forward'}_ffi"
    results = f"({qkv}, f32[{batch},{heads},{seq},1]{{3,2,1,0}}, u32[2]{{0}}, u8[4096]{{0}})"
    return (f'%{name} = {results} custom-call({qkv} %q, {qkv} %k, {qkv} %v), custom_call_target="{target}", '
            f"api_version=API_VERSION_TYPED_FFI, backend_config={attrs}")


def triton_call_text(name: str, result: str, operand_shape: str, operand: str) -> str:
    """A Pallas-on-GPU kernel (``__gpu$xla.gpu.triton``): its config carries the kernel, no cost estimate."""
    config = ('{debug = false, grid_x = 64 : i32, grid_y = 1 : i32, grid_z = 1 : i32, ir = "", '
              'name = "add_vectors_kernel", num_stages = 3 : i32, num_warps = 4 : i32}')
    return (f'%{name} = {result} custom-call({operand_shape} %{operand}), custom_call_target="__gpu$xla.gpu.triton", '
            f"api_version=API_VERSION_TYPED_FFI, backend_config={config}")
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

"""FLOPs per HLO instruction, and the per-instruction cost table, for captures whose trace has no
``flops``/``bytes_accessed`` (GPU, CPU, ``--hlo-dir`` alone).

FLOPs
- dot: 2 x output elements x contracted size (batch dims are part of the output).
- convolution: 2 x (input features / feature groups) x output features x (batch / batch groups)
  x the product over spatial dims of the (output position, kernel tap) pairs that land on real
  input, not on padding or dilation holes (XLA's HloCostAnalysis rule). TPU rewrites matmuls as
  convolutions with a window over a padded size-1 dim; counting taps naively would overstate
  those 32x.
- fft: 5 N log2 N per complex transform of N points, half that for a real one (RFFT, IRFFT), times the
  transforms in the batch: the convention FFT benchmarks count in (FFTW's benchFFT), not an exact count.
- fusion/call: the sum over the called computation, recursively.
- elementwise arithmetic: 1 per output element; reduce: 1 per input element; reduce-window:
  1 per output element and window tap. Data movement, convert and collectives: 0 (a collective's
  reduction is the collective model's business).
- custom-call: cuBLAS gemm and cuDNN convolution targets like dot/convolution; Pallas kernels with a
  cost estimate and cuDNN fused attention as :mod:`.kernel_costs` says; other kernels (flash, splash,
  Pallas without an estimate, unknown targets): NaN, so they are bound "unknown", not "hbm".

Bytes (by memory space) are :mod:`.hlo_bytes`' business; :func:`instruction_costs` joins both per row.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from ...parsers.hlo_text import HloModule, Instruction, Shape
from ...parsers.hlo_tokens import HloParseError, parse_ints
from ...units import format_si
from .control_flow import Runs, computation_runs
from .conv_costs import conv_flops_from, parse_window
from .kernel_costs import (
    backend_json as _backend_json,
)
from .kernel_costs import (
    custom_call_kind,
    fmha_flops,
    gemm_epilogue_steps,
    is_fmha,
    is_te_attention,
    pallas_cost_estimate,
    te_attention_flops,
)
from .kernel_costs import (
    target as _target,
)
from .matmul_shapes import dot_dims, has_unknown_dim
from .op_bytes import ByteCounter
from .op_bytes import data_shape as _array

__all__ = ["instruction_costs", "dot_flops", "convolution_flops", "instruction_flops",
           "top_level_computations", "matmul_dims"]

_CALLS = ("fusion", "call", "async-start")  # FLOPs and matmuls are those of the called computation
_READS_OPERANDS = frozenset({"dot", "convolution", "fft", "reduce", "select-and-scatter", "custom-call"})
_ELEMENTWISE = frozenset("""
add subtract multiply divide remainder maximum minimum power atan2 abs negate sign exponential
exponential-minus-one log log-plus-one logistic sqrt rsqrt cbrt tanh tan sine cosine erf floor
ceil round-nearest-afz round-nearest-even compare select clamp and or xor not shift-left
shift-right-arithmetic shift-right-logical is-finite popcnt count-leading-zeros real imag complex
reduce-precision stochastic-convert map
""".split())


def _dot_flops_from(lhs: Shape, out: Shape, lhs_contracting: list[int]) -> float:
    if any(not 0 <= d < len(lhs.dims) for d in lhs_contracting):  # -1 would read the last dim
        raise ValueError(f"contracting dims {lhs_contracting} outside the rank-{len(lhs.dims)} lhs")
    contracted = math.prod(lhs.dims[d] for d in lhs_contracting)
    return 2.0 * _array(out).num_elements * contracted


_DOT_NUMBERS = ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims")


def hlo_dot_dims(instr: Instruction, module: HloModule | None):
    """The checked ``matmul_shapes.DotDims`` of an HLO ``dot`` (ValueError when inconsistent or unknown)."""
    shapes = module.resolve_operand_shapes(instr) if module is not None else instr.operand_shapes
    if len(shapes) < 2:
        raise ValueError("a dot without two operand shapes")
    numbers = {key: parse_ints(instr.attrs.get(key, "")) for key in _DOT_NUMBERS}
    return dot_dims(shapes[0], shapes[1], instr.shape, numbers)


def dot_flops(instr: Instruction, module: HloModule) -> float:
    """2 x output elements x contracted size of a ``dot`` (or a cuBLAS gemm custom-call)."""
    if instr.opcode == "custom-call":
        lhs = module.resolve_operand_shapes(instr)[0]
        dnums = _backend_json(instr).get("gemm_backend_config", {}).get("dot_dimension_numbers", {})
        return _dot_flops_from(lhs, instr.shape, [int(d) for d in
                                                  dnums.get("lhs_contracting_dimensions", [])])
    d = hlo_dot_dims(instr, module)
    return 2.0 * d.batch * d.m * d.n * d.k


_FFT_NOTE = "FFT: 5 N log2 N per complex transform, half for a real one (FFTW's count)"


def fft_flops(instr: Instruction, module: HloModule) -> float:
    """FLOPs of an ``fft`` (rule in the module doc); NaN when its lengths cannot be read."""
    lengths = parse_ints(instr.attrs.get("fft_length", "").strip("{}") or "0")
    n = math.prod(lengths)
    if n <= 1:
        return math.nan
    fft_type = instr.attrs.get("fft_type", "FFT").upper()
    # The batch is read on the side with n points per transform: the real input of an RFFT, else the result
    # (complex for FFT/IFFT, real for IRFFT).
    side = module.resolve_operand_shapes(instr)[0] if fft_type == "RFFT" else instr.shape
    batch = _array(side).num_elements / n
    return (2.5 if fft_type in ("RFFT", "IRFFT") else 5.0) * n * math.log2(n) * batch


def convolution_flops(instr: Instruction, module: HloModule) -> float:
    """FLOPs of a ``convolution`` or cuDNN convolution custom-call (rule in the module doc)."""
    ops = module.resolve_operand_shapes(instr)
    out = _array(instr.shape)
    target = _target(instr)
    if "BackwardInput" in target:  # operands (d_output, filter) -> d_input
        return conv_flops_from(out, ops[1], ops[0], instr.attrs)
    if "BackwardFilter" in target:  # operands (input, d_output) -> d_filter
        return conv_flops_from(ops[0], out, ops[1], instr.attrs)
    return conv_flops_from(ops[0], ops[1], out, instr.attrs)


class _Costs:
    """Per-module memo of computation FLOPs and matmul presence."""

    def __init__(self, module: HloModule):
        self.module = module
        self.comp_flops: dict[str, tuple[float, str]] = {}
        self.comp_matmul: dict[str, Instruction | None] = {}

    def flops(self, instr: Instruction) -> tuple[float, str]:
        """(FLOPs, note); NaN FLOPs when unknown: a dim of unknown size (``?``) included."""
        op = instr.opcode
        if op not in _CALLS and (has_unknown_dim(instr.shape) or op in _READS_OPERANDS and any(
                has_unknown_dim(s) for s in self.module.resolve_operand_shapes(instr))):
            return math.nan, f"{op} on a dimension of unknown size (?): FLOPs unknown"
        if op == "dot":
            return dot_flops(instr, self.module), ""
        if op == "convolution":
            return convolution_flops(instr, self.module), ""
        if op == "fft":
            return fft_flops(instr, self.module), _FFT_NOTE
        if op in _CALLS:
            return self.computation_flops(instr.called_computations()[0])
        if op == "custom-call":
            return self.custom_call_flops(instr)
        if op in _ELEMENTWISE:
            return float(_array(instr.shape).num_elements), ""
        if op == "reduce":
            ops = self.module.resolve_operand_shapes(instr)
            return float(sum(s.num_elements for s in ops[: len(ops) // 2])), ""
        if op == "reduce-window":
            window = parse_window(instr.attrs.get("window", ""), len(_array(instr.shape).dims))
            return float(_array(instr.shape).num_elements * math.prod(w["size"] for w in window)), ""
        if op == "select-and-scatter":
            src = self.module.resolve_operand_shapes(instr)[1]
            window = parse_window(instr.attrs.get("window", ""), len(src.dims))
            return float(src.num_elements * math.prod(w["size"] for w in window)), ""
        if op == "sort":
            shape = _array(instr.shape)
            dim = parse_ints(instr.attrs.get("dimensions", "0"))[0]
            n = shape.dims[dim] if shape.dims else 1
            return float(shape.num_elements * max(math.ceil(math.log2(max(n, 1))), 1)), ""
        return 0.0, ""

    def custom_call_flops(self, instr: Instruction) -> tuple[float, str]:
        kind, target = custom_call_kind(instr), _target(instr)
        if kind == "gemm":
            steps, note = gemm_epilogue_steps(instr)
            return dot_flops(instr, self.module) + steps * float(_array(instr.shape).num_elements), note
        if kind == "conv":
            return convolution_flops(instr, self.module), ""
        if kind == "zero":
            return 0.0, ""
        if target == "tpu_custom_call" and (est := pallas_cost_estimate(instr)) is not None:
            return est["flops"], "Pallas kernel: FLOPs from its cost_estimate"
        if is_fmha(target):
            return fmha_flops(instr, self.module)
        if is_te_attention(target):
            return te_attention_flops(instr)
        why = ": its backend_config carries no cost estimate" if target == "__gpu$xla.gpu.triton" else ""
        return math.nan, f"{kind} custom-call {target}{why}"

    def computation_flops(self, name: str) -> tuple[float, str]:
        """Summed over the computation's instructions, what they call first, with an explicit stack (a deep
        chain of fusions costs no Python stack); unknown on a call cycle (the parser named it)."""
        cycles, todo = self.module.call_cycles, [(name, False)]
        while todo:
            cname, ready = todo.pop()
            if cname in self.comp_flops:
                continue
            if cname in cycles:
                self.comp_flops[cname] = (math.nan, f"on call cycle {cycles[cname]}: FLOPs unknown")
                continue
            body = self.module.computations[cname].instructions
            if not ready:
                todo.append((cname, True))
                todo.extend((c[0], False) for c in (i.called_computations() for i in body if i.opcode in _CALLS) if c)
                continue
            total, notes = 0.0, []
            for ins in body:
                f, note = self.flops(ins)  # a call's computation is counted by now
                total += f
                if note:
                    notes.append(note)
            self.comp_flops[cname] = (total, "; ".join(dict.fromkeys(notes)))
        return self.comp_flops[name]

    def matmul(self, instr: Instruction) -> Instruction | None:
        """The dot/convolution (or gemm/conv custom-call) this instruction is or contains."""
        if instr.opcode in ("dot", "convolution"):
            return instr
        if instr.opcode == "custom-call":
            return instr if custom_call_kind(instr) in ("gemm", "conv") else None
        if instr.opcode in _CALLS:
            name = instr.called_computations()[0]
            if name not in self.comp_matmul:
                self.comp_matmul[name] = self._first_matmul(name)
            return self.comp_matmul[name]
        return None

    def _first_matmul(self, name: str) -> Instruction | None:
        """The first matmul in ``name`` or what it calls, depth first, each computation read once (an explicit
        stack: no recursion, and a call cycle ends)."""
        comps = self.module.computations
        seen, stack = {name}, [iter(comps[name].instructions)]
        while stack:
            ins = next(stack[-1], None)
            if ins is None:
                stack.pop()
            elif ins.opcode in _CALLS:
                called = ins.called_computations()[:1]
                if called and called[0] in comps and called[0] not in seen:
                    seen.add(called[0])
                    stack.append(iter(comps[called[0]].instructions))
            elif self.matmul(ins) is not None:
                return ins
        return None


def matmul_dims(instr: Instruction, module: HloModule | None) -> dict | None:
    """The (M, N, K, batch) of the dot or convolution an op is or fuses, or None.

    dot: K = contracted size, batch = batch dims, M = the lhs's other dims, N = the rhs's other dims
    (several free dims multiply). convolution: K = input features per group (the kernel's ``i``),
    N = output features (the kernel's ``o``), M = batch x output spatial positions. Each as a product of
    logical (unpadded) sizes: what the MXU / tensor cores tile."""
    mm = _Costs(module).matmul(instr) if module is not None else (
        instr if instr.opcode in ("dot", "convolution") else None)
    if mm is None or mm.opcode not in ("dot", "convolution"):
        return None
    if mm.opcode == "dot":  # sizes that contradict each other or are unknown: no sizes (matmul_shapes)
        d = hlo_dot_dims(mm, module)
        return dict(m=d.m, n=d.n, k=d.k, batch=d.batch)
    shapes = module.resolve_operand_shapes(mm) if module is not None else mm.operand_shapes
    if len(shapes) < 2 or any(has_unknown_dim(s) for s in (*shapes[:2], mm.shape)):
        return None
    rhs = shapes[1].dims
    labels = re.fullmatch(r"(\w+)_(\w+)->(\w+)", mm.attrs.get("dim_labels", ""))
    out = _array(mm.shape).dims
    if labels is None or out is None:
        return None
    _, k_l, out_l = labels.groups()
    spatial = math.prod(d for c, d in zip(out_l, out) if c not in "bf")
    return dict(m=out[out_l.index("b")] * spatial, n=rhs[k_l.index("o")], k=rhs[k_l.index("i")], batch=1)


def instruction_flops(instr: Instruction, module: HloModule) -> float:
    """FLOPs of one instruction (NaN when unknown), fusions summed over their bodies."""
    return _Costs(module).flops(instr)[0]


def top_level_computations(module: HloModule) -> list[str]:
    """ENTRY plus while/conditional/call bodies: the computations whose instructions run as ops."""
    roles = module.computation_roles()
    return [name for name in module.computations if roles.get(name) in ("entry", "control")]


_COLUMNS = ["name", "opcode", "computation", "flops", "flops_source", "flops_note",
            "bytes_accessed", "hbm_bytes", "vmem_bytes", "host_bytes", "other_bytes", "dtype",
            "is_matmul", "op_name", "source_file", "source_line", "runs", "branches", "runs_note"]


def instruction_costs(module: HloModule, scope: str = "top") -> pd.DataFrame:
    """One row per instruction of the top-level computations (``scope='all'``: every one).

    Columns: name, opcode, computation, flops (NaN unknown), flops_source ('hlo'), flops_note,
    bytes_accessed (= hbm + vmem + host + other), hbm_bytes, vmem_bytes, host_bytes,
    other_bytes, dtype (a matmul's operand dtype, else the result's), is_matmul, op_name,
    source_file, source_line, runs (executions per program run: loop trip counts, nested ones multiplied;
    1 where the computation is not reached from ENTRY), branches (``conditional=i`` tags, ';'-joined, of the
    conditional branches the row sits in), runs_note (how its loops' trip counts were found).
    """
    costs, counter = _Costs(module), ByteCounter(module)
    runs = computation_runs(module)
    names = top_level_computations(module) if scope == "top" else list(module.computations)
    rows = []
    for cname in names:
        here = runs.get(cname, Runs(1.0))
        for ins in module.computations[cname].instructions:
            try:
                # A top-level call's body is itself top level and has its own rows.
                flops, note = costs.flops(ins) if ins.opcode != "call" else (0.0, "")
            except (ValueError, IndexError, KeyError, HloParseError) as exc:  # odd dims/labels/window: keep it
                flops, note = math.nan, f"cannot count FLOPs: {exc}"
            if flops < 0:  # a count from sizes no check caught: unknown, never negative
                flops, note = math.nan, f"cannot count FLOPs: {format_si(flops, 'FLOP')} from its sizes"
            try:
                acc = counter.split(ins)
            except (IndexError, KeyError):
                acc = {}
            try:
                mm = costs.matmul(ins)
                mm_dtype = module.resolve_operand_shapes(mm)[0].dtype if mm is not None and mm.operand_names else None
            except (IndexError, KeyError):  # a fusion without calls=, a call to a missing computation
                mm, mm_dtype = None, None
            dtype = mm_dtype or _array(ins.shape).dtype
            split = [float(acc.get(k, 0.0)) for k in ("hbm_bytes", "vmem_bytes", "host_bytes",
                                                      "other_bytes")]
            rows.append((ins.name, ins.opcode, cname, flops, "hlo", note, sum(split), *split,
                         dtype, mm is not None, ins.op_name, ins.source_file, ins.source_line,
                         here.runs, here.branches, here.note))
    df = pd.DataFrame(rows, columns=_COLUMNS)
    df["flops"] = df["flops"].astype(float)
    df["source_line"] = df["source_line"].astype("Int64")
    return df

"""Copies and transposes that only change how an array is laid out in memory.

What it finds:
    `copy` and `transpose` ops, and fusions made only of copies, transposes, bitcasts and reshapes, whose
    result holds the same elements as the operand in another layout or tiling (e.g. `{1,0:T(8,128)}` ->
    `{0,1:T(8,128)}`, or `T(8,128)(2,1)` -> `T(4,128)`), or in transposed order. Layouts come from the HLO
    text (trace metadata or dump); GPU captures without HLO (e.g. MI300) are recognised by name
    (`*transpose_fusion*`, `copy*fusion`) and tied to the convolutions and matmuls they sit around. Each op
    comes with where it is from (JAX op name, source line).
Why it costs time:
    A relayout reads and writes the whole array through HBM and does no arithmetic; it exists because a
    producer and a consumer (or the caller and the program) disagree on the layout.
How the cost is estimated:
    Cost = measured seconds per step of those ops (predicted from their bytes without a trace, confidence
    low). Savings = the cost: a layout XLA may choose, or a producer that writes the consumer's layout,
    removes the op. Confidence high when the layouts were read from HLO, medium when matched by name. A move
    the consumer's semantics need is not layout-only and is left out (listed apart): one feeding an FFT along
    the moved axis, the split / concat dimension of an all-to-all, or a matmul contracting the moved dimension
    of an array that is also read in another order (analyzer/hlo/layout_needs.py).
Fix:
    Let XLA choose the layouts of program inputs (`jax.jit(f, in_shardings=Format(Layout.AUTO))` with
    `from jax.experimental.layout import Format, Layout`, then place arguments in `compiled.input_formats`);
    reorder einsum dimensions so producer and consumer agree; on TPU pad dimensions to multiples of the
    chip's MXU width (128 on v4 / v5e / v5p, 256 on v6e / TPU7x); for convolutions on GPU keep activations
    channels-last (NHWC / NDHWC dimension numbers).
Details:
    layout_s_per_step (s): seconds per step of the layout-only ops (the finding's cost)
    convolution_s_per_step (s): seconds per step of the convolutions and matmuls they sit around
    recognised_by (text): `hlo` (layouts read from HLO) or `name` (matched by op name only)
    times_are (text): `measured` or `predicted`
    convolutions (list): per neighbouring convolution: `op`, `s_per_step`
    ops (list): per layout-only op: `op`, `s_per_step`, `change` (`layout`, `tiling`, `transpose`),
        `operand_layout`, `result_layout`, `tf_op`, `source`, `relative_to_convolution`
    by_origin (list): seconds per step by source line or JAX op: `origin`, `s_per_step`
    dump_layout_changes (list): up to 50 layout-changing copies / transposes of the dump, fused ones included
    needed_s_per_step (s): seconds per step of the moves a consumer needs (not counted)
    needed_ops (list): per such op: `op`, `s_per_step`, `needed_by` (`fft`, `all-to-all` or `dot`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..units import format_number
from . import framework_levers as fwl
from .base import (
    OpEvidence,
    Priced,
    Target,
    compose,
    float_or_none,
    format_bytes,
    format_percent,
    format_seconds,
    op_claims,
    time_column,
    times_are,
)
from .levers import name
from .levers import target as advice_for

RULE_ID = "retiling-copy"
PRECEDENCE = 1  # the op should not exist at all (a layout change nobody asked for)
_MOVE_WORDS = {"copy", "transpose", "bitcast", "reshape", "fusion", "wrapped", "input", "loop", "kd"}


@dataclass(frozen=True)
class Numbers:
    layout_s_per_step: float  # s
    convolution_s_per_step: float  # s
    recognised_by: str
    times_are: str
    convolutions: list
    ops: list  # per layout-only op, most time first
    by_origin: list  # most time first
    dump_layout_changes: list
    needed_s_per_step: float  # s
    needed_ops: list
    priced: Priced
    top_convolutions: tuple = field(metadata={"detail": False})  # the three slowest convolutions / matmuls
    dump_count: int = field(metadata={"detail": False})  # layout changes in the dump (the details keep 50)
    dump_example: dict | None = field(metadata={"detail": False})  # the largest of them, without a trace
    around_convolutions: bool = field(metadata={"detail": False})  # a convolution among the neighbours


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def _name_is_relayout(name: str) -> bool:
    """Op names XLA gives pure data-movement fusions: 'input_transpose_fusion', 'copy_bitcast_fusion.3'."""
    words = {w for w in re.split(r"[^a-z]+", name.lower()) if w}
    return bool(words) and words <= _MOVE_WORDS and bool(words & {"copy", "transpose"})


def relayout_ops(analysis, needed: bool = False) -> pd.DataFrame:
    """The step's layout-only ops: op key, change kind, how it was recognised, time, predicted, origin.

    From the ops table's HLO facts: a copy, transpose or data-movement fusion whose layout changes; a
    fusion whose body is unknown (trace text only) counts when its name says relayout. Ops without any
    HLO: by name alone. A relayout its consumer's semantics need (``layout_needed_by``: an FFT along the moved
    axis, an all-to-all's split / concat dimension, a dot's contracting dimension) is not layout-only: left
    out (``needed``: only those, with ``needed_by``)."""
    ops = analysis.ops
    ops = ops[ops["in_step"] & ~ops["opcode"].isin(["copy-start", "copy-done"])
              & (ops["layout_needed_by"].notna() if needed else ops["layout_needed_by"].isna())]
    named = ops["op_name"].astype(str).map(_name_is_relayout).astype(bool)
    body_unknown = (ops["opcode"] == "fusion") & ops["fused_opcodes"].isna()
    by_hlo = ops["layout_change"].notna() & (ops["is_data_movement"] | (body_unknown & named))
    by_name = ops["opcode"].isna() & named
    out = ops.loc[by_hlo | by_name, ["op_id", "module", "program_id", "op_name", "operand_layout", "result_layout",
                                     "tf_op", "source", "measured_s_per_step", "predicted_s_per_step",
                                     "bytes_accessed"]].copy()
    name_change = np.where(out["op_name"].astype(str).str.contains("transpose", regex=False), "transpose", "relayout")
    hlo = by_hlo[out.index].to_numpy()
    out["change"] = np.where(hlo, ops.loc[out.index, "layout_change"].to_numpy(), name_change)
    out["recognised_by"] = np.where(hlo, "hlo", "name")
    out["time_s"] = out[time_column(analysis)].fillna(0.0)
    out["needed_by"] = ops.loc[out.index, "layout_needed_by"].astype(object).to_numpy()
    return out.sort_values("time_s", ascending=False, kind="stable")


def _neighbours(analysis, found: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Convolutions / matmuls of the step (time per step) and, per layout op (by row label of ``found``),
    whether it runs before or after the first of them in its device-step."""
    ops = analysis.ops[analysis.ops["in_step"]]
    is_conv = ops["category"].astype(str).str.contains("convolution") | ops["opcode"].isin(["convolution", "dot"]) \
        | ops["is_matmul"]
    convs = ops[is_conv & ~ops.index.isin(found.index)]
    where: dict = {}
    if analysis.measured and len(convs) and len(found) and len(analysis.step_ops):
        where = _before_first_conv(analysis.step_ops, convs["op_id"], found)
    return convs, where


def _before_first_conv(ev: pd.DataFrame, conv_ids: pd.Series, found: pd.DataFrame) -> dict:
    """Per layout op (row label of ``found``): 'before' when most of its events start before the first
    convolution / matmul of their device-step, else 'after'. Integer codes over the events, no groupby; only
    the events of those ops are read past their op id."""
    op_id = ev["op_id"].to_numpy(np.int64)
    n_ids = int(max(op_id.max(), conv_ids.max(), found["op_id"].max())) + 1
    is_conv = np.zeros(n_ids, bool)
    is_conv[conv_ids[conv_ids >= 0].to_numpy(np.int64)] = True
    label_of_id = pd.Series(found.index, index=found["op_id"]).loc[lambda s: s.index >= 0]
    label_of_id = label_of_id[~label_of_id.index.duplicated()]
    code_of_id = np.full(n_ids, -1, np.int64)
    codes, labels = pd.factorize(label_of_id.to_numpy(), sort=True)
    code_of_id[label_of_id.index.to_numpy(np.int64)] = codes
    # One lookup per event (ids are few, events millions), then the columns of the events read only.
    read = np.flatnonzero(np.take(is_conv | (code_of_id >= 0), op_id))
    if not len(read):
        return {}
    op_id = np.take(op_id, read)
    device, step, start = (np.take(ev[c].to_numpy(np.int64), read) for c in ("device", "step", "start_ps"))
    device_step = device * (int(step.max()) + 1) + step
    conv = is_conv[op_id]
    first = np.full(int(device_step.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, device_step[conv], start[conv])
    has_conv = np.zeros(len(first), bool)
    has_conv[device_step[conv]] = True  # a device-step without one: no event of it counts as before
    code = code_of_id[op_id]
    mine = code >= 0
    count = np.bincount(code[mine], minlength=len(labels))
    ds = device_step[mine]
    before = np.bincount(code[mine], weights=has_conv[ds] & (start[mine] < first[ds]), minlength=len(labels))
    return {label: "before" if b / c >= 0.5 else "after" for label, b, c in zip(labels, before, count) if c}


def _layouts(r) -> str:
    ok = isinstance(r.operand_layout, str) and isinstance(r.result_layout, str)
    return f" {r.operand_layout} -> {r.result_layout}" if ok else ""


def _dump_example(in_dump: pd.DataFrame) -> dict | None:
    """The dump's largest layout change: what the evidence shows when no trace times the ops."""
    if not len(in_dump):
        return None
    first = in_dump.sort_values("result_bytes", ascending=False).iloc[0]
    return {"name": first["name"], "operand_layout": first["operand_layout"],
            "result_layout": first["result_layout"], "result_bytes": first["result_bytes"],
            "origin": str(first["op_name"] or "unknown").replace("\\'", "'")}


def _text(v) -> str | None:
    return v if isinstance(v, str) else None


def measure(analysis) -> Numbers | None:
    if analysis.ops.empty:
        return None
    found, needed = relayout_ops(analysis), relayout_ops(analysis, needed=True)
    in_dump = analysis.dump.layout_changes
    time_s = float(found["time_s"].sum()) if len(found) else 0.0
    if time_s <= 0 and (analysis.measured or in_dump.empty):
        return None
    col = time_column(analysis)
    convs, where = _neighbours(analysis, found)
    by_name = len(found) > 0 and bool((found["recognised_by"] == "name").all())
    origin = found.assign(origin=found["source"].fillna(found["tf_op"]).fillna("unknown"))
    by_origin = origin.groupby("origin", sort=False)["time_s"].sum().sort_values(ascending=False)
    priced = Priced(
        time_s_per_step=time_s, est_savings_s_per_step=time_s, step_s=analysis.step_s,
        confidence="low" if not analysis.measured else ("medium" if by_name else "high"),
        ops=tuple(OpEvidence(str(r.op_name), float(r.time_s), float_or_none(r.predicted_s_per_step),
                             r.change + _layouts(r) + (f", {where[r.Index]} the convolution" if r.Index in where
                                                       else "")) for r in found.head(10).itertuples()),
        claims=op_claims(found, found["time_s"]), lever="removing the layout-only ops")
    return Numbers(
        layout_s_per_step=time_s, convolution_s_per_step=float(convs[col].fillna(0.0).sum()),
        recognised_by="name" if by_name else "hlo", times_are=times_are(analysis),
        convolutions=[{"op": str(n), "s_per_step": float(t)} for n, t in zip(convs["op_name"], convs[col].fillna(0.0))],
        ops=[{"op": str(r.op_name), "s_per_step": float(r.time_s), "change": r.change,
              "operand_layout": _text(r.operand_layout), "result_layout": _text(r.result_layout),
              "tf_op": _text(r.tf_op), "source": _text(r.source), "relative_to_convolution": where.get(r.Index)}
             for r in found.itertuples()],
        by_origin=[{"origin": str(k), "s_per_step": float(v)} for k, v in by_origin.items()],
        dump_layout_changes=in_dump.head(50).to_dict("records") if len(in_dump) else [],
        needed_s_per_step=float(needed["time_s"].sum()),
        needed_ops=[{"op": str(r.op_name), "s_per_step": float(r.time_s), "needed_by": str(r.needed_by)}
                    for r in needed.itertuples()], priced=priced,
        top_convolutions=tuple(convs.sort_values(col, ascending=False)["op_name"].astype(str).head(3)),
        dump_count=len(in_dump), dump_example=None if analysis.measured else _dump_example(in_dump),
        around_convolutions=bool(convs["category"].astype(str).str.contains("convolution").any()))


def title(n: Numbers) -> str:
    return f"Layout-only copies and transposes: {format_seconds(n.layout_s_per_step)} per step"


def evidence(n: Numbers) -> str:
    time_s, conv_s, step_s = n.layout_s_per_step, n.convolution_s_per_step, n.priced.step_s
    share = time_s / step_s if step_s > 0 else np.nan
    names = ", ".join(o["op"] for o in n.ops[:4]) + (", ..." if len(n.ops) > 4 else "")
    text = (f"{len(n.ops)} layout-only ops ({names}) take {format_seconds(time_s)} per step "
            f"({format_percent(share)} of the {format_seconds(step_s)} step)" if len(n.ops)
            else "No scheduled op is layout-only")
    if conv_s > 0 and time_s > 0:
        text += (f", {format_number(time_s / conv_s)}x the {format_seconds(conv_s)} of the convolutions / matmuls they "
                 f"surround ({', '.join(n.top_convolutions)})")
    if n.needed_ops:
        by = sorted({o["needed_by"] for o in n.needed_ops})
        text += (f"; {len(n.needed_ops)} more ({format_seconds(n.needed_s_per_step)} per step) are not counted: "
                 f"their consumer needs the move ({', '.join(_NEEDED[b] for b in by)})")
    if n.by_origin and n.by_origin[0]["origin"] != "unknown":
        text += f"; most from {n.by_origin[0]['origin']} ({format_seconds(n.by_origin[0]['s_per_step'])})"
    if n.times_are != "measured":
        text += " (no trace: times are predicted from the bytes, not measured)"
        if n.dump_example is not None:
            e = n.dump_example
            text += (f". The dump holds {n.dump_count} layout-changing copies / transposes, fused ones "
                     f"included (inside a fusion their time is the fusion's), e.g. {e['name']} "
                     f"{e['operand_layout']} -> {e['result_layout']} "
                     f"({format_bytes(e['result_bytes'])}) from {e['origin']}")
    return text + "."


_NEEDED = {"fft": "an FFT along the moved axis", "all-to-all": "an all-to-all's split / concat dimension",
           "dot": "a matmul contracting the moved dimension of an array also read in another order"}


def _padding(target: Target) -> str:
    """The MXU padding clause, for TPUs only: the chip's own MXU width (no TPU numbers in GPU advice)."""
    if advice_for(target.platform, target.chip) != "tpu":
        return ""
    chip = target.chip
    mxu = getattr(chip, "mxu_dim", None)
    size = (f"{mxu} (the {chip.name} MXU is {mxu}x{mxu})" if mxu
            else "128 on TPU v4 / v5e / v5p, 256 on v6e / TPU7x")
    return f", and pad dimensions to multiples of {size} so tiles need no retiling"


def fix(n: Numbers, target: Target) -> str:
    fw = fwl.other(target)
    if fw:
        conv = (" Around convolutions, keep activations channels-last (NHWC / NDHWC) from the input pipeline on, "
                "as the convolution library wants them." if target.platform == "gpu" and n.around_convolutions
                else "")
        return fwl.layouts(fw) + _padding(target) + "." + conv
    text = ("Let XLA pick the layouts of the program's inputs instead of forcing the default: "
            f"from {name('jax.experimental.layout')} import Format, Layout; "
            f"{name('jax.jit')}(f, {name('in_shardings')}=Format(Layout.AUTO)) (then put the arguments in "
            f"compiled.{name('input_formats')} once, outside the step). Inside the program, reorder einsum "
            "dimensions so the producer writes what the consumer reads (contracting dimension minor-most on both "
            "sides)" + _padding(target) + ".")
    if target.platform == "gpu" and n.around_convolutions:
        text = ("The convolution library wants another layout than the arrays have, so XLA transposes around it: "
                f"keep activations channels-last ({name('jax.lax.conv_general_dilated')} with "
                f"{name('dimension_numbers')} such as "
                "('NDHWC', 'DHWIO', 'NDHWC') or ('NHWC', 'HWIO', 'NHWC')) from the input pipeline on, so no "
                "transpose is needed before or after the convolution. " + text)
    return text

"""Matmuls whose dimensions are not multiples of the MXU (TPU) or tensor-core tile (GPU): padded work.

What it finds:
    In-step dots and convolutions (alone or fused) whose contracted size K or output columns N are not
    multiples of the matrix unit: 128 on TPU v2-v5p, 256 on v6e and TPU7x (the chip table's `mxu_dim`; a
    dimension padded only to 128 there runs at half rate), and on GPUs the tensor-core multiples of the
    dtype (cuBLAS "Tensor Core usage": 8 elements for 16-bit types, 16 for 8-bit, 4 for TF32). One finding
    listing every dot whose padded share of the MXU work is at least 10 %.
Why it costs time:
    The matrix unit works on whole tiles: K and N are padded up to the next multiple, and the padding is
    multiplied like real data. A K=200, N=72 dot on a 256x256 MXU does 256x256 tiles of work for 200x72 of
    useful products: 78 % of its MXU time is padding.
How the cost is estimated:
    Per dot, padded fraction = 1 - K*N / (ceil(K/m)*m * ceil(N/m)*m) with m the multiple (M, the streamed
    rows, is not padded to the array). Cost = the padded FLOPs' time at the dtype's peak per step:
    FLOPs / peak * fraction / (1 - fraction) * occurrences per step. Savings = the roofline difference
    max(padded compute, HBM time) - max(unpadded compute, HBM time): zero for a dot that stays HBM-bound
    either way; with a trace, capped at the measured time times the fraction. FLOPs, dims and bytes come
    from the HLO (or the trace); peaks and bandwidth from the chip table.
Fix:
    Make the model dims multiples of the unit: MaxText `base_emb_dim`, `base_mlp_dim`, `head_dim` and
    `vocab_size` (pad the vocabulary) — MaxText configs/base.yml; in other code the same widths. Keep the
    rows (`per_device_batch_size` x `max_target_length`) a multiple of 128, else 8.
Details:
    multiple (count): the multiple K and N are padded to
    multiple_source (text): where the multiple comes from (the chip's MXU edge or the GPU dtype rule)
    padded_flops_fraction (fraction): padded share of the flagged dots' MXU work, all of them together
    padded_s_per_step (s): seconds per step the padded FLOPs take at peak (the finding's cost)
    dots (list): per flagged dot: op, m, n, k, batch, dtype, padded_fraction, padded_s_per_step, savings_s_per_step
    times_are (text): `measured` (savings capped by the trace) or `predicted`
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import framework_levers as fwl
from .base import (
    OpEvidence,
    Priced,
    Target,
    compose,
    format_percent,
    format_seconds,
    is_nan,
    op_claims,
    seconds_per_step,
    times_are,
)
from .levers import name

RULE_ID = "mxu-padding"
PRECEDENCE = 7  # a matmul's padded share; a recomputed dot's time belongs to remat-overhead first
MIN_FRACTION = 0.10
# cuBLAS Tensor Core usage: dimensions multiples of 16 bytes of elements (docs.nvidia.com/cuda/cublas,
# "Tensor Core Usage"): 8 for 16-bit types, 16 for 8-bit, 4 for TF32.
_GPU_MULTIPLE = {"f16": 8, "bf16": 8, "f32": 4, "s8": 16, "u8": 16}
_GPU_MULTIPLE_8BIT = 16


@dataclass(frozen=True)
class Numbers:
    multiple: int  # count
    multiple_source: str
    padded_flops_fraction: float  # fraction
    padded_s_per_step: float  # s
    dots: list  # per flagged dot, largest padded time first (the first 50)
    times_are: str
    priced: Priced
    flagged: int = field(metadata={"detail": False})  # dots at or above MIN_FRACTION
    saves_s_per_step: float = field(metadata={"detail": False})  # all flagged dots together
    shown: tuple = field(metadata={"detail": False})  # (op, K, N, padded fraction) of the first five
    largest_rows: float = field(metadata={"detail": False})  # M of the dot with the most padded time


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def _multiples(analysis, dtypes: pd.Series) -> tuple[pd.Series, str]:
    chip = analysis.chip
    if chip.mxu_dim:
        return pd.Series(float(chip.mxu_dim), index=dtypes.index), \
            f"{chip.name} MXU {chip.mxu_dim}x{chip.mxu_dim} (chip table mxu_dim)"
    if analysis.platform == "gpu":
        mult = dtypes.astype(str).map(lambda d: _GPU_MULTIPLE.get(d, _GPU_MULTIPLE_8BIT if d.startswith("f8")
                                                                  else np.nan)).astype(float)
        return mult, "GPU tensor cores: 8 elements (16-bit), 16 (8-bit), 4 (TF32) per cuBLAS"
    return pd.Series(np.nan, index=dtypes.index), ""


def _padded_dots(analysis) -> tuple[pd.DataFrame, str]:
    """In-step dots with known K and N whose padded share is at least MIN_FRACTION, with that ``fraction``."""
    ops = analysis.ops
    dots = ops[ops["in_step"] & ops["matmul_k"].notna() & ops["matmul_n"].notna() & (ops["flops"] > 0)].copy()
    if dots.empty:
        return dots, ""
    dots["multiple"], source = _multiples(analysis, dots["dtype"])
    dots = dots[dots["multiple"] > 0]
    m, k, n = dots["multiple"], dots["matmul_k"], dots["matmul_n"]
    dots["fraction"] = 1.0 - k * n / (np.ceil(k / m) * m * np.ceil(n / m) * m)
    return dots[dots["fraction"] >= MIN_FRACTION], source


def measure(analysis) -> Numbers | None:
    if analysis.ops.empty:
        return None
    dots, source = _padded_dots(analysis)
    if dots.empty:
        return None
    chip = analysis.chip
    peak = dots["dtype"].astype(str).map(lambda d: chip.peak_flops_per_s(d)).astype(float)
    occ = dots["occurrences_per_step"].fillna(1.0)
    t_flop = dots["flops"] / peak
    t_padded = t_flop / (1.0 - dots["fraction"])
    t_mem = dots["hbm_bytes"].fillna(0.0) / chip.hbm_bytes_per_s
    dots["padded_s"] = (t_padded - t_flop) * occ
    savings = (np.maximum(t_padded, t_mem) - np.maximum(t_flop, t_mem)) * occ
    if analysis.measured:
        savings = np.minimum(savings, dots["measured_s_per_step"].fillna(0.0) * dots["fraction"])
    dots["op_s"] = seconds_per_step(dots, analysis)
    dots["savings_s"] = np.minimum(savings, dots["op_s"])  # never more than the dot's own time
    dots = dots.sort_values("padded_s", ascending=False)

    padded_s, savings_s = float(dots["padded_s"].sum()), float(dots["savings_s"].sum())
    useful = float((t_flop * occ).sum())
    fraction = padded_s / (padded_s + useful) if padded_s + useful > 0 else 0.0
    priced = Priced(
        time_s_per_step=padded_s, est_savings_s_per_step=savings_s, step_s=analysis.step_s,
        confidence="medium" if analysis.measured else "low",
        ops=tuple(OpEvidence(str(r.op_name), float(r.measured_s_per_step) if analysis.measured
                             and not is_nan(r.measured_s_per_step) else float(r.padded_s),
                             None if is_nan(r.predicted_s_per_step) else float(r.predicted_s_per_step),
                             f"K={r.matmul_k:.0f} N={r.matmul_n:.0f} padded {r.fraction:.1%}")
                  for r in dots.head(10).itertuples()),
        claims=op_claims(dots, dots["op_s"]))
    return Numbers(
        multiple=int(dots["multiple"].iloc[0]), multiple_source=source, padded_flops_fraction=fraction,
        padded_s_per_step=padded_s,
        dots=[{"op": str(r.op_name), "m": float(r.matmul_m), "n": float(r.matmul_n), "k": float(r.matmul_k),
               "batch": float(r.matmul_batch), "dtype": str(r.dtype), "padded_fraction": float(r.fraction),
               "padded_s_per_step": float(r.padded_s), "savings_s_per_step": float(r.savings_s)}
              for r in dots.head(50).itertuples()],
        times_are=times_are(analysis), priced=priced, flagged=len(dots), saves_s_per_step=savings_s,
        shown=tuple((str(r.op_name), float(r.matmul_k), float(r.matmul_n), float(r.fraction))
                    for r in dots.head(5).itertuples()),
        largest_rows=float(dots["matmul_m"].iloc[0]))


def title(n: Numbers) -> str:
    pads = "matmul pads" if n.flagged == 1 else "matmuls pad"
    return (f"{n.flagged} {pads} to the {n.multiple}-wide matrix unit: {n.padded_flops_fraction:.0%} of their "
            "MXU work is padding")


def evidence(n: Numbers) -> str:
    pads = "matmul pads" if n.flagged == 1 else "matmuls pad"
    shown = ", ".join(f"{op} (K={k:.0f}, N={nn:.0f}: {f:.0%})" for op, k, nn, f in n.shown)
    more = f" and {n.flagged - 5} more" if n.flagged > 5 else ""
    measured = n.times_are == "measured"
    hbm_bound = n.saves_s_per_step < 0.5 * n.padded_s_per_step
    return (f"{n.flagged} {pads} K or N to multiples of {n.multiple} ({n.multiple_source}): {shown}{more}. "
            f"{format_percent(n.padded_flops_fraction)} of the MXU work is padding, "
            f"{format_seconds(n.padded_s_per_step)} per step at the chip table's peak; aligning them saves "
            f"{format_seconds(n.saves_s_per_step)} per step by the roofline (HLO dims and FLOPs"
            + (", trace times)." if measured else "; no trace: predicted, not measured).")
            + (" They are mostly HBM-bound at this size, so the padding costs little time now; it "
               "will once they grow compute-bound." if hbm_bound else ""))


def fix(n: Numbers, target: Target) -> str:
    rows = n.largest_rows
    fw = fwl.other(target)
    if fw:
        return (f"Make the matmul widths multiples of {n.multiple}: {fwl.widths(fw, n.multiple)}."
                + ("" if rows % 128 == 0 else f" The largest one streams {rows:.0f} rows: keep {fwl.batch(fw)} x "
                   "the sequence length a multiple of 128 (else 8)."))
    batch_text = ("" if rows % 128 == 0 else
                  f" The largest one streams {rows:.0f} rows: keep {name('per_device_batch_size')} x "
                  f"{name('max_target_length')} a multiple of 128 (else 8).")
    return (f"Make the matmul widths multiples of {n.multiple}: in MaxText {name('base_emb_dim')}, "
            f"{name('base_mlp_dim')}, {name('head_dim')} and {name('vocab_size')} (pad the vocabulary up to a "
            f"multiple of {n.multiple}); in your own model the embedding, MLP, head and vocabulary widths."
            + batch_text)

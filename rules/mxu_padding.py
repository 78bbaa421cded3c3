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

import numpy as np
import pandas as pd

from .base import OpEvidence, format_percent, format_seconds, make_finding, op_claims
from .levers import name

RULE_ID = "mxu-padding"
MIN_FRACTION = 0.10
# cuBLAS Tensor Core usage: dimensions multiples of 16 bytes of elements (docs.nvidia.com/cuda/cublas,
# "Tensor Core Usage"): 8 for 16-bit types, 16 for 8-bit, 4 for TF32.
_GPU_MULTIPLE = {"f16": 8, "bf16": 8, "f32": 4, "s8": 16, "u8": 16}
_GPU_MULTIPLE_8BIT = 16


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


def check(analysis) -> list:
    ops = analysis.ops
    if ops.empty:
        return []
    dots = ops[ops["in_step"] & ops["matmul_k"].notna() & ops["matmul_n"].notna() & (ops["flops"] > 0)].copy()
    if dots.empty:
        return []
    mult, source = _multiples(analysis, dots["dtype"])
    dots["multiple"] = mult
    dots = dots[dots["multiple"] > 0]
    if dots.empty:
        return []
    m, k, n = dots["multiple"], dots["matmul_k"], dots["matmul_n"]
    dots["fraction"] = 1.0 - k * n / (np.ceil(k / m) * m * np.ceil(n / m) * m)
    dots = dots[dots["fraction"] >= MIN_FRACTION]
    if dots.empty:
        return []
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
    op_s = dots["measured_s_per_step" if analysis.measured else "predicted_s_per_step"].fillna(0.0)
    dots["op_s"] = op_s
    dots["savings_s"] = np.minimum(savings, op_s)  # never more than the dot's own time
    dots = dots.sort_values("padded_s", ascending=False)

    padded_s, savings_s = float(dots["padded_s"].sum()), float(dots["savings_s"].sum())
    useful = float((t_flop * occ).sum())
    fraction = padded_s / (padded_s + useful) if padded_s + useful > 0 else 0.0
    multiple = int(dots["multiple"].iloc[0])
    top = dots.iloc[0]
    shown = ", ".join(f"{r.op_name} (K={r.matmul_k:.0f}, N={r.matmul_n:.0f}: {r.fraction:.0%})"
                      for r in dots.head(5).itertuples())
    more = f" and {len(dots) - 5} more" if len(dots) > 5 else ""
    hbm_bound = savings_s < 0.5 * padded_s
    evidence = (f"{len(dots)} {'matmul pads' if len(dots) == 1 else 'matmuls pad'} K or N to multiples of {multiple} ({source}): {shown}{more}. "
                f"{format_percent(fraction)} of the MXU work is padding, "
                f"{format_seconds(padded_s)} per step at the chip table's peak; aligning them saves "
                f"{format_seconds(savings_s)} per step by the roofline (HLO dims and FLOPs"
                + (", trace times)." if analysis.measured else "; no trace: predicted, not measured).")
                + (" They are mostly HBM-bound at this size, so the padding costs little time now; it "
                   "will once they grow compute-bound." if hbm_bound else ""))
    rows = top.matmul_m
    batch_text = ("" if rows % 128 == 0 else
                  f" The largest one streams {rows:.0f} rows: keep {name('per_device_batch_size')} x "
                  f"{name('max_target_length')} "
                  "a multiple of 128 (else 8).")
    fix = (f"Make the matmul widths multiples of {multiple}: in MaxText {name('base_emb_dim')}, "
           f"{name('base_mlp_dim')}, {name('head_dim')} and {name('vocab_size')} (pad the vocabulary up to a "
           f"multiple of {multiple}); in your own model the embedding, "
           f"MLP, head and vocabulary widths." + batch_text)
    return [make_finding(
        rule=RULE_ID,
        title=f"{len(dots)} {'matmul pads' if len(dots) == 1 else 'matmuls pad'} to the {multiple}-wide matrix unit: {fraction:.0%} of their MXU work is padding",
        time_s_per_step=padded_s, est_savings_s_per_step=savings_s, step_s=analysis.step_s,
        confidence="medium" if analysis.measured else "low",
        ops=tuple(OpEvidence(str(r.op_name), float(r.measured_s_per_step) if analysis.measured
                             and r.measured_s_per_step == r.measured_s_per_step else float(r.padded_s),
                             float(r.predicted_s_per_step) if r.predicted_s_per_step == r.predicted_s_per_step
                             else None, f"K={r.matmul_k:.0f} N={r.matmul_n:.0f} padded {r.fraction:.1%}")
                  for r in dots.head(10).itertuples()),
        evidence=evidence, fix=fix, claims=op_claims(dots, dots["op_s"]),
        details={"multiple": multiple, "multiple_source": source, "padded_flops_fraction": fraction,
                 "padded_s_per_step": padded_s,
                 "dots": [{"op": str(r.op_name), "m": float(r.matmul_m), "n": float(r.matmul_n),
                           "k": float(r.matmul_k), "batch": float(r.matmul_batch), "dtype": str(r.dtype),
                           "padded_fraction": float(r.fraction), "padded_s_per_step": float(r.padded_s),
                           "savings_s_per_step": float(r.savings_s)} for r in dots.head(50).itertuples()],
                 "times_are": "measured" if analysis.measured else "predicted"})]

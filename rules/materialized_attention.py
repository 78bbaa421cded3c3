"""Attention whose score matrix is written to HBM instead of staying inside a fused (flash) kernel.

What it finds:
    In-step chains of a batched matmul (the scores, [batch, heads, q_len, kv_len]) -> softmax ops (an
    exponential and a reduction among them) -> a matmul reading the result (the context), as the analyzer
    marks them (`attention_role`, `attention_scores_op`). One finding listing every chain.
Why it costs time:
    Unfused attention writes the whole score matrix to HBM, reads it back for the max, the exponential, the
    sum and the division, and reads it again for the second matmul: traffic that grows with q_len x kv_len.
    A flash kernel (Splash on TPU, cuDNN flash attention on GPU) keeps each score block on chip.
How the cost is estimated:
    Per chain: the softmax ops' time per step (measured with a trace, else their roofline prediction) plus
    the score matrix written by the scores matmul and read by the context matmul(s) at the chip's HBM
    bandwidth (result bytes from the HLO, padded size, times occurrences per step). Savings = that cost, an
    upper bound: the fused kernel still computes the exponentials. On a CPU no fused kernel runs (Splash is
    TPU's, cuDNN GPU's): the saving is 0 and the finding a note.
Fix:
    TPU: MaxText `attention='flash'` (the Splash kernel; Tokamax also ships Splash attention). GPU: MaxText
    `attention='cudnn_flash_te'`, or `jax.nn.dot_product_attention(..., implementation='cudnn')` in your
    own model. Names checked in MaxText configs/base.yml and the JAX API docs. On TPU, then tune the
    kernel's block sizes, which scoped VMEM bounds: `xla_tpu_scoped_vmem_limit_kib` in `LIBTPU_INIT_ARGS`
    (MaxText's dense 98304 KiB where the chip has it, else the whole VMEM: 65536 on TPU7x as its recipes set).
    PyTorch/XLA on TPU: `torch_xla.experimental.custom_kernel.flash_attention`; TransformerEngine on GPU:
    its `DotProductAttention`; elsewhere a fused attention kernel, in words.
Details:
    chains (count): score -> softmax -> context chains found
    score_bytes (bytes): bytes of the largest score matrix (one occurrence)
    score_bytes_per_step (bytes): score matrices written per step, all chains
    softmax_s_per_step (s): time per step of the ops between the matmuls
    score_hbm_s_per_step (s): HBM time per step of writing the scores and reading them into the context matmul
    scores (list): per chain: op, score_bytes, dtype, softmax_ops, cost_s_per_step
    times_are (text): `measured` or `predicted`
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import framework_levers as fwl
from .base import (
    OpEvidence,
    Priced,
    Target,
    compose,
    float_or_none,
    format_bytes,
    format_seconds,
    is_nan,
    op_claims,
    seconds_per_step,
    time_column,
    times_are,
)
from .levers import name, scoped_vmem
from .levers import target as advice_target

RULE_ID = "materialized-attention"
PRECEDENCE = 8  # the score chain's ops
MIN_SCORE_BYTES = 1 << 20  # a score matrix under 1 MiB fits on chip anyway


@dataclass(frozen=True)
class Numbers:
    chains: int  # count
    score_bytes: float  # bytes, the largest matrix
    score_bytes_per_step: float  # bytes
    softmax_s_per_step: float  # s
    score_hbm_s_per_step: float  # s
    scores: list  # per chain, costliest first (the first 50)
    times_are: str
    priced: Priced
    hbm_bytes_per_s: float = field(metadata={"detail": False})  # the chip table's bandwidth the scores move at
    kernel_runs: bool = field(metadata={"detail": False})  # a fused kernel runs on this platform (not a CPU)


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def _chains(analysis, chain_ops, scores) -> list[dict]:
    """One row per score matrix: its chain's softmax time and score traffic, costliest first."""
    time_col = time_column(analysis)
    bw = analysis.chip.hbm_bytes_per_s
    rows = []
    for head in scores.itertuples():
        members = chain_ops[chain_ops["attention_scores_op"] == head.op_name]
        softmax = members[members["attention_role"] == "softmax"]
        contexts = members[members["attention_role"] == "context"]
        occ = 1.0 if is_nan(head.occurrences_per_step) else head.occurrences_per_step
        softmax_s = float(np.nansum(softmax[time_col]))
        score_hbm_s = head.result_bytes * occ * (1 + max(len(contexts), 1)) / bw
        rows.append(dict(op=str(head.op_name), score_bytes=float(head.result_bytes), dtype=str(head.dtype),
                         softmax_ops=int(len(softmax)), occ=float(occ), softmax_s=softmax_s,
                         score_hbm_s=float(score_hbm_s), cost=softmax_s + float(score_hbm_s),
                         predicted=head.predicted_s_per_step, measured_s=head.measured_s_per_step))
    rows.sort(key=lambda r: -r["cost"])
    return rows


def measure(analysis) -> Numbers | None:
    ops = analysis.ops
    if ops.empty:
        return None
    chain_ops = ops[ops["in_step"] & ops["attention_role"].notna()]
    scores = chain_ops[(chain_ops["attention_role"] == "scores") & (chain_ops["result_bytes"] >= MIN_SCORE_BYTES)]
    if scores.empty:
        return None
    measured = analysis.measured
    rows = _chains(analysis, chain_ops, scores)
    cost = sum(r["cost"] for r in rows)
    kernel_runs = advice_target(analysis.platform, analysis.chip) != "cpu"  # no flash kernel runs on a CPU
    priced = Priced(
        time_s_per_step=cost, est_savings_s_per_step=cost if kernel_runs else 0.0, step_s=analysis.step_s,
        confidence="medium" if measured else "low",
        ops=tuple(OpEvidence(r["op"], float(r["measured_s"]) if measured and not is_nan(r["measured_s"])
                             else r["cost"], float_or_none(r["predicted"]),
                             f"scores {format_bytes(r['score_bytes'])}") for r in rows[:10]),
        claims=op_claims(chain_ops, seconds_per_step(chain_ops, analysis)))
    return Numbers(
        chains=len(rows), score_bytes=max(r["score_bytes"] for r in rows),
        score_bytes_per_step=sum(r["score_bytes"] * r["occ"] for r in rows),
        softmax_s_per_step=sum(r["softmax_s"] for r in rows), score_hbm_s_per_step=sum(r["score_hbm_s"] for r in rows),
        scores=[{"op": r["op"], "score_bytes": r["score_bytes"], "dtype": r["dtype"],
                 "softmax_ops": r["softmax_ops"], "cost_s_per_step": r["cost"]} for r in rows[:50]],
        times_are=times_are(analysis), priced=priced, hbm_bytes_per_s=analysis.chip.hbm_bytes_per_s,
        kernel_runs=kernel_runs)


def title(n: Numbers) -> str:
    return (f"Attention scores materialized in HBM ({format_bytes(n.score_bytes)} per matrix): "
            f"{format_seconds(n.priced.time_s_per_step)} per step")


def evidence(n: Numbers) -> str:
    top = n.scores[0]
    return (f"{n.chains} attention score {'matrix goes' if n.chains == 1 else 'matrices go'} through HBM: "
            f"{top['op']} writes {format_bytes(top['score_bytes'])} of {top['dtype']} scores that "
            f"{top['softmax_ops']} softmax ops read and rewrite before the second matmul reads them. The "
            f"softmax ops take {format_seconds(n.softmax_s_per_step)} per step "
            + ("(measured)" if n.times_are == "measured" else "(roofline prediction; no trace)")
            + f" and moving the scores in and out of the matmuls {format_seconds(n.score_hbm_s_per_step)} at "
            f"{format_bytes(n.hbm_bytes_per_s)}/s (HLO result bytes, chip table bandwidth).")


def fix(n: Numbers, target: Target) -> str:
    tpu = bool(target.chip.mxu_dim)
    gpu = target.platform == "gpu" or bool(target.chip.compute_capability)
    tpu_fix = (f"Use a fused flash kernel: MaxText {name('attention')}='flash' (the Splash kernel on TPU; Tokamax "
               "ships Splash attention too)")
    gpu_fix = (f"Use a fused flash kernel: MaxText {name('attention')}='{name('cudnn_flash_te')}', or "
               f"{name('jax.nn.dot_product_attention')}(..., {name('implementation')}='cudnn')")
    text = (tpu_fix if tpu else gpu_fix if gpu
            else tpu_fix + "; on GPU " + gpu_fix.removeprefix("Use a fused flash kernel: "))
    if fwl.other(target) or fwl.uses_te(target):  # no MaxText attention value, no cudnn_flash_te for them
        text = fwl.attention(target, tpu)
    if not n.kernel_runs:
        return ("Nothing to change on this host: no fused attention kernel runs on a CPU (Splash is TPU's, cuDNN "
                "GPU's), and XLA's own attention is what runs here. On the accelerator: " + text[0].lower()
                + text[1:] + ".")
    text += (f": the score blocks stay on chip and the {format_bytes(n.score_bytes_per_step)} of scores per step "
             "never reach HBM.")
    vmem = scoped_vmem(target.chip) if tpu else ""
    if vmem:  # the guides' next step once Splash runs: its block sizes, which scoped VMEM bounds
        text += (" Then tune its block sizes (tune-jax, Tokamax's tuning utilities); larger blocks need more scoped "
                 f"VMEM: {vmem}.")
    return text

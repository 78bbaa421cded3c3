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
    upper bound: the fused kernel still computes the exponentials.
Fix:
    TPU: MaxText `attention='flash'` (the Splash kernel; Tokamax also ships Splash attention). GPU: MaxText
    `attention='cudnn_flash_te'`, or `jax.nn.dot_product_attention(..., implementation='cudnn')` in your
    own model. Names checked in MaxText configs/base.yml and the JAX API docs. On TPU, then tune the
    kernel's block sizes, which scoped VMEM bounds: `xla_tpu_scoped_vmem_limit_kib` in `LIBTPU_INIT_ARGS`
    (MaxText's dense 98304 KiB where the chip has it, else the whole VMEM: 65536 on TPU7x as its recipes set).
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

import numpy as np

from .base import OpEvidence, format_bytes, format_seconds, make_finding, op_claims
from .levers import name, scoped_vmem

RULE_ID = "materialized-attention"
PRECEDENCE = 8  # the score chain's ops
MIN_SCORE_BYTES = 1 << 20  # a score matrix under 1 MiB fits on chip anyway


def check(analysis) -> list:
    ops = analysis.ops
    if ops.empty:
        return []
    chain_ops = ops[ops["in_step"] & ops["attention_role"].notna()]
    scores = chain_ops[(chain_ops["attention_role"] == "scores") & (chain_ops["result_bytes"] >= MIN_SCORE_BYTES)]
    if scores.empty:
        return []
    measured = analysis.measured
    time_col = "measured_s_per_step" if measured else "predicted_s_per_step"
    bw = analysis.chip.hbm_bytes_per_s
    rows = []
    for head in scores.itertuples():
        members = chain_ops[chain_ops["attention_scores_op"] == head.op_name]
        softmax = members[members["attention_role"] == "softmax"]
        contexts = members[members["attention_role"] == "context"]
        occ = head.occurrences_per_step if head.occurrences_per_step == head.occurrences_per_step else 1.0
        softmax_s = float(np.nansum(softmax[time_col]))
        score_hbm_s = head.result_bytes * occ * (1 + max(len(contexts), 1)) / bw
        rows.append(dict(op=str(head.op_name), score_bytes=float(head.result_bytes), dtype=str(head.dtype),
                         softmax_ops=int(len(softmax)), occ=float(occ), softmax_s=softmax_s,
                         score_hbm_s=float(score_hbm_s), cost=softmax_s + float(score_hbm_s),
                         predicted=head.predicted_s_per_step, measured_s=head.measured_s_per_step))
    rows.sort(key=lambda r: -r["cost"])
    cost = sum(r["cost"] for r in rows)
    softmax_s = sum(r["softmax_s"] for r in rows)
    score_hbm_s = sum(r["score_hbm_s"] for r in rows)
    largest = max(r["score_bytes"] for r in rows)
    per_step = sum(r["score_bytes"] * r["occ"] for r in rows)
    top = rows[0]
    evidence = (f"{len(rows)} attention score {'matrix goes' if len(rows) == 1 else 'matrices go'} through HBM: "
                f"{top['op']} writes {format_bytes(top['score_bytes'])} of {top['dtype']} scores that "
                f"{top['softmax_ops']} softmax ops read and rewrite before the second matmul reads them. The "
                f"softmax ops take {format_seconds(softmax_s)} per step "
                + ("(measured)" if measured else "(roofline prediction; no trace)")
                + f" and moving the scores in and out of the matmuls {format_seconds(score_hbm_s)} at "
                f"{format_bytes(bw)}/s (HLO result bytes, chip table bandwidth).")
    tpu = bool(analysis.chip.mxu_dim)
    gpu = analysis.platform == "gpu" or bool(analysis.chip.compute_capability)
    tpu_fix = (f"Use a fused flash kernel: MaxText {name('attention')}='flash' (the Splash kernel on TPU; Tokamax "
               "ships Splash attention too)")
    gpu_fix = (f"Use a fused flash kernel: MaxText {name('attention')}='{name('cudnn_flash_te')}', or "
               f"{name('jax.nn.dot_product_attention')}(..., {name('implementation')}='cudnn')")
    fix = (tpu_fix if tpu else gpu_fix if gpu else tpu_fix + "; on GPU " + gpu_fix.removeprefix("Use a fused flash "
                                                                                                  "kernel: "))
    fix += f": the score blocks stay on chip and the {format_bytes(per_step)} of scores per step never reach HBM."
    vmem = scoped_vmem(analysis.chip) if tpu else ""
    if vmem:  # the guides' next step once Splash runs: its block sizes, which scoped VMEM bounds
        fix += (" Then tune its block sizes (tune-jax, Tokamax's tuning utilities); larger blocks need more scoped "
                f"VMEM: {vmem}.")
    return [make_finding(
        rule=RULE_ID,
        title=f"Attention scores materialized in HBM ({format_bytes(largest)} per matrix): "
              f"{format_seconds(cost)} per step",
        time_s_per_step=cost, est_savings_s_per_step=cost, step_s=analysis.step_s,
        confidence="medium" if measured else "low",
        ops=tuple(OpEvidence(r["op"], float(r["measured_s"]) if measured and r["measured_s"] == r["measured_s"]
                             else r["cost"], None if r["predicted"] != r["predicted"] else float(r["predicted"]),
                             f"scores {format_bytes(r['score_bytes'])}") for r in rows[:10]),
        evidence=evidence, fix=fix,
        claims=op_claims(chain_ops, chain_ops[time_col]),
        details={"chains": len(rows), "score_bytes": largest, "score_bytes_per_step": per_step,
                 "softmax_s_per_step": softmax_s, "score_hbm_s_per_step": score_hbm_s,
                 "scores": [{"op": r["op"], "score_bytes": r["score_bytes"], "dtype": r["dtype"],
                             "softmax_ops": r["softmax_ops"], "cost_s_per_step": r["cost"]} for r in rows[:50]],
                 "times_are": "measured" if measured else "predicted"})]

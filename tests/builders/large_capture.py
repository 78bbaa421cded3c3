"""A large TPU-shaped capture (about a million events) for the speed benchmark (benchmarks/bench_diagnose.py)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from .hlo_snippets import array_bytes, copy_text, tpu_shape
from .scenarios import SOURCE_FILE, TF_BWD, TF_FWD, OpSpec, all_gather_pair, loop_fusion, matmul_fusion
from .xspace_encoder import (
    FIRST_STEP_START_PS,
    PS_PER_US,
    TRAIN_STEP_PROGRAM,
    TRAIN_STEP_PROGRAM_ID,
    TpuCaptureBuilder,
)


def _layer_template(layer: int, rng: np.random.Generator) -> list[OpSpec]:
    """~40 ops of one transformer layer (FSDP all-gathers, attention/MLP matmuls, norms, copies, remat)."""
    L = layer
    ops: list[OpSpec] = []
    d, f, s = 4096, 14336, 1024
    j = 40 * L  # unique numbering per layer

    def nm(base: str, k: int) -> str:
        return f"{base}.{j + k}"

    def jitter(op: OpSpec) -> OpSpec:
        return replace(op, duration_ps=int(op.duration_ps * rng.uniform(1.0, 1.6)))

    for k, (m_, k_, n_) in enumerate([(s, d, d), (s, d, 1024), (s, d, 1024), (s, d, d)]):
        ag_s, ag_d = all_gather_pair(nm("all-gather-start", k), nm("all-gather-done", k), [k_ // 4, n_], 4,
                                     done_ps=int(rng.uniform(0.2, 30) * PS_PER_US), operand=nm("fusion", 30 + k),
                                     channel_id=j + k + 1)
        ops += [ag_s, jitter(matmul_fusion(nm("fusion", k), m_, k_, n_, lhs=nm("add_rsqrt_fusion", 0))), ag_d]
    ops += [jitter(loop_fusion(nm("add_rsqrt_fusion", 0), [s, d], inputs=2)),
            jitter(loop_fusion(nm("softmax_fusion", 0), [32, s, s // 4], inputs=1)),
            jitter(matmul_fusion(nm("fusion", 5), s, d, f)), jitter(matmul_fusion(nm("fusion", 6), s, d, f)),
            jitter(loop_fusion(nm("multiply_fusion", 0), [s, f], inputs=2)),
            jitter(matmul_fusion(nm("fusion", 7), s, f, d)),
            jitter(loop_fusion(nm("add_fusion", 0), [s, d], inputs=2))]
    for k in range(8):
        ops.append(jitter(matmul_fusion(nm("fusion", 10 + k), s, d, 1024 * (1 + k % 4),
                                        tf_op=f"{TF_BWD}/dot_general")))
        ops.append(jitter(loop_fusion(nm("convert_fusion", 10 + k), [s, 1024 * (1 + k % 4)], inputs=1)))
    cp_src = tpu_shape("bf16", [d, 1024])
    ops.append(OpSpec(nm("copy", 0), copy_text(nm("copy", 0), tpu_shape("bf16", [d, 1024], [0, 1]), cp_src,
                                               nm("fusion", 1)),
                      "data formatting", int(rng.uniform(5, 15) * PS_PER_US), 0, 2 * array_bytes("bf16", [d, 1024]),
                      f"{TF_FWD}/transpose", f"{SOURCE_FILE}:140"))
    remat = matmul_fusion(nm("fusion", 5), s, d, f, tf_op=f"{TF_BWD}/checkpoint/rematted_computation/dot_general")
    ops.append(replace(remat, name=nm("fusion", 5) + ".remat",
                       text=remat.text.replace(f"%{nm('fusion', 5)} =", f"%{nm('fusion', 5)}.remat =")))
    ops += [jitter(loop_fusion(nm("reduce_fusion", k), [s, d], inputs=1)) for k in range(8)]
    return ops


def large_capture(path, num_events: int = 1_000_000, *, num_devices: int = 4, ops_per_step: int = 2000,
                  seed: int = 0, host: str = "t1v-n-test") -> Path:
    """Write a TPU-shaped capture of about ``num_events`` XLA Ops events and return the .xplane.pb path.

    ~2k distinct ops (full HLO texts, metadata stats) per device, one ``jit_train_step`` module event per
    step and device, all-gather spans on ``Async XLA Ops``. ``path`` is a log dir (the file goes to
    ``plugins/profile/<run>/<host>.xplane.pb``) or a path ending in ``.xplane.pb``.
    """
    rng = np.random.default_rng(seed)
    template: list[OpSpec] = []
    layer = 0
    while len(template) < ops_per_step:
        template += _layer_template(layer, rng)
        layer += 1
    template = template[:ops_per_step]
    # A cut through a layer can leave a start op without its done: give that slot to a plain loop fusion.
    kept = {op.name for op in template}
    template = [op if op.async_done is None or op.async_done in kept
                else loop_fusion(f"reduce_fusion.{100_000 + i}", [1024, 4096], inputs=1)
                for i, op in enumerate(template)]
    n_per_step = len(template)
    steps = max(1, math.ceil(num_events / (num_devices * n_per_step)))
    b = TpuCaptureBuilder(num_devices=num_devices, host=host)
    names = np.array([op.name for op in template])
    durs = np.array([op.duration_ps for op in template], np.int64)
    step_ps = int(durs.sum())
    gap_ps = 20 * PS_PER_US
    pairs = [(i, names.tolist().index(op.async_done)) for i, op in enumerate(template) if op.async_done]
    for dev in range(num_devices):
        for op in template:
            b.define_op(dev, op.name, op.text, op.category, program_id=TRAIN_STEP_PROGRAM_ID, flops=op.flops,
                        bytes_accessed=op.bytes_accessed, tf_op=op.tf_op, source=op.source)
        step_starts = FIRST_STEP_START_PS + dev * 250_000 + np.arange(steps, dtype=np.int64) * (step_ps + gap_ps)
        # Per-step jitter of +/-2% on every op keeps per-op statistics non-degenerate.
        scale = rng.uniform(0.98, 1.02, size=(steps, 1))
        d = np.maximum((durs[None, :] * scale).astype(np.int64), 1)
        starts = step_starts[:, None] + np.concatenate([np.zeros((steps, 1), np.int64),
                                                        np.cumsum(d, axis=1)[:, :-1]], axis=1)
        b.add_ops_bulk(dev, np.tile(names, steps), starts.reshape(-1), d.reshape(-1))
        for st in range(steps):
            b.add_module_run(dev, TRAIN_STEP_PROGRAM, TRAIN_STEP_PROGRAM_ID, int(step_starts[st]),
                             int(d[st].sum()), st + 1)
            for i_s, i_d in pairs:
                b.add_async(dev, template[i_s].name, template[i_s].text, template[i_d].name,
                            int(starts[st, i_s]), int(starts[st, i_d] + d[st, i_d]))
    path = Path(path)
    if path.name.endswith(".xplane.pb"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b.serialize())
        return path
    return b.write(path)


def multi_host_capture(logdir, hosts: int = 16, events_per_host: int = 304_000, **kwargs) -> list[Path]:
    """One run of ``hosts`` TPU hosts (``t1v-n-<i>``), each a :func:`large_capture` of its own (own seed, so
    no two host files are identical), in ``logdir/plugins/profile/<run>/``."""
    return [large_capture(logdir, events_per_host, seed=i, host=f"t1v-n-{i:02d}", **kwargs) for i in range(hosts)]

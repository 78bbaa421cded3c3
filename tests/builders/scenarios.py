"""Train-step captures with injected answers: a step template of ops, repeated, with what each rule must find.

Each scenario returns ``(builder, expected)``: the capture to write and the numbers it was built with
(op times per step, bytes, exposed time), so tests compare a rule's output with the injection, not with
itself. The protobuf encoding is in ``xspace_encoder``, HLO text in ``hlo_snippets``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .hlo_snippets import (
    all_gather_done_text,
    all_gather_start_text,
    array_bytes,
    copy_done_text,
    copy_start_text,
    copy_text,
    fusion_text,
    matmul_cost,
    tpu_shape,
)
from .xspace_encoder import (
    FIRST_STEP_START_PS,
    PS_PER_S,
    PS_PER_US,
    START_OP_PS,
    TRAIN_STEP_PROGRAM,
    TRAIN_STEP_PROGRAM_ID,
    V6E_DEVICE_TYPE,
    V6E_PEAK_HBM_GBPS,
    V6E_PEAK_TFLOPS,
    TpuCaptureBuilder,
)


@dataclass(frozen=True)
class OpSpec:
    """One op instance in a step template; ``async_done`` marks a start op and names its done op."""

    name: str
    text: str
    category: str
    duration_ps: int
    flops: int = 0
    bytes_accessed: int = 0
    tf_op: str | None = None
    source: str | None = None
    async_done: str | None = None
    async_display_name: str | None = None


_PEAK_FLOPS_PER_S = V6E_PEAK_TFLOPS * 1e12
_PEAK_HBM_BYTES_PER_S = V6E_PEAK_HBM_GBPS * 1e9
TF_FWD = "jit(train_step)/jvp(Transformer)/while/body/closed_call"
TF_BWD = "jit(train_step)/transpose(jvp(Transformer))/while/body/closed_call"
SOURCE_FILE = "maxtext/layers/linears.py"


def roofline_ps(flops: int, bytes_accessed: int) -> float:
    """max(compute, memory) time at the v6e trace peaks (918 TF/s, 1637.99 GB/s), in ps."""
    return max(flops / _PEAK_FLOPS_PER_S, bytes_accessed / _PEAK_HBM_BYTES_PER_S) * PS_PER_S


def matmul_fusion(name: str, m: int, k: int, n: int, *, over_roofline: float = 1.3, lhs: str = "param.1",
                  rhs: str = "param.2", calls: str | None = None, tf_op: str | None = None,
                  duration_ps: int | None = None) -> OpSpec:
    """A ``kind=kOutput`` dot fusion [m,k]x[k,n] in bf16 taking ``over_roofline`` times its roofline."""
    flops, nbytes = matmul_cost(m, k, n)
    text = fusion_text(name, tpu_shape("bf16", [m, n]),
                       [(tpu_shape("bf16", [m, k]), lhs), (tpu_shape("bf16", [k, n]), rhs)],
                       "kOutput", calls or f"fused_computation.{name.split('.', 1)[-1]}")
    dur = duration_ps if duration_ps is not None else round(over_roofline * roofline_ps(flops, nbytes))
    return OpSpec(name, text, "convolution fusion", dur, flops, nbytes, tf_op or f"{TF_FWD}/dot_general",
                  f"{SOURCE_FILE}:120")


def loop_fusion(name: str, dims: Sequence[int], *, inputs: int = 2, over_roofline: float = 1.3,
                operand: str = "param.3", calls: str | None = None, duration_ps: int | None = None) -> OpSpec:
    """An elementwise ``kind=kLoop`` fusion over bf16 ``dims``: ``inputs`` reads and one write."""
    shape = tpu_shape("bf16", dims)
    elems = math.prod(dims)
    nbytes = (inputs + 1) * array_bytes("bf16", dims)
    text = fusion_text(name, shape, [(shape, f"{operand}.{i}" if i else operand) for i in range(inputs)],
                       "kLoop", calls or f"fused_computation.{name.split('.', 1)[-1]}")
    dur = duration_ps if duration_ps is not None else round(over_roofline * roofline_ps(elems, nbytes))
    return OpSpec(name, text, "loop fusion", dur, elems, nbytes, f"{TF_FWD}/add", f"{SOURCE_FILE}:88")


def all_gather_pair(start: str, done: str, shard_dims: Sequence[int], group_size: int, *, done_ps: int,
                    operand: str = "fusion.1", dimension: int = 0, channel_id: int = 1,
                    num_devices: int = 4) -> tuple[OpSpec, OpSpec]:
    full_dims = list(shard_dims)
    full_dims[dimension] *= group_size
    shard, full = tpu_shape("bf16", shard_dims), tpu_shape("bf16", full_dims)
    nbytes = array_bytes("bf16", full_dims)
    tf = f"{TF_FWD}/all_gather"
    s = OpSpec(start, all_gather_start_text(start, shard, full, operand, dimension=dimension,
                                            group_size=group_size, num_devices=num_devices,
                                            channel_id=channel_id),
               "all-gather-start", START_OP_PS, 0, nbytes, tf, async_done=done)
    d = OpSpec(done, all_gather_done_text(done, shard, full, start), "all-gather-done", done_ps, 0, nbytes, tf)
    return s, d


@dataclass(frozen=True)
class StepLayout:
    """Where a scenario's steps landed: module start per (step, device), step length, gap."""

    step_ps: int
    warmup_step_ps: int
    step_gap_ps: int
    num_steps: int
    warmup: bool


def build_train_steps(template: Sequence[OpSpec], *, steps: int = 5, warmup: bool = True,
                      warmup_factor: float = 3.0, step_gap_ps: int = 10 * PS_PER_US,
                      device_stagger_ps: int = 250_000, builder: TpuCaptureBuilder | None = None,
                      program_name: str = TRAIN_STEP_PROGRAM, program_id: int = TRAIN_STEP_PROGRAM_ID,
                      step_scales: Sequence[float] | None = None) -> tuple[TpuCaptureBuilder, StepLayout]:
    """Lay ``template`` back to back inside one ``XLA Modules`` event per step per device.

    The optional warm-up step comes first with every duration scaled by ``warmup_factor`` (compilation and
    cold caches make real first steps slower). Device d runs ``d * device_stagger_ps`` behind device 0.
    ``step_scales`` (one per steady step) multiplies every op duration of that step: step-to-step jitter, the
    same on every device.
    """
    b = builder or TpuCaptureBuilder()
    warm = [replace(op, duration_ps=round(op.duration_ps * warmup_factor)) for op in template]
    steady = ([list(template)] * steps if step_scales is None else
              [[replace(op, duration_ps=round(op.duration_ps * k)) for op in template] for k in step_scales])
    if len(steady) != steps:
        raise ValueError(f"{len(steady)} step_scales for {steps} steps")
    plans = ([warm] if warmup else []) + steady
    step_ps = sum(op.duration_ps for op in template)
    warm_ps = sum(op.duration_ps for op in warm)
    for dev in range(b.num_devices):
        t = FIRST_STEP_START_PS + dev * device_stagger_ps
        for run, plan in enumerate(plans):
            module_start = t
            starts: dict[str, int] = {}
            for op in plan:
                b.add_op(dev, op.name, op.text, op.category, t, op.duration_ps, program_id=program_id,
                         flops=op.flops, bytes_accessed=op.bytes_accessed, tf_op=op.tf_op, source=op.source)
                starts[op.name] = t
                t += op.duration_ps
                for s_op in plan:
                    if s_op.async_done == op.name:
                        b.add_async(dev, s_op.name, s_op.text, op.name, starts[s_op.name], t,
                                    display_name=s_op.async_display_name)
            b.add_module_run(dev, program_name, program_id, module_start, t - module_start, run + 1)
            if dev == 0:
                # Host dispatch precedes the device work.
                b.add_host_event("PjitFunction(train_step)", module_start - 40 * PS_PER_US, 30 * PS_PER_US)
            t += step_gap_ps
    return b, StepLayout(step_ps, warm_ps, step_gap_ps, steps, warmup)


def _common_expected(b: TpuCaptureBuilder, layout: StepLayout, template: Sequence[OpSpec]) -> dict:
    per_op: dict[str, float] = {}
    for op in template:
        per_op[op.name] = per_op.get(op.name, 0.0) + op.duration_ps / PS_PER_S
    return {
        "program_name": TRAIN_STEP_PROGRAM,
        "program_id": TRAIN_STEP_PROGRAM_ID,
        "device_type": V6E_DEVICE_TYPE,
        "num_devices": b.num_devices,
        "num_steps": layout.num_steps,  # steady steps, warm-up excluded
        "warmup_steps": int(layout.warmup),
        "step_s": layout.step_ps / PS_PER_S,  # XLA Modules event duration of a steady step
        "step_period_s": (layout.step_ps + layout.step_gap_ps) / PS_PER_S,  # module start to next start
        "warmup_step_s": layout.warmup_step_ps / PS_PER_S if layout.warmup else 0.0,
        "peak_flops_per_s": _PEAK_FLOPS_PER_S,
        "peak_hbm_bytes_per_s": _PEAK_HBM_BYTES_PER_S,
        "op_self_s_per_step": per_op,  # per device, per steady step
    }


def _run(template: list[OpSpec], steps: int, warmup: bool) -> tuple[TpuCaptureBuilder, dict]:
    b, layout = build_train_steps(template, steps=steps, warmup=warmup)
    return b, _common_expected(b, layout, template)


def exposed_all_gather(n_us: float = 250.0, *, steps: int = 5, warmup: bool = True):
    """fusion.1 -> all-gather-start -> all-gather-done waiting exactly ``n_us`` -> fusion.2 -> add_fusion.

    Nothing else runs on the op line while the done waits, so all of it is exposed.
    """
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [256, 4096], 4,
                                 done_ps=round(n_us * PS_PER_US), operand="fusion.1")
    template = [matmul_fusion("fusion.1", 256, 4096, 4096),
                ag_s, ag_d,
                matmul_fusion("fusion.2", 1024, 4096, 4096, lhs="all-gather-done"),
                loop_fusion("add_fusion", [1024, 4096])]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_collective_s_per_step=ag_d.duration_ps / PS_PER_S,
               exposed_all_gather_s_per_step=ag_d.duration_ps / PS_PER_S,
               exposed_ops=["all-gather-done"], all_gather_bytes=ag_d.bytes_accessed, replica_group_size=4)
    return b, exp


def hidden_all_gather(*, steps: int = 5, warmup: bool = True):
    """all-gather-start, a ~360 µs matmul fusion, then a 2.5 ns all-gather-done: nothing exposed."""
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [512, 4096], 4, done_ps=2_500,
                                 operand="fusion.1")
    template = [matmul_fusion("fusion.1", 512, 4096, 4096),
                ag_s,
                matmul_fusion("fusion.2", 2048, 4096, 16384, over_roofline=1.2),
                ag_d,
                matmul_fusion("fusion.3", 2048, 4096, 4096, lhs="all-gather-done")]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_collective_s_per_step=ag_d.duration_ps / PS_PER_S,  # 2.5e-9, i.e. ~0
               hidden_collective_span_s_per_step=(START_OP_PS + template[2].duration_ps + ag_d.duration_ps)
               / PS_PER_S,
               all_gather_bytes=ag_d.bytes_accessed, replica_group_size=4)
    return b, exp


def tiny_all_gathers(k: int = 16, *, duration_us: float = 8.0, steps: int = 5, warmup: bool = True):
    """``k`` all-gathers of bf16[256,256] (128 KiB gathered, 32 KiB per shard over 4 devices), each done
    waiting ``duration_us`` exposed, interleaved with small loop fusions; one matmul closes the step.

    Per hop a ring moves one 32 KiB shard: below the ~45 kB latency-bound threshold (1 µs x 4.5e10 B/s).
    """
    template: list[OpSpec] = []
    for i in range(k):
        sfx = f".{i}" if i else ""
        template.append(loop_fusion(f"convert_fusion{sfx}", [64, 256], inputs=1,
                                    duration_ps=2 * PS_PER_US, operand=f"param.{10 + i}"))
        template += all_gather_pair(f"all-gather-start{sfx}", f"all-gather-done{sfx}", [64, 256], 4,
                                    done_ps=round(duration_us * PS_PER_US), operand=f"convert_fusion{sfx}",
                                    channel_id=i + 1)
    template.append(matmul_fusion("fusion.1", 1024, 4096, 4096))
    b, exp = _run(template, steps, warmup)
    done_ps = round(duration_us * PS_PER_US)
    exp.update(num_tiny_all_gathers_per_step=k, all_gather_bytes=array_bytes("bf16", [256, 256]),
               all_gather_shard_bytes=array_bytes("bf16", [64, 256]), replica_group_size=4,
               tiny_all_gather_s_per_step=k * done_ps / PS_PER_S,
               exposed_collective_s_per_step=k * done_ps / PS_PER_S,
               exposed_ops=[f"all-gather-done.{i}" if i else "all-gather-done" for i in range(k)])
    return b, exp


def remat_fusions(x_pct: float = 20.0, *, steps: int = 5, warmup: bool = True):
    """Forward/backward matmuls plus rematerialized clones (``fusion.12.remat``, ``fusion.14.remat2``,
    ``convert_reduce_fusion.3.remat``; tf_op ``.../checkpoint/rematted_computation/...``) taking
    ``x_pct`` % of the step (exact to one picosecond)."""
    template, remats, other_ps, remat_total = remat_template(x_pct)
    b, exp = _run(template, steps, warmup)
    exp.update(remat_s_per_step=remat_total / PS_PER_S,
               remat_fraction=remat_total / (other_ps + remat_total),  # == x_pct/100 to ~1e-12
               remat_ops=[op.name for op in remats])
    return b, exp


def remat_template(x_pct: float) -> tuple[list[OpSpec], list[OpSpec], int, int]:
    """(step template, its remat ops, ps of the other ops, ps of the remat ops) of :func:`remat_fusions`."""
    if not 0 < x_pct < 100:
        raise ValueError("x_pct must be in (0, 100)")
    others = [matmul_fusion("fusion.12", 1024, 4096, 14336),
              matmul_fusion("fusion.14", 1024, 14336, 4096),
              loop_fusion("convert_reduce_fusion.3", [1024, 4096], inputs=1),
              matmul_fusion("fusion.31", 1024, 4096, 14336, tf_op=f"{TF_BWD}/dot_general"),
              matmul_fusion("fusion.33", 4096, 1024, 14336, tf_op=f"{TF_BWD}/dot_general"),
              loop_fusion("add_fusion.7", [1024, 4096])]
    other_ps = sum(op.duration_ps for op in others)
    remat_total = round(other_ps * x_pct / (100.0 - x_pct))
    tf_remat = f"{TF_BWD}/checkpoint/rematted_computation"
    weights = [0.45, 0.45, 0.10]
    durs = [round(remat_total * w) for w in weights[:-1]]
    durs.append(remat_total - sum(durs))
    remats = [replace(others[0], name="fusion.12.remat", duration_ps=durs[0], tf_op=f"{tf_remat}/dot_general",
                      text=others[0].text.replace("%fusion.12 =", "%fusion.12.remat =")),
              replace(others[1], name="fusion.14.remat2", duration_ps=durs[1], tf_op=f"{tf_remat}/dot_general",
                      text=others[1].text.replace("%fusion.14 =", "%fusion.14.remat2 =")),
              replace(others[2], name="convert_reduce_fusion.3.remat", duration_ps=durs[2],
                      tf_op=f"{tf_remat}/convert_element_type",
                      text=others[2].text.replace("%convert_reduce_fusion.3 =",
                                                  "%convert_reduce_fusion.3.remat ="))]
    return others[:3] + remats + others[3:], remats, other_ps, remat_total


def layout_copies(y_us: float = 120.0, *, variant: str = "copy", steps: int = 5, warmup: bool = True):
    """Layout-only changes taking ``y_us`` per step in total.

    variant "copy": ``copy`` (bf16[4096,1024]{1,0:T(8,128)(2,1)} -> {0,1:...}) and ``copy.1``
    (bf16[1024,4096] likewise), operand and result differing only in layout.
    variant "transpose_fusion": ``transpose_fusion`` / ``transpose_fusion.1`` (kind=kLoop) whose result is
    the logical transpose of the operand, physically the same relayout.
    """
    a_dims, b_dims = [4096, 1024], [1024, 4096]
    y_ps = round(y_us * PS_PER_US)
    d0 = round(y_ps * 0.6)
    durs = [d0, y_ps - d0]
    layout_ops: list[OpSpec] = []
    for i, dims in enumerate((a_dims, b_dims)):
        sfx = f".{i}" if i else ""
        src = tpu_shape("bf16", dims)
        nbytes = 2 * array_bytes("bf16", dims)
        if variant == "copy":
            name = f"copy{sfx}"
            text = copy_text(name, tpu_shape("bf16", dims, [0, 1]), src, f"fusion.{i + 1}")
            layout_ops.append(OpSpec(name, text, "data formatting", durs[i], 0, nbytes,
                                     f"{TF_FWD}/transpose", f"{SOURCE_FILE}:140"))
        elif variant == "transpose_fusion":
            name = f"transpose_fusion{sfx}"
            text = fusion_text(name, tpu_shape("bf16", dims[::-1]), [(src, f"fusion.{i + 1}")], "kLoop",
                               f"fused_transpose{sfx}")
            layout_ops.append(OpSpec(name, text, "loop fusion", durs[i], 0, nbytes,
                                     f"{TF_FWD}/transpose", f"{SOURCE_FILE}:140"))
        else:
            raise ValueError(f"unknown variant {variant!r}")
    template = [matmul_fusion("fusion.1", 4096, 4096, 1024), layout_ops[0],
                matmul_fusion("fusion.2", 1024, 4096, 4096), layout_ops[1],
                loop_fusion("add_fusion", [1024, 4096])]
    b, exp = _run(template, steps, warmup)
    exp.update(layout_change_s_per_step=y_ps / PS_PER_S, layout_ops=[op.name for op in layout_ops],
               layout_change_bytes_per_step=sum(op.bytes_accessed for op in layout_ops))
    return b, exp


def clean_profile(*, steps: int = 5, warmup: bool = True):
    """Matmul fusions at 1.05x their compute roofline, loop fusions at 1.1x their HBM roofline, and one
    all-gather fully hidden under a matmul (done: 2.5 ns). Nothing here deserves a high-severity finding."""
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [512, 4096], 4, done_ps=2_500,
                                 operand="fusion.1")
    template = [matmul_fusion("fusion.1", 2048, 4096, 4096, over_roofline=1.05),
                ag_s,
                matmul_fusion("fusion.2", 2048, 4096, 14336, over_roofline=1.05),
                ag_d,
                loop_fusion("add_fusion", [2048, 4096], over_roofline=1.1),
                matmul_fusion("fusion.3", 2048, 14336, 4096, over_roofline=1.05, lhs="add_fusion"),
                loop_fusion("multiply_fusion", [2048, 14336], over_roofline=1.1)]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_collective_s_per_step=ag_d.duration_ps / PS_PER_S,  # 2.5e-9
               matmul_time_over_roofline=1.05, loop_fusion_time_over_roofline=1.1,
               high_severity_findings=0)
    return b, exp


def host_offload_exposed(exposed_us: float = 1500.0, *, steps: int = 5, warmup: bool = True):
    """Host offload in the style of the v6e sample: ``copy-start`` reloads an activation from host memory
    ``S(5)``, ``copy-done`` waits ``exposed_us`` exposed; ``copy-start.1`` offloads a result to ``S(5)``
    and its ``copy-done.1`` completes in 3.75 ns (hidden)."""
    dims = [16, 1024, 4096]
    hbm, host = tpu_shape("bf16", dims), tpu_shape("bf16", dims, memory_space=5)
    nbytes = array_bytes("bf16", dims)
    tf = "jit(train_step)/jit(main)/device_put"
    reload_s = OpSpec("copy-start", copy_start_text("copy-start", hbm, host, "param"), "copy-start",
                      START_OP_PS, 0, nbytes, tf, async_done="copy-done", async_display_name="async-copy")
    reload_d = OpSpec("copy-done", copy_done_text("copy-done", hbm, host, "copy-start"), "copy-done",
                      round(exposed_us * PS_PER_US), 0, nbytes, tf)
    offload_s = OpSpec("copy-start.1", copy_start_text("copy-start.1", host, hbm, "broadcast_add_fusion"),
                       "copy-start", START_OP_PS, 0, nbytes, tf, async_done="copy-done.1",
                       async_display_name="async-copy")
    offload_d = OpSpec("copy-done.1", copy_done_text("copy-done.1", host, hbm, "copy-start.1"), "copy-done",
                       3_750, 0, nbytes, tf)
    add = loop_fusion("broadcast_add_fusion", [16 * 1024, 4096], inputs=1, operand="copy-done")
    add = replace(add, text=fusion_text("broadcast_add_fusion", hbm, [(hbm, "copy-done")], "kLoop",
                                        "fused_computation.2"))
    template = [reload_s, matmul_fusion("fusion.1", 4096, 4096, 4096), reload_d, add, offload_s,
                matmul_fusion("fusion.3", 4096, 4096, 4096), offload_d]
    b, exp = _run(template, steps, warmup)
    exp.update(exposed_host_transfer_s_per_step=(reload_d.duration_ps + offload_d.duration_ps) / PS_PER_S,
               exposed_collective_s_per_step=0.0, host_transfer_bytes_per_step=2 * nbytes,
               exposed_ops=["copy-done"], host_memory_space=5)
    return b, exp


SCENARIOS = {
    "exposed_all_gather": exposed_all_gather,
    "hidden_all_gather": hidden_all_gather,
    "tiny_all_gathers": tiny_all_gathers,
    "remat_fusions": remat_fusions,
    "layout_copies": layout_copies,
    "clean_profile": clean_profile,
    "host_offload_exposed": host_offload_exposed,
}


def fsdp_weight_gather(tokens: int = 256, exposed_us: float = 150.0, *, steps: int = 5, warmup: bool = True):
    """An FSDP layer over 4 devices: the bf16[4096,4096] weight (32 MiB) all-gathered from [1024,4096] shards,
    its done waiting ``exposed_us`` exposed, then the layer's matmul [tokens,4096] x [4096,4096] reading it.

    At 256 tokens the matmul's 8.6 GFLOPs are ~256 FLOPs per gathered byte, far below v6e's C / W; at 8192
    tokens they are 8,192, above it: the same exposed wait, a schedule problem only."""
    ag_s, ag_d = all_gather_pair("all-gather-start", "all-gather-done", [1024, 4096], 4,
                                 done_ps=round(exposed_us * PS_PER_US), operand="param.2")
    template = [matmul_fusion("fusion.1", tokens, 4096, 4096),
                ag_s, ag_d,
                matmul_fusion("fusion.2", tokens, 4096, 4096, lhs="fusion.1", rhs="all-gather-done"),
                loop_fusion("add_fusion", [tokens, 4096], operand="fusion.2")]
    b, exp = _run(template, steps, warmup)
    exp.update(all_gather_bytes=ag_d.bytes_accessed, replica_group_size=4, tokens=tokens,
               layer_matmul="fusion.2", layer_matmul_flops=template[3].flops,
               layer_matmul_s_per_step=template[3].duration_ps / PS_PER_S,
               exposed_all_gather_s_per_step=ag_d.duration_ps / PS_PER_S)
    return b, exp


class HostsCapture:
    """Several hosts' builders of one run: ``write(logdir)`` writes every ``<host>.xplane.pb``."""

    def __init__(self, builders: Sequence[TpuCaptureBuilder]):
        self.builders = list(builders)

    def write(self, logdir) -> list:
        return [b.write(logdir) for b in self.builders]


def multi_host_steps(hosts: int = 4, *, slow_host: int | None = None, slow_ms: float = 0.0, steps: int = 5,
                     warmup: bool = True):
    """``hosts`` TPU hosts (``t1v-n-<i>``, 4 devices each) running the same train step; on ``slow_host`` the
    step's matmul takes ``slow_ms`` longer (its devices compute slower: a straggler)."""
    template = [matmul_fusion("fusion.1", 1024, 4096, 4096), loop_fusion("add_fusion", [1024, 4096])]
    builders = []
    for i in range(hosts):
        plan = list(template)
        if i == slow_host:
            plan[0] = replace(plan[0], duration_ps=plan[0].duration_ps + round(slow_ms * 1e3 * PS_PER_US))
        b = TpuCaptureBuilder(host=f"t1v-n-{i}")
        # Each host's devices start a little apart (real hosts never share a clock to the picosecond), so no
        # two host files are byte-identical (those count once).
        build_train_steps(plan, steps=steps, warmup=warmup, builder=b, device_stagger_ps=250_000 + 1_000 * i)
        builders.append(b)
    step_s = sum(op.duration_ps for op in template) / PS_PER_S
    return HostsCapture(builders), {"hosts": [b.host for b in builders], "step_s": step_s,
                                    "slow_host": builders[slow_host].host if slow_host is not None else None,
                                    "lag_s": slow_ms / 1e3, "devices_per_host": builders[0].num_devices}

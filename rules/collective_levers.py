"""Collective-overlap and combiner advice by platform and chip, built from the verified levers.

TPU: continuation fusion (v4 / v5e / v5p / v6e) and SparseCore offload (TPU7x, its default) exclude each
other for the same collective, so one chip's text names one set, never both. GPU: XLA's GPU flags, which the
CUDA and ROCm backends share.
"""

from __future__ import annotations

from .base import format_seconds
from .levers import flag, flags, name

_SNAKE = {"all-gather": "all_gather", "reduce-scatter": "reduce_scatter", "all-reduce": "all_reduce"}
_ASYNC = {"all-gather": "xla_enable_async_all_gather", "all-reduce": "xla_enable_async_all_reduce"}
_PIPELINED = {"all-gather": "xla_gpu_enable_pipelined_all_gather",
              "reduce-scatter": "xla_gpu_enable_pipelined_reduce_scatter",
              "all-reduce": "xla_gpu_enable_pipelined_all_reduce"}
GPU_COMBINE_FLAG = {"all-gather": "xla_gpu_all_gather_combine_threshold_bytes",
                    "reduce-scatter": "xla_gpu_reduce_scatter_combine_threshold_bytes",
                    "all-reduce": "xla_gpu_all_reduce_combine_threshold_bytes",
                    "collective-permute": "xla_gpu_collective_permute_combine_threshold_bytes"}


def sparse_core_offload(kind: str) -> str:
    """MaxText's SparseCore offload set for one collective kind (TPU7x): offload on, its continuation fusion
    off, and the base flags."""
    sc = _SNAKE[kind]
    return (f"{name('LIBTPU_INIT_ARGS')}: {flag(f'xla_tpu_enable_sparse_core_collective_offload_{sc}', True)} "
            f"{flag(f'xla_tpu_enable_async_collective_fusion_fuse_{sc}', False)} plus MaxText's "
            f"{name('ENABLE_SPARSECORE_OFFLOADING_BASE_FLAGS')} ("
            + flags(xla_tpu_use_tc_device_shape_on_sc=True, xla_sc_enable_instruction_fusion=False,
                    xla_sc_disjoint_spmem=False, xla_sc_disable_megacore_partitioning=True) + ")")


def continuation_fusion(kind: str) -> str:
    """MaxText's continuation-fusion set for one collective kind (v5p / v6e)."""
    sc = _SNAKE[kind]
    extra = {_ASYNC[kind]: True} if kind in _ASYNC else {}
    return (f"{name('LIBTPU_INIT_ARGS')}: "
            + flags(xla_tpu_enable_async_collective_fusion=True,
                    **{f"xla_tpu_enable_async_collective_fusion_fuse_{sc}": True},
                    xla_tpu_enable_async_collective_fusion_multiple_steps=True,
                    xla_tpu_overlap_compute_collective_tc=True, **extra))


def tpu_overlap(kind: str, chip) -> str:
    """The overlap lever for ``kind`` on a TPU chip, saying which chips it applies to."""
    if kind == "all-to-all":
        return f"On any TPU, {name('LIBTPU_INIT_ARGS')}: {flag('xla_tpu_enable_async_all_to_all', True)}."
    if kind == "collective-permute":
        return f"On any TPU, {name('LIBTPU_INIT_ARGS')}: {flag('xla_enable_async_collective_permute', True)}."
    if kind not in _SNAKE:
        return ""
    if getattr(chip, "key", "") == "tpu7x":
        return (f"On TPU7x, SparseCore collective offload runs {kind}s on the SparseCores beside the TensorCores "
                f"and is the default; check it is not turned off: {sparse_core_offload(kind)}. It excludes "
                "continuation fusion of the same collective: set no ..._fuse_ flag of this kind to true.")
    on = f"On {chip.name}" if getattr(chip, "vendor", "") == "google" else "On this TPU"
    return (f"{on}, continuation fusion overlaps {kind}s with compute (MaxText's tested set, recommended on "
            f"v5p / v6e): {continuation_fusion(kind)}. TPU7x offloads them to its SparseCores instead; the two "
            "sets exclude each other.")


def gpu_overlap(kind: str, chip) -> str:
    """The overlap lever for ``kind`` on a GPU, by vendor."""
    values = {"xla_gpu_enable_latency_hiding_scheduler": True,
              **({_PIPELINED[kind]: True} if kind in _PIPELINED else {})}
    text = f"{name('XLA_FLAGS')}='{flags(**values)}'"
    if getattr(chip, "vendor", "") == "amd":
        return f"On AMD GPUs (ROCm, collectives on RCCL) XLA's GPU flags are the same: {text}."
    return f"On NVIDIA GPUs: {text}."


def gpu_combine(largest_bytes: dict[str, int]) -> str:
    """XLA_FLAGS raising each kind's combiner threshold to the given size (NVIDIA and AMD alike)."""
    return " ".join(flag(GPU_COMBINE_FLAG[k], n) for k, n in largest_bytes.items() if k in GPU_COMBINE_FLAG)


_EARLIER = {
    "all-gather": "gather the next layer's weights one layer ahead (inside the layer loop), split the matmul that "
                  "consumes the gather so each shard's compute overlaps the next shard's transfer (a collective "
                  "matmul), or shard the weights over fewer devices",
    "reduce-scatter": "reduce each layer's gradients while the next layer's backward pass runs and use them a layer "
                      "later, split the matmul that produces them so each chunk's reduction overlaps the next "
                      "chunk's compute (a collective matmul), or shard over fewer devices",
}


def program_change(kind: str, restructure_s: float, flag_s: float) -> str:
    """The program change that hides what a scheduler flag cannot (``restructure_s``, an upper bound), when the
    schedule windows give a flag only ``flag_s`` of independent work."""
    why = ("their results are consumed at once and nothing independent is scheduled beside them" if flag_s <= 0
           else f"a scheduler flag can hide only the {format_seconds(flag_s)} of independent work beside them")
    how = _EARLIER.get("reduce-scatter" if kind == "all-reduce" else kind,
                       "issue each transfer earlier and use its result later, split it into chunks that overlap the "
                       "compute between them, or shard over fewer devices")
    return (f"No flag hides the rest ({format_seconds(restructure_s)} at most, if the step's other compute can be "
            f"put beside them): {why}, so the program must change: {how}.")

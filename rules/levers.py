"""The levers a fix may name: every XLA / libtpu flag, MaxText key and JAX API, checked against a public source.

Fix texts build their flag strings and names through :func:`flag` and :func:`name`, so a name is typed once
(here) and a name missing from the table fails at the first finding that prints it. Each entry records
where it was checked (repository + path, or URL), which platforms / chips it applies to and what it does.
``tests/rules/test_levers.py`` extracts every flag-like token from every fix text over the samples and
fixtures and asserts it is listed here.
"""

from __future__ import annotations

from dataclasses import dataclass

# Where the names were checked (the `search` tool over public sources, 2026-11).
MAXTEXT_FLAGS = "AI-Hypercomputer/maxtext benchmarks/xla_flags_library.py (commit 48445cf)"
MAXTEXT_BASE = "AI-Hypercomputer/maxtext src/MaxText/configs/base.yml"
MAXTEXT_BASE_INPUT = ("AI-Hypercomputer/maxtext MaxText/configs/base.yml (commit 000e935: dataset_type, "
                      "grain_worker_count, reuse_example_batch; the last also in src/MaxText/configs/base.yml)")
MAXTEXT_DECODER = "AI-Hypercomputer/maxtext src/MaxText/layers/decoders.py (remat_policy -> checkpoint policy)"
MAXTEXT_TYPES = "AI-Hypercomputer/maxtext src/MaxText/configs/types.py (QuantizationType, RematPolicy)"
MAXTEXT_TUNING = ("AI-Hypercomputer/maxtext docs/guides/optimization/benchmark_and_performance.md (Low precision "
                  "training: use_qwix_quantization, recipes int8 up to v6e, fp8_full on v7x, fp8_gpu NVIDIA, "
                  "nanoo_fp8 AMD; Scoped Vmem tuning)")
TPU_RECIPES = ("AI-Hypercomputer/tpu-recipes training/ironwood/*/run_recipe.sh "
               "(--xla_tpu_scoped_vmem_limit_kib=65536 with the SparseCore offload flags on TPU7x)")
MAXTEXT_V7X = ("AI-Hypercomputer/maxtext docs/guides/optimization/optimizing_frontier_model_training_on_tpu_v7x.md "
               "(Memory pipeline tuning: scoped VMEM sets the kernels' tile sizes; SparseCore offload)")
XLA_DEBUG = "openxla/xla xla/debug_options_flags.cc"
JAX_DOT_PRODUCT_ATTENTION = "https://docs.jax.dev/en/latest/_autosummary/jax.nn.dot_product_attention.html"
IRONWOOD = "https://docs.cloud.google.com/tpu/docs/ironwood-performance"
JAX_TEST_A2A = ("jax-ml/jax tests (path not pinned): a TPU all-to-all test compiles with "
                "compiler_options={'xla_tpu_enable_async_all_to_all': 'true'}")
JAX_CKPT = "https://docs.jax.dev/en/latest/_autosummary/jax.checkpoint_policies.{}.html"
JAX_LAYOUT = "https://docs.jax.dev/en/latest/notebooks/layout.html"
JAX_CONV = "https://docs.jax.dev/en/latest/_autosummary/jax.lax.conv_general_dilated.html"
JAX_REMAT = "https://docs.jax.dev/en/latest/gradient-checkpointing.html"
JAX_SHARDING = "https://docs.jax.dev/en/latest/jax.sharding.html"
JAX_MEMORIES = "https://docs.jax.dev/en/latest/notebooks/host-offloading.html"
TORCH_XLA_SPMD = "https://docs.pytorch.org/xla/release/r2.8/perf/spmd_basic.html (torch_xla.distributed.spmd as xs)"
TORCH_XLA_LOADER = ("https://docs.pytorch.org/xla/release/r2.8/_sources/perf/spmd_advanced.md.txt (pl.MpDeviceLoader, "
                    "torch_xla.distributed.parallel_loader as pl)")
TORCH_XLA_CKPT = ("pytorch/xla torch_xla/utils/checkpoint.py (pytorch/xla#5766: the XLA-safe replacement of "
                  "torch.utils.checkpoint.checkpoint)")
TORCH_XLA_FLASH = ("https://docs.pytorch.org/xla/release/r2.6/features/pallas.html; pytorch/xla PR 7035 "
                   "test/test_pallas.py: from torch_xla.experimental.custom_kernel import flash_attention (TPU v3+)")
TE_API = ("https://docs.nvidia.com/deeplearning/transformer-engine-releases/release-0.7.0/user-guide/api/"
          "framework.html (pyTorch: DotProductAttention, fp8_autocast, checkpoint; Jax: fp8_autocast); "
          "https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/api/common.html (DelayedScaling)")
TF_DATA = ("tensorflow/docs site/en/guide/data_performance.ipynb (Better performance with the tf.data API: "
           "Dataset.prefetch, num_parallel_calls, tf.data.AUTOTUNE)")


@dataclass(frozen=True)
class Lever:
    name: str
    # 'xla_flag' (XLA_FLAGS), 'libtpu_flag' (LIBTPU_INIT_ARGS), 'env', 'maxtext', 'jax', 'torch_xla', 'te', 'tf'
    kind: str
    applies_to: str  # platforms / chips, in words
    source: str
    meaning: str


def _levers(kind: str, applies_to: str, source: str, rows: dict[str, str]) -> list[Lever]:
    return [Lever(n, kind, applies_to, source, m) for n, m in rows.items()]


_TPU = "TPU (all generations)"
_CF = "TPU v4 / v5e / v5p / v6e (continuation fusion; MaxText's tested sets are for v5p / v6e)"
_SC = "TPU7x (default there); excludes continuation fusion of the same collective"
_GPU = "GPU: NVIDIA (CUDA) and AMD (ROCm) share XLA's GPU flags"

LEVERS: dict[str, Lever] = {lv.name: lv for lv in [
    *_levers("env", "all platforms", XLA_DEBUG, {
        "XLA_FLAGS": "environment variable XLA reads its debug options from"}),
    *_levers("env", _TPU, MAXTEXT_FLAGS, {
        "LIBTPU_INIT_ARGS": "environment variable libtpu reads its flags from",
        "HOST_OFFLOAD_FLAGS": "MaxText's tested libtpu flag set for host offloading",
        "ENABLE_SPARSECORE_OFFLOADING_BASE_FLAGS": "MaxText's base flags every SparseCore offload needs"}),
    *_levers("libtpu_flag", _CF, MAXTEXT_FLAGS, {
        "xla_tpu_enable_async_collective_fusion": "continuation fusion: collectives fused with compute",
        "xla_tpu_enable_async_collective_fusion_fuse_all_gather": "continuation fusion of all-gathers",
        "xla_tpu_enable_async_collective_fusion_fuse_all_reduce": "continuation fusion of all-reduces",
        "xla_tpu_enable_async_collective_fusion_fuse_reduce_scatter": "continuation fusion of reduce-scatters",
        "xla_tpu_enable_async_collective_fusion_multiple_steps": "continuation fusion across several steps",
        "xla_tpu_overlap_compute_collective_tc": "overlap compute and collectives on the TensorCore"}),
    *_levers("libtpu_flag", _TPU, MAXTEXT_FLAGS, {
        "xla_enable_async_all_gather": "run all-gathers asynchronously",
        "xla_enable_async_all_reduce": "run all-reduces asynchronously",
        "xla_enable_async_collective_permute": "run collective-permutes asynchronously",
        "xla_tpu_host_transfer_overlap_limit": "how many host transfers may be in flight (HOST_OFFLOAD_FLAGS: 24)"}),
    *_levers("libtpu_flag", _TPU + "; at most the chip's VMEM", "; ".join((MAXTEXT_FLAGS, MAXTEXT_V7X, TPU_RECIPES)), {
        "xla_tpu_scoped_vmem_limit_kib": "VMEM (KiB) one op may use; the rest prefetches the next ops' operands "
                                         "(MaxText's dense setting 98304, MoE 81920)"}),
    *_levers("libtpu_flag", _TPU, JAX_TEST_A2A, {
        "xla_tpu_enable_async_all_to_all": "run all-to-alls asynchronously"}),
    *_levers("libtpu_flag", _SC, MAXTEXT_FLAGS + "; " + IRONWOOD, {
        "xla_tpu_enable_sparse_core_collective_offload_all_gather": "all-gathers run on the SparseCores",
        "xla_tpu_enable_sparse_core_collective_offload_reduce_scatter": "reduce-scatters run on the SparseCores",
        "xla_tpu_enable_sparse_core_collective_offload_all_reduce": "all-reduces run on the SparseCores",
        "xla_tpu_use_tc_device_shape_on_sc": "SparseCore offload base flag (true)",
        "xla_sc_enable_instruction_fusion": "SparseCore offload base flag (false)",
        "xla_sc_disjoint_spmem": "SparseCore offload base flag (false)",
        "xla_sc_disable_megacore_partitioning": "SparseCore offload base flag (true)"}),
    *_levers("xla_flag", _GPU, XLA_DEBUG, {
        "xla_gpu_enable_latency_hiding_scheduler": "schedule collectives early so compute hides them",
        "xla_gpu_enable_pipelined_all_gather": "pipeline all-gathers across loop iterations",
        "xla_gpu_enable_pipelined_reduce_scatter": "pipeline reduce-scatters across loop iterations",
        "xla_gpu_enable_pipelined_all_reduce": "pipeline all-reduces across loop iterations",
        "xla_gpu_all_gather_combine_threshold_bytes": "size up to which the all-gather combiner merges",
        "xla_gpu_reduce_scatter_combine_threshold_bytes": "size up to which the reduce-scatter combiner merges",
        "xla_gpu_all_reduce_combine_threshold_bytes": "size up to which the all-reduce combiner merges",
        "xla_gpu_collective_permute_combine_threshold_bytes": "size up to which collective-permutes merge"}),
    # Named by the command-buffer warning (analyzer/steps/command_buffers.py), not by a fix: also read in
    # xla/service/gpu/transforms/command_buffer_conversion_pass.cc, and applied in sample_profiles/make_gpu_pair.py.
    *_levers("xla_flag", _GPU, XLA_DEBUG, {
        "xla_gpu_enable_command_buffer": "which ops XLA records into CUDA graphs; empty: none (each op its own "
                                         "kernel in the trace)"}),
    *_levers("maxtext", "MaxText on any platform", MAXTEXT_BASE, {
        "remat_policy": "which activations the decoder layer keeps for the backward pass",
        "per_device_batch_size": "batch per device",
        "ici_tensor_parallelism": "tensor-parallel degree within a slice",
        "scan_layers": "decoder layers run as one scanned layer",
        "logical_axis_rules": "logical array axes -> mesh axes",
        "decoder_layer_input": "remat_policy='custom' entry: 'remat', 'device' or 'offload'",
        "query_proj": "remat_policy='custom' entry (and a checkpoint name)",
        "mlpwi": "remat_policy='custom' entry: the MLP input projection",
        "base_emb_dim": "model (embedding) width",
        "base_mlp_dim": "MLP hidden width",
        "head_dim": "width of one attention head",
        "vocab_size": "vocabulary size (the logits' width)",
        "max_target_length": "sequence length",
        "ici_fsdp_parallelism": "FSDP degree within a slice",
        "ici_data_parallelism": "data-parallel degree within a slice (weights replicated)",
        "ici_expert_parallelism": "expert-parallel degree within a slice (MoE experts sharded)",
        "num_experts": "MoE experts per layer",
        "num_experts_per_tok": "experts each token is routed to (sparsity = num_experts / num_experts_per_tok)",
        "attention": "attention kernel: 'dot_product' (materialized), 'flash' (Splash on TPU), 'cudnn_flash_te'",
        "quantization": "matmul quantization recipe: '' (none), 'int8', 'fp8_full', 'fp8_gpu', 'nanoo_fp8', ...",
        "cudnn_flash_te": "attention value: cuDNN flash attention through Transformer Engine (GPU)"}),
    *_levers("jax", "JAX on GPU (cuDNN)", JAX_DOT_PRODUCT_ATTENTION, {
        "jax.nn.dot_product_attention": "scaled dot-product attention; implementation='cudnn' runs cuDNN flash "
                                        "attention",
        "implementation": "jax.nn.dot_product_attention argument: 'xla' or 'cudnn'"}),
    *_levers("maxtext", "MaxText with Qwix quantization; recipe by chip", MAXTEXT_TUNING + "; " + MAXTEXT_TYPES, {
        "use_qwix_quantization": "true: quantize the matmuls with Qwix, by the `quantization` recipe",
        "int8": "quantization recipe for v6e and earlier TPUs (int8 MXU rate)",
        "fp8_full": "quantization recipe for TPU7x (v7x) and later: FP8 forward and backward",
        "fp8_gpu": "quantization recipe for NVIDIA GPUs (FP8)",
        "nanoo_fp8": "quantization recipe for AMD GPUs (FP8)"}),
    *_levers("maxtext", "MaxText's input pipeline, any platform", MAXTEXT_BASE_INPUT, {
        "dataset_type": "input pipeline; 'synthetic' feeds generated batches (no loading)",
        "reuse_example_batch": "1: every step reuses the first batch ('for testing TPU performance')",
        "grain_worker_count": "worker processes of the Grain input pipeline (default 4)"}),
    *_levers("maxtext", "MaxText remat_policy value", MAXTEXT_DECODER, {
        "full": "keep nothing, recompute the layer",
        "save_qkv_proj": "keep query/key/value projections",
        "save_dot_except_mlp": "save_qkv_proj + out_proj",
        "save_dot_with_context_except_mlp": "save_dot_except_mlp + the attention context",
        "minimal": "keep every dot without batch dims (checkpoint_dots_with_no_batch_dims)",
        "minimal_offloaded": "offload what minimal keeps to host memory",
        "custom": "per-tensor 'remat' / 'device' / 'offload'"}),
    *_levers("jax", "JAX on any platform", JAX_REMAT, {
        "jax.checkpoint": "rematerialise a function in the backward pass",
        "policy": "jax.checkpoint argument: which intermediates are saved",
        "checkpoint_name": "jax.ad_checkpoint.checkpoint_name: names an intermediate for name-based policies"}),
    *[Lever(f"jax.checkpoint_policies.{n}", "jax", "JAX on any platform", JAX_CKPT.format(n), m) for n, m in {
        "dots_with_no_batch_dims_saveable": "save matmul results without batch dims",
        "save_only_these_names": "save only the named intermediates",
        "save_and_offload_only_these_names": "save some names, offload others to host memory"}.items()],
    *_levers("jax", "arguments of save_and_offload_only_these_names", JAX_CKPT.format(
        "save_and_offload_only_these_names"), {
        "names_which_can_be_saved": "names kept in device memory",
        "names_which_can_be_offloaded": "names moved to host memory",
        "offload_src": "memory kind offloaded from ('device')",
        "offload_dst": "memory kind offloaded to ('pinned_host')"}),
    *_levers("jax", "JAX on TPU and GPU", JAX_MEMORIES, {
        "memory_kind": "the memory an array lives in ('device', 'pinned_host')",
        "pinned_host": "host memory the accelerator reads over PCIe"}),
    *_levers("jax", "JAX on any platform", JAX_LAYOUT, {
        "jax.experimental.layout": "device-local layout control (Format, Layout)",
        "jax.jit": "compile a function; in_shardings= takes Format(Layout.AUTO)",
        "in_shardings": "jax.jit argument: shardings (or Formats) of the inputs",
        "input_formats": "compiled.input_formats: the layouts XLA chose for the inputs"}),
    *_levers("jax", "JAX on any platform", JAX_CONV, {
        "jax.lax.conv_general_dilated": "convolution with explicit dimension numbers",
        "dimension_numbers": "conv_general_dilated argument: the layouts of lhs, rhs and output"}),
    *_levers("jax", "JAX on any platform", JAX_SHARDING, {
        "PartitionSpec": "jax.sharding.PartitionSpec; PartitionSpec() replicates"}),
    # Other frameworks' counterparts, named when the program is theirs (analyzer/hlo/framework.py).
    *_levers("torch_xla", "PyTorch/XLA", TORCH_XLA_SPMD, {
        "torch_xla": "PyTorch/XLA, the PyTorch front end of XLA",
        "torch_xla.distributed.spmd.mark_sharding": "annotate a tensor's sharding over a Mesh with a partition spec",
        "mark_sharding": "torch_xla.distributed.spmd.mark_sharding",
        "partition_spec": "mark_sharding argument: the mesh axis of each tensor dimension (None: replicated)"}),
    *_levers("torch_xla", "PyTorch/XLA", TORCH_XLA_LOADER, {
        "MpDeviceLoader": "torch_xla.distributed.parallel_loader.MpDeviceLoader: loads the next batches onto the "
                          "device in background threads",
        "parallel_loader": "torch_xla.distributed.parallel_loader"}),
    *_levers("torch_xla", "PyTorch/XLA", TORCH_XLA_CKPT, {
        "torch_xla.utils.checkpoint.checkpoint": "activation checkpointing (recompute a block in the backward pass)"}),
    *_levers("torch_xla", "PyTorch/XLA on TPU v3+", TORCH_XLA_FLASH, {
        "torch_xla.experimental.custom_kernel.flash_attention": "the Pallas flash attention kernel for PyTorch/XLA",
        "custom_kernel": "torch_xla.experimental.custom_kernel",
        "flash_attention": "torch_xla.experimental.custom_kernel.flash_attention"}),
    *_levers("te", "TransformerEngine (PyTorch and JAX), NVIDIA GPUs", TE_API, {
        "transformer_engine": "NVIDIA TransformerEngine",
        "fp8_autocast": "context in which TransformerEngine modules run their GEMMs in FP8",
        "DelayedScaling": "transformer_engine.common.recipe.DelayedScaling: the FP8 scaling recipe",
        "DotProductAttention": "transformer_engine.pytorch.DotProductAttention: fused (flash / cuDNN) attention"}),
    *_levers("tf", "TensorFlow", TF_DATA, {
        "tf.data.Dataset.prefetch": "overlap producing the next batches with the step (buffer tf.data.AUTOTUNE)",
        "num_parallel_calls": "Dataset.map / interleave argument: parallel preprocessing (tf.data.AUTOTUNE)"}),
]}

FLAG_KINDS = ("xla_flag", "libtpu_flag")


def name(n: str) -> str:
    """``n`` itself, after checking that it is a verified lever (KeyError otherwise)."""
    if n not in LEVERS:
        raise KeyError(f"{n!r} is not in rules/levers.py: check it in a public source and add it")
    return n


def flag(n: str, value) -> str:
    """``--n=value`` for a verified XLA or libtpu flag."""
    if LEVERS[name(n)].kind not in FLAG_KINDS:
        raise KeyError(f"{n!r} is a {LEVERS[n].kind}, not a flag")
    return f"--{n}={str(value).lower() if isinstance(value, bool) else value}"


def flags(**values) -> str:
    """Several flags, space separated, in the order given."""
    return " ".join(flag(n, v) for n, v in values.items())


# Scoped VMEM (KiB): MaxText's setting for dense compute-bound models (xla_flags_library.py: 98304,
# "experimentally recommended"; v6e has 128 MiB), else the chip's whole VMEM, which is what the Ironwood
# recipes set on TPU7x (tpu-recipes training/ironwood/*/run_recipe.sh: 65536 of its 64 MiB per TensorCore).
DENSE_SCOPED_VMEM_KIB = 98304


def scoped_vmem(chip) -> str:
    """The scoped-VMEM lever for a TPU chip, at most its VMEM; '' for a chip without VMEM."""
    vmem = getattr(chip, "vmem_bytes", None) or 0
    if not vmem:
        return ""
    kib = int(min(DENSE_SCOPED_VMEM_KIB, vmem // 1024))
    per = "TensorCore" if (chip.tensorcores_per_chip or 1) > 1 or chip.devices_per_chip > 1 else "chip"
    return (f"{name('LIBTPU_INIT_ARGS')}: {flag('xla_tpu_scoped_vmem_limit_kib', kib)} (the VMEM one op may use, "
            f"which bounds the kernel's tile sizes; {chip.name} has {vmem / 2**20:.0f} MiB per {per}: MaxText's dense "
            f"setting is {DENSE_SCOPED_VMEM_KIB} KiB where it fits, the TPU7x recipes use all 65536)")


def target(platform: str, chip) -> str:
    """'tpu', 'gpu' or 'cpu': what the advice is for. A capture says it; an HLO-only run ('hlo') is what its
    chip is (``--chip a100`` is a GPU), by vendor."""
    if platform in ("tpu", "gpu", "cpu"):
        return platform
    vendor = getattr(chip, "vendor", "")
    return {"google": "tpu", "nvidia": "gpu", "amd": "gpu"}.get(vendor, "cpu")

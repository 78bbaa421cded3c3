"""The fixes' words for programs that are not JAX's: PyTorch/XLA, TensorFlow and TransformerEngine.

A rule's fix names MaxText keys and JAX APIs for a JAX program (and when the framework is unknown). For a
PyTorch/XLA or TensorFlow program (analyzer/hlo/framework.py) it names that framework's counterpart where one
is verified (rules/levers.py), and says in words what to change where none is: no ``Layout.AUTO``, MaxText key
or ``cudnn_flash_te`` for them. A TransformerEngine program gets TE's FP8 and attention, not MaxText's recipes.
"""

from __future__ import annotations

from .levers import name

LABELS = {"pytorch_xla": "PyTorch/XLA", "tensorflow": "TensorFlow"}


def other(target) -> str | None:
    """The framework when the program is PyTorch/XLA's or TensorFlow's; None for JAX (or unknown, read as JAX)."""
    fw = getattr(target, "framework", "unknown")
    return fw if fw in LABELS else None


def uses_te(target) -> bool:
    return "transformer_engine" in getattr(target, "libraries", ())


def label(fw: str) -> str:
    return LABELS.get(fw, fw)


def batch(fw: str) -> str:
    return "the per-device batch (global batch / data-parallel devices)"


def recompute(fw: str) -> str:
    """Activation checkpointing, in the framework's words."""
    if fw == "pytorch_xla":
        return f"wrap fewer blocks in {name('torch_xla.utils.checkpoint.checkpoint')} (each one wrapped is recomputed)"
    return "recompute fewer layers (the blocks wrapped for gradient recomputation are recomputed in the backward pass)"


def recompute_more(fw: str) -> str:
    if fw == "pytorch_xla":
        return f"wrap more blocks in {name('torch_xla.utils.checkpoint.checkpoint')}"
    return "recompute more layers in the backward pass"


def shard_over(fw: str, what: str) -> str:
    if fw == "pytorch_xla":
        return (f"{what} with {name('torch_xla.distributed.spmd.mark_sharding')} ({name('partition_spec')}: the "
                "mesh axis of each dimension, None to replicate it)")
    return f"{what} in the distribution strategy's layout of those tensors"


def replicate(fw: str) -> str:
    if fw == "pytorch_xla":
        return (f"{name('torch_xla.distributed.spmd.mark_sharding')} with None for every dimension in its "
                f"{name('partition_spec')}, or no annotation")
    return "leave them out of the distribution strategy's sharding"


def loader(fw: str) -> str:
    if fw == "pytorch_xla":
        return (f"load batches onto the device in the background with {name('MpDeviceLoader')} "
                f"(torch_xla.distributed.{name('parallel_loader')}) and give the DataLoader more worker processes")
    return (f"end the tf.data pipeline with {name('tf.data.Dataset.prefetch')}(tf.data.AUTOTUNE) and run its "
            f"map steps with {name('num_parallel_calls')}=tf.data.AUTOTUNE")


def layouts(fw: str) -> str:
    return (f"{label(fw)} gives XLA no input-layout choice to name here: keep each tensor in the dimension order "
            "its consumer reads (no permute / transpose before a matmul or convolution, contracting dimension "
            "minor-most on both sides), so XLA has no layout change to copy")


def widths(fw: str, multiple: int) -> str:
    return (f"in the {label(fw)} model, make the hidden (embedding), MLP, attention-head and vocabulary widths "
            f"multiples of {multiple} (pad the vocabulary)")


def attention(target, tpu: bool) -> str:
    fw = other(target)
    if uses_te(target) and not tpu:
        return f"Use TransformerEngine's fused attention ({name('transformer_engine')} {name('DotProductAttention')})"
    if fw == "pytorch_xla" and tpu:
        return f"Use a fused flash kernel: {name('torch_xla.experimental.custom_kernel.flash_attention')} (Pallas)"
    return (f"Use a fused (flash) attention kernel instead of the matmul-softmax-matmul the {label(fw or 'jax')} "
            "model writes out")


def low_precision(target, label_fp: str) -> str | None:
    """The 8-bit lever for TE or a non-JAX program; None: MaxText / Qwix's (JAX)."""
    if uses_te(target):
        return (f"run these layers inside {name('transformer_engine')}'s {name('fp8_autocast')} with an FP8 "
                f"recipe such as {name('DelayedScaling')} (TransformerEngine's FP8 GEMMs)")
    fw = other(target)
    if fw:
        return (f"{label(fw)} has no {label_fp} training recipe verified here: quantize these matmuls' operands "
                f"to {label_fp} with per-tensor scales (forward in E4M3, gradients in E5M2 for FP8) and keep "
                "the accumulation in bf16 / f32")
    return None


# MaxText config keys and what they are in any framework's words (a key has no counterpart outside MaxText).
KEY_WORDS = {
    "per_device_batch_size": "the per-device batch",
    "ici_fsdp_parallelism": "the FSDP degree (devices the weights are sharded over)",
    "ici_data_parallelism": "the data-parallel degree",
    "ici_tensor_parallelism": "the tensor-parallel degree",
    "ici_expert_parallelism": "the expert-parallel degree",
    "num_experts": "the experts per layer",
    "num_experts_per_tok": "the experts per token",
    "base_mlp_dim": "the MLP width",
}


def key(fw: str | None, maxtext_key: str) -> str:
    """A MaxText key for a JAX program, its meaning in words for another framework's."""
    return KEY_WORDS[maxtext_key] if fw else name(maxtext_key)

"""The category of an op (the breakdown and the report's op table show it).

From the HLO whenever there is some: the collective it performs, else its opcode, with fusions named
by their fusion kind (``kLoop`` -> 'loop fusion') and any op holding a dot/convolution a matmul. The
trace's own category (TPU ``hlo_category``) is used as given. Only an op with no HLO at all (a GPU
capture without a dump) is categorised from its name, by whole words: ``cudnn-conv.1`` and
``sm90_xmma_gemm_f32`` are matmuls, ``loop_convert_fusion`` is a fusion (``convert`` is not ``conv``)
and a TensorFlow ``TensorConversionOp`` is 'other'.
"""

from __future__ import annotations

import re

from ...parsers.hlo_text import Instruction
from .kernel_costs import custom_call_kind

# XLA:GPU's CUDA-graph replays (command buffers): the trace names the graph, no HLO instruction has its name.
COMMAND_BUFFER_NAME = re.compile(r"^command[-_]buffer(?:[._-]?\d+)?$")
CATEGORY_BY_FUSION_KIND = {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion",
                           "kCustom": "custom fusion"}
_DATA_FORMATTING = frozenset({"copy", "transpose", "bitcast-convert", "reshape", "pad", "slice", "concatenate",
                              "dynamic-slice", "dynamic-update-slice"})
# Words of GPU op/kernel names that mean a matmul or convolution library call.
_MATMUL_WORDS = frozenset({"conv", "convolution", "cudnn", "gemm", "matmul", "dot", "cublas", "cublaslt",
                           "hipblas", "hipblaslt", "rocblas", "miopen", "xmma", "cutlass", "wgmma"})
_MATMUL_WORD = re.compile(r"^(?:[sdhcz]?gemm\w*|conv[123]d|\w*gemm)$")
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])")


def name_words(name: str) -> list[str]:
    """Lower-case words of an op or kernel name: separators and camelCase boundaries split."""
    return [w.lower() for w in _WORD_SPLIT.split(name) if w and not w.isdigit()]


def category_from_name(op_name: str) -> str:
    """Category of an op known only by name (no HLO): whole words, never substrings."""
    words = name_words(op_name)
    if any(w in _MATMUL_WORDS or _MATMUL_WORD.match(w) for w in words):
        return "convolution"
    if "transpose" in words or (words and words[0] == "copy"):
        return "data formatting"
    return "fusion" if "fusion" in words else "other"


def category_from_hlo(ins: Instruction, is_matmul: bool) -> str:
    """Category of an instruction that is not a collective: opcode, fusion kind, matmul."""
    if ins.opcode == "custom-call" and custom_call_kind(ins) in ("gemm", "conv"):
        return "convolution"  # a cuBLAS/hipBLAS gemm or cuDNN convolution library call
    if ins.opcode in ("dot", "convolution") or is_matmul:
        return "convolution fusion" if ins.opcode == "fusion" else ins.opcode
    if ins.opcode == "fusion":
        return CATEGORY_BY_FUSION_KIND.get(ins.attrs.get("kind", ""), "fusion")
    if ins.opcode in _DATA_FORMATTING:
        return "data formatting"
    return ins.opcode

"""Which framework built the program, read from what XLA kept of it: module names, op metadata, custom calls.

- PyTorch/XLA names its programs ``SyncTensorsGraph.N`` (``torch_xla``'s ``SyncTensorsGraph`` TraceMe and
  module), ``IrToHlo.N`` when lowered op by op; its op metadata names ATen ops (``aten__mm``, ``aten::mm``).
- JAX names them after the jitted function: ``jit_train_step``, ``pjit_...``, ``pmap_...``; op metadata
  paths read ``jit(train_step)/...``. Flax and MaxText show in the metadata's source files.
- TensorFlow's XLA programs are ``a_inference_...`` / ``cluster_N``; a capture with TF ops and no XLA program
  at all is TensorFlow too.
- TransformerEngine (JAX or PyTorch) calls its kernels through custom calls ``te_*`` (``te_gemm_ffi``,
  ``te_fused_attn_forward_ffi``), or shows its source files.

The rules' fixes name the levers of the framework found (rules/levers.py); ``unknown`` reads as JAX.
"""

from __future__ import annotations

import re

import pandas as pd

FRAMEWORKS = ("jax", "pytorch_xla", "tensorflow", "unknown")
LIBRARIES = ("flax", "maxtext", "transformer_engine")
_MODULE = {
    "pytorch_xla": re.compile(r"^(?:SyncTensorsGraph|IrToHlo)\b"),
    "tensorflow": re.compile(r"^(?:a_inference_|__inference_|cluster_\d)"),
    "jax": re.compile(r"^(?:jit_|pjit_|pmap_|xmap_)"),
}
_OP_PATH = {"pytorch_xla": re.compile(r"\baten(?:::|__)"), "jax": re.compile(r"^(?:jit|pjit|pmap)\(")}
_SOURCE = {"pytorch_xla": re.compile(r"(?:^|/)torch(?:_xla)?/"), "jax": re.compile(r"(?:^|/)(?:jax|flax)/")}
_LIBRARY_SOURCE = {"flax": re.compile(r"(?:^|/)flax/"), "maxtext": re.compile(r"(?:^|/)(?:MaxText|maxtext)/"),
                   "transformer_engine": re.compile(r"(?:^|/)transformer_engine/")}
_TE_CALL = re.compile(r'custom_call_target="te_')


def _texts(ops: pd.DataFrame, column: str) -> pd.Series:
    if column not in ops or ops.empty:
        return pd.Series([], dtype=object)
    values = pd.Series(pd.unique(ops[column].astype(object).where(ops[column].notna(), "").astype(str)))
    return values[values != ""]


def _first_match(values: pd.Series, patterns: dict) -> tuple[str, str] | None:
    for framework, pattern in patterns.items():
        hit = values[values.str.contains(pattern)]
        if len(hit):
            return framework, str(hit.iloc[0])
    return None


def detect_framework(ops: pd.DataFrame, measured: bool) -> dict:
    """``{"name", "libraries", "evidence"}`` for the analysed program (``ops``: tables.OPS-like, its
    ``module``, ``tf_op`` (op metadata path), ``source`` and ``hlo_text``); ``measured``: a trace was read,
    so a capture with ops but no XLA program is TensorFlow."""
    modules, paths, sources = _texts(ops, "module"), _texts(ops, "tf_op"), _texts(ops, "source")
    libraries = [lib for lib, pattern in _LIBRARY_SOURCE.items() if sources.str.contains(pattern).any()]
    if "transformer_engine" not in libraries and _texts(ops, "hlo_text").str.contains(_TE_CALL).any():
        libraries.append("transformer_engine")
    found = (_first_match(modules, _MODULE) or _first_match(paths, _OP_PATH) or _first_match(sources, _SOURCE))
    if found is not None:
        name, what = found
        evidence = f"{what!r} ({'module name' if what in set(modules) else 'op metadata'})"
    elif measured and not ops.empty and modules.empty:
        name, evidence = "tensorflow", "TensorFlow ops only: no XLA program in the capture"
    else:
        name, evidence = "unknown", "no module name, op metadata or custom call says (advice reads as JAX)"
    if "transformer_engine" in libraries:
        evidence += "; TransformerEngine custom calls or sources"
    return {"name": name, "libraries": sorted(libraries), "evidence": evidence}

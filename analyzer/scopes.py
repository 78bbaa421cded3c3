"""Scopes: where in the model the step's time goes, by the framework name path of each op.

Each op's ``tf_op`` (its op_name metadata: a JAX name stack such as
``jit(train_step)/transpose(jvp(decoder))/layer_3/attention/dot_general``, Flax module names, PyTorch/XLA
scopes) is read as a path: its last part is the primitive (``dot_general``) and the parts before it are the
op's scope. :func:`scope_table` adds the step program's ops up per scope: each row has the ops directly in
it (``self_*``) and those in it or any scope below it (``total_*``); the root row (scope ``''``) holds the
whole step, so its totals are the sums over the ops.

JAX transformation wrappers are stripped so that the forward and the backward pass of a layer add up under
the layer: ``jvp(X)``, ``transpose(X)``, ``vmap(X)`` and ``linearize(X)`` read as ``X`` (nested too, so
``transpose(jvp(layer_3))`` is ``layer_3``), a wrapper around nothing (``jvp()``) is dropped, and so are
the rematerialisation parts ``checkpoint``, ``remat`` and ``rematted_computation``: the recomputed forward
counts under its layer, beside the layer's backward. Calls keep their names (``jit(_take)``, ``shard_map``,
``while/body``). An op XLA fused from several sources (``prefix/(a/x:b/y)``, or whole paths joined by ``;``)
counts in the deepest scope all of them share. Ops without a name path count in the root itself.

Per step and per device, as the ops table: measured and predicted seconds, FLOPs and bytes (per occurrence
x occurrences per step). Where a ``while`` or ``conditional`` event spans its body's events (XLA:CPU, as the
analysis' breakdown detects it: the ops' sum above the busy time), its own measured time is left out so no
second counts twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from .tables import DOC_BEGIN, DOC_END, Column, Table, json_schema_markdown

# Wrappers that name a transformation of the code inside them, not a place in the model.
TRANSFORMS = ("jvp", "transpose", "vmap", "linearize")
# Parts that say the code below them is rematerialised, not where it is.
REMAT_PARTS = ("checkpoint", "remat", "rematted_computation")
CONTAINER_OPCODES = ("while", "conditional")  # as analysis.CONTAINER_OPCODES (kept apart: analysis imports us)
ROOT = ""
ROOT_NAME = "(step)"


def _c(name, dtype, unit, meaning, json_type=None) -> Column:
    return Column(name, dtype, unit, meaning, name, json_type)


_SUMS = (("measured_s_per_step", "s", "measured seconds per step"),
         ("predicted_s_per_step", "s", "predicted (roofline) seconds per step"),
         ("flops_per_step", "flops", "FLOPs per step (ops of unknown FLOPs add nothing)"),
         ("bytes_per_step", "bytes", "bytes accessed per step (ops of unknown bytes add nothing)"))

SCOPES = Table("scopes", "one scope of the framework name path (tf_op) of the step program's ops", (
    _c("scope", "text", "", "the scope's path, transformation wrappers stripped; '' for the root (the whole step)",
       "string"),
    _c("name", "text", "", "its last part (the root: `(step)`)", "string"),
    _c("parent", "text", "", "the parent scope's path (null for the root)"),
    _c("depth", "int64", "count", "parts in the path: 0 for the root"),
    _c("ops", "int64", "count", "ops directly in this scope"),
    _c("total_ops", "int64", "count", "ops in this scope and the scopes below it"),
    *(_c(f"self_{n}", "float64", unit, f"{m}, ops directly in this scope") for n, unit, m in _SUMS),
    *(_c(f"total_{n}", "float64", unit, f"{m}, this scope and the scopes below it") for n, unit, m in _SUMS),
    _c("finding_keys", "text", "", "keys of the findings naming an op directly in this scope (empty: none)",
       "array of string"),
))
_SUM_NAMES = tuple(n for n, _, _ in _SUMS)


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` outside parentheses (empty pieces kept)."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif ch == sep and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    return pieces + [text[start:]]


def split_path(path: str) -> list[str]:
    """``path`` split at the ``/`` outside parentheses: ``a/jvp(b)/(c/d:e)/f`` -> a, jvp(b), (c/d:e), f."""
    return [p for p in _split_top(path, "/") if p]


def _unwrap(part: str) -> str:
    """``transpose(jvp(layer))`` -> ``layer``; ``jvp()`` -> ''; anything else as it is."""
    while part.endswith(")"):
        head, sep, inner = part.partition("(")
        if not sep or head not in TRANSFORMS:
            break
        part = inner[:-1]
    return "" if part in REMAT_PARTS else part


def _shared(scopes: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The longest scope every one of ``scopes`` starts with."""
    out: list[str] = []
    for level in zip(*scopes):
        if len(set(level)) > 1:
            break
        out.append(level[0])
    return tuple(out)


MAX_NESTING = 8  # fused sources inside fused sources: deeper (a hostile path) reads as plain parts


def scope_of(tf_op, _nesting: int = 0) -> tuple[str, ...]:
    """The scope of an op whose name path is ``tf_op``: its parts but the last (the primitive), wrappers
    stripped. A fused op's sources, as ``prefix/(a/x:b/y)`` or as whole paths joined by ``;``: the prefix and
    the longest scope all of them share."""
    if not isinstance(tf_op, str) or not tf_op:
        return ()
    whole = [m for m in _split_top(tf_op, ";") if m] if _nesting < MAX_NESTING else [tf_op]
    if len(whole) > 1:
        return _shared([scope_of(m, _nesting + 1) for m in whole])
    parts = split_path(tf_op.rstrip(":"))
    scope = tuple(p for p in map(_unwrap, parts[:-1]) if p)
    last = parts[-1] if parts else ""
    if last.startswith("(") and last.endswith(")") and ":" in last and _nesting < MAX_NESTING:
        return scope + _shared([scope_of(m, _nesting + 1) for m in _split_top(last[1:-1], ":")])
    return scope


def _per_op(ops: pd.DataFrame, busy_s: float | None) -> pd.DataFrame:
    """The step program's ops: their scope and per-step sums (container events left out where nested)."""
    in_step = ops[ops["in_step"]]
    count = in_step["occurrences_per_step"]
    measured = in_step["measured_s_per_step"]
    container = in_step["opcode"].isin(CONTAINER_OPCODES)
    if busy_s is not None and container.any() and float(measured.sum()) > busy_s:
        measured = measured.where(~container, 0.0)
    tf_ops = [t if isinstance(t, str) else "" for t in in_step["tf_op"]]
    scopes = {t: "/".join(scope_of(t)) for t in set(tf_ops)}  # ops share few paths
    return pd.DataFrame({
        "scope": [scopes[t] for t in tf_ops],
        "op_name": in_step["op_name"].astype(str),
        "measured_s_per_step": measured,
        "predicted_s_per_step": in_step["predicted_s_per_step"],
        "flops_per_step": in_step["flops"] * count,
        "bytes_per_step": in_step["bytes_accessed"] * count,
    }, index=in_step.index)


def scope_table(ops: pd.DataFrame, findings: Iterable[tuple[str, Iterable[str]]] = (), *,
                busy_s: float | None = None) -> pd.DataFrame:
    """:data:`SCOPES` for the step program's ops (``ops``: ``analysis.ops``); ``findings``: (key, op names)
    pairs; ``busy_s``: the busy time per step, to see whether container events nest their bodies.

    Rows depth first, each scope's children by their total time (measured, else predicted), heaviest first."""
    per_op = _per_op(ops, busy_s)
    paths = {"/".join(p): p for p in map(scope_of, ops.loc[ops["in_step"], "tf_op"].unique())}
    groups = per_op.groupby("scope", sort=False)
    own = groups[list(_SUM_NAMES)].sum(min_count=1)  # NaN where every op's value is unknown
    counts = groups.size()
    scope_of_op = dict(zip(per_op["op_name"], per_op["scope"]))
    keys: dict[str, set[str]] = {}
    for key, names in findings:
        for name in names:
            if name in scope_of_op:
                keys.setdefault(scope_of_op[name], set()).add(key)
    rows = _rows(own, counts, paths, keys)
    return SCOPES.coerce(_depth_first(pd.DataFrame(rows), per_op["measured_s_per_step"].notna().any()))


def _rows(own: pd.DataFrame, counts: pd.Series, paths: dict[str, tuple[str, ...]],
          keys: dict[str, set[str]]) -> list[dict]:
    """One row per scope and every scope above one, self and total sums filled in."""
    rows: dict[str, dict] = {}

    def row(path: tuple[str, ...]) -> dict:
        scope = "/".join(path)
        if scope not in rows:
            rows[scope] = {"scope": scope, "name": path[-1] if path else ROOT_NAME,
                           "parent": "/".join(path[:-1]) if path else np.nan, "depth": len(path),
                           "ops": 0, "total_ops": 0, "finding_keys": " ".join(sorted(keys.get(scope, ()))),
                           **{f"{k}_{n}": np.nan for k in ("self", "total") for n in _SUM_NAMES}}
        return rows[scope]

    n_ops = counts.to_dict()
    for scope, values in own.to_dict("index").items():  # plain Python: thousands of scopes x their depth
        path = paths[scope]
        here = row(path)
        here["ops"] = int(n_ops[scope])
        known = [(n, float(values[n])) for n in _SUM_NAMES if not math.isnan(values[n])]
        for n, value in known:
            here[f"self_{n}"] = value
        for depth in range(len(path) + 1):  # this scope and every one above it
            above = row(path[:depth])
            above["total_ops"] += here["ops"]
            for n, value in known:
                total = above[f"total_{n}"]
                above[f"total_{n}"] = value if math.isnan(total) else total + value
    row(())
    return list(rows.values())


def _depth_first(frame: pd.DataFrame, measured: bool) -> pd.DataFrame:
    """The rows in depth-first order, children heaviest first."""
    weight = frame["total_measured_s_per_step" if measured else "total_predicted_s_per_step"].fillna(0.0)
    parents, scopes = frame["parent"].tolist(), frame["scope"].tolist()
    children: dict[str, list[int]] = {}
    for i in np.argsort(-weight.to_numpy(), kind="stable"):
        if isinstance(parents[i], str):
            children.setdefault(parents[i], []).append(int(i))
    order, stack = [], [scopes.index(ROOT)]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(children.get(scopes[i], [])))
    return frame.iloc[order].reset_index(drop=True)


def scopes_of(analysis, findings: Iterable[tuple[str, Iterable[str]]] = ()) -> pd.DataFrame:
    """:func:`scope_table` of an :class:`~.analysis.Analysis` (its ops, its busy time per step)."""
    busy = analysis.device_steps["busy_s"]
    return scope_table(analysis.ops, findings, busy_s=float(busy.mean()) if len(busy) else None)


DOC_MARK = "<!-- scopes fields: generated from analyzer/scopes.py by python -m xladiag.analyzer.scopes -->"


def scopes_doc_markdown() -> str:
    """The ``docs/json_schema.md`` field table of :data:`SCOPES` (between its own markers)."""
    text = json_schema_markdown(SCOPES)
    return text.replace(DOC_BEGIN, DOC_MARK).replace(DOC_END, "<!-- end of scopes fields -->")


if __name__ == "__main__":
    print(scopes_doc_markdown(), end="")

"""Join what the HLO says about each op to its measured times.

Sources, in order of trust: the trace's own per-op metadata (TPU: HLO text, category,
flops, bytes), then the after-optimizations HLO dump (any platform), then the op name
(GPU captures without a dump). Every number column has a ``*_source`` column beside it.

The dump module of each op is the one ``dump_matching`` matched to its program (module name and
program id), never one found by name alone.

Also here, because they are facts about one instruction, not about time:
- the collective each op performs, its replica groups and payload (priced on the chip's links later, in
  ``models/collective_pricing.py``);
- host transfers (``copy-start``/``copy-done`` touching memory space ``S(5)``), whose
  bytes cross PCIe, not HBM;
- result bytes, operand vs result layouts, fused opcodes and layout changes (``layout_facts``), and
  whether an op is recomputation, so rules read columns instead of parsing HLO again.
"""

from __future__ import annotations

import functools

import math

import numpy as np
import pandas as pd

from ...parsers.hlo_text import HloModule, HloParseError, Instruction, parse_instruction
from .collective_compute import collective_matmuls, module_graph
from .collective_kinds import KINDS, kind_of
from .attention import attention_roles
from .op_bytes import wrapped_instruction
from .costs import matmul_dims
from .layouts import fused_opcodes, is_recomputed, layout_facts
from .op_categories import category_from_hlo, category_from_name

HOST_MEMORY_SPACE = 5
# Custom-call targets that run a hand-written kernel (Pallas/Mosaic TPU, cuDNN attention, Triton/Pallas GPU).
_KERNEL_TARGETS = r'custom_call_target="(?:tpu_custom_call|__cudnn\$fmha[^"]*|__gpu\$xla\.gpu\.triton|mosaic_gpu[^"]*)"'

FACT_COLUMNS = [
    "category", "opcode", "fusion_kind", "hlo_text", "tf_op", "source",
    "flops", "flops_source", "bytes_accessed", "bytes_source", "hbm_bytes", "host_bytes", "model_flops",
    "dtype", "is_matmul", "is_async_start", "is_async_done", "is_host_transfer", "transfer_kind", "start_op",
    "collective_kind", "collective_payload", "replica_groups", "source_target_pairs",
    "collective_matmuls", "collective_matmul_flops",
    "operand_layout", "result_layout", "result_bytes", "fused_opcodes", "layout_change", "is_data_movement",
    "is_recomputed", "matmul_m", "matmul_n", "matmul_k", "matmul_batch", "attention_role", "attention_scores_op",
]
# Per-instruction facts with their value when an op has no HLO at all.
_NO_HLO = {"opcode": None, "fusion_kind": None, "hlo_text": None, "is_async_start": False, "is_async_done": False,
           "is_host_transfer": False, "host_bytes": 0.0, "collective_kind": None, "category": None,
           "is_matmul": False, "dtype": None, "operand_layout": None, "result_layout": None,
           "result_bytes": np.nan, "fused_opcodes": None, "layout_change": None, "is_data_movement": False,
           "collective_payload": np.nan, "replica_groups": None, "source_target_pairs": None,
           "transfer_kind": None, "start_op": None,
           "matmul_m": np.nan, "matmul_n": np.nan, "matmul_k": np.nan, "matmul_batch": np.nan}


def _array_shapes(shape) -> list:
    return list(shape.elements) if shape.is_tuple else [shape]


def _largest_bytes(shapes) -> float:
    sizes = [s.logical_bytes for s in shapes if not s.is_tuple and s.dims is not None]
    return float(max(sizes)) if sizes else 0.0


def _total_bytes(shapes) -> float:
    return float(sum(s.logical_bytes for s in shapes if not s.is_tuple and s.dims is not None))


def _collective_payload(kind: str, ins: Instruction, operand_shapes) -> float:
    """V of one device's collective: the buffer it holds after (all-gather) or before (reduce-scatter) the
    collective; a variadic (combined, tuple-shaped) collective moves the sum of its members. The caller
    scales an all-to-all's per-device buffer to the global array."""
    result = _array_shapes(ins.shape)
    operands = [s for shape in operand_shapes for s in _array_shapes(shape)]
    if ins.opcode.endswith("-start") and ins.shape.is_tuple and len(result) == 2 and result[-1].is_tuple:
        result = _array_shapes(result[-1])  # all-gather-start: ((operands), (results))
    if kind == "reduce-scatter":
        return _total_bytes(operands) or _total_bytes(result)
    return _total_bytes(result) or _total_bytes(operands)


def _touches_host(ins: Instruction, operand_shapes) -> bool:
    shapes = _array_shapes(ins.shape) + [s for shape in operand_shapes for s in _array_shapes(shape)]
    return any(getattr(s, "memory_space", 0) == HOST_MEMORY_SPACE for s in shapes)


def _category(ins: Instruction | None, op_name: str, kind: str | None, is_matmul: bool) -> str:
    if kind:
        return kind
    return category_from_name(op_name) if ins is None else category_from_hlo(ins, is_matmul)


def _dump_costs(ops: pd.DataFrame, by_program: dict) -> tuple[pd.DataFrame, list]:
    """Per op row: its dump costs row (NaN where none) and its (DumpModule, Instruction) or None."""
    frames = [dm.costs.assign(module=key[0], program_id=key[1]) for key, dm in by_program.items()]
    keys = ops[["module", "program_id", "op_name"]].astype(str).rename(columns={"op_name": "name"})
    if frames:
        costs = pd.concat(frames, ignore_index=True).drop_duplicates(["module", "program_id", "name"])
        rows = keys.merge(costs, on=["module", "program_id", "name"], how="left")
    else:
        rows = keys.assign(**{c: np.nan for c in ("flops", "flops_source", "bytes_accessed", "hbm_bytes",
                                                 "host_bytes", "dtype", "is_matmul", "source_file", "source_line",
                                                 "op_name")})
    rows.index = ops.index
    found = []
    for (module, pid, name), in_dump in zip(keys.itertuples(index=False), rows["flops_source"].notna()):
        dm = by_program.get((module, pid)) if in_dump else None
        found.append((dm, dm.module.instruction(name)) if dm is not None else None)
    return rows, found


def attach_hlo_facts(
    op_table: pd.DataFrame,
    trace_metadata: pd.DataFrame | None,
    dump_by_program: dict,
) -> pd.DataFrame:
    """``op_table`` (one row per op) plus FACT_COLUMNS; ``measured_s`` = mean time per occurrence.

    ``dump_by_program``: (module, program_id) -> ``DumpModule`` (``dump_matching``)."""
    ops = op_table.copy()
    ops["measured_s"] = ops["mean_s"]
    ops["program_id"] = ops["program_id"].fillna("").astype(str)

    # 1. The trace's metadata (TPU).
    if trace_metadata is not None and len(trace_metadata):
        md = trace_metadata.assign(program_id=trace_metadata["program_id"].fillna("").astype(str))
        ops = ops.merge(md, on=["program_id", "op_name"], how="left")
    else:
        for col in ("hlo_text", "category", "flops", "model_flops", "bytes_accessed", "hbm_bytes", "tf_op", "source"):
            ops[col] = np.nan if col in ("flops", "model_flops", "bytes_accessed", "hbm_bytes") else None
    # XLA's cost analysis cannot see into kernels: a trace's 0 FLOPs for one means unknown, not none.
    kernel = ops["hlo_text"].fillna("").astype(str).str.contains(_KERNEL_TARGETS, regex=True)
    ops.loc[kernel & (ops["flops"] == 0), "flops"] = np.nan
    ops["flops_source"] = np.where(ops["flops"].notna(), "trace", "")
    ops["bytes_source"] = np.where(ops["bytes_accessed"].notna(), "trace", "")

    # 2. The matched dump module of each op's program.
    rows, found = _dump_costs(ops, dump_by_program)
    instructions: list[Instruction | None] = [f[1] if f else None for f in found]
    dump_modules: list[HloModule | None] = [f[0].module if f else None for f in found]
    if any(found):
        fill_flops = ops["flops"].isna() & rows["flops"].notna()
        ops.loc[fill_flops, "flops"] = rows.loc[fill_flops, "flops"]
        ops.loc[fill_flops, "flops_source"] = "hlo"
        # How a kernel's FLOPs were read (cost estimate, attention shapes) or why they are unknown.
        ops["cost_note"] = rows["flops_note"].where(ops["flops_source"] != "trace", "").fillna("")
        fill_bytes = ops["bytes_accessed"].isna() & rows["bytes_accessed"].notna()
        ops.loc[fill_bytes, "bytes_accessed"] = rows.loc[fill_bytes, "bytes_accessed"]
        ops.loc[fill_bytes, "hbm_bytes"] = rows.loc[fill_bytes, "hbm_bytes"]
        ops.loc[fill_bytes, "bytes_source"] = "hlo"
        ops["host_bytes"] = rows["host_bytes"].fillna(0.0)
        ops["dtype"] = rows["dtype"]
        ops["is_matmul"] = rows["is_matmul"].fillna(False).astype(bool)
        missing_src = ops["source"].isna() & rows["source_file"].notna() & (rows["source_file"] != "")
        # 'file:line', or just 'file' when the dump gives no line (NaN must not swallow the file).
        line = rows["source_line"].astype("Int64").astype(str).where(rows["source_line"].notna(), "")
        src = rows["source_file"].astype(str) + (":" + line).where(line != "", "")
        ops.loc[missing_src, "source"] = src[missing_src]
        missing_tf = ops["tf_op"].isna() & rows["op_name"].notna()
        ops.loc[missing_tf, "tf_op"] = rows.loc[missing_tf, "op_name"]
    else:
        ops["cost_note"] = ""
        ops["host_bytes"] = 0.0
        ops["dtype"] = None
        ops["is_matmul"] = False

    # 3. Per-instruction facts: from the dump's Instruction, else by parsing the trace's HLO text.
    texts = dict(zip(zip(ops["program_id"], ops["op_name"]), ops["hlo_text"]))
    facts = [
        _instruction_facts(ins, mod, text, name,
                           lambda n, pid=pid: _parse_trace_text(texts.get((pid, n))),
                           category)
        for ins, mod, text, name, pid, category in zip(
            instructions, dump_modules, ops["hlo_text"], ops["op_name"], ops["program_id"], ops["category"])
    ]
    fact_frame = pd.DataFrame(facts, index=ops.index, columns=list(_NO_HLO))  # columns even with no op
    for col in fact_frame.columns:
        if col in ("dtype", "category", "hlo_text") and col in ops:
            ops[col] = ops[col].where(ops[col].notna() & (ops[col].astype(str) != ""), fact_frame[col])
        elif col == "host_bytes":
            ops[col] = np.maximum(ops[col].fillna(0.0), fact_frame[col].fillna(0.0))
        elif col == "is_matmul":
            ops[col] = ops[col] | fact_frame[col].fillna(False).astype(bool)
        else:
            ops[col] = fact_frame[col]
    for col in ("is_async_start", "is_async_done", "is_host_transfer", "is_data_movement"):
        ops[col] = ops[col].fillna(False).astype(bool)
    roles = _attention_roles(dump_modules, instructions)
    ops["attention_role"] = [r[0] if r else None for r in roles]
    ops["attention_scores_op"] = [r[1] if r else None for r in roles]
    ops["is_recomputed"] = is_recomputed(ops["op_name"], ops["tf_op"]).astype(bool)
    ops["collective_matmuls"], ops["collective_matmul_flops"] = _collective_matmuls(ops, dump_modules)
    # Async starts only issue work; the done op (or the synchronous op) carries the transfer.
    starts = ops["is_async_start"]
    ops.loc[starts, ["bytes_accessed", "hbm_bytes", "host_bytes"]] = 0.0
    # A host transfer moves its bytes over PCIe: don't price them against HBM.
    host = ops["is_host_transfer"] & ~starts
    ops.loc[host, "hbm_bytes"] = 0.0
    ops.loc[host, "bytes_accessed"] = ops.loc[host, "host_bytes"]
    for col in FACT_COLUMNS:
        if col not in ops:
            ops[col] = None
    ops["hlo_text"] = ops["hlo_text"].fillna("")
    ops["category"] = ops["category"].fillna("other")
    # A fusion whose body holds a dot/convolution is a matmul, whatever its fusion kind.
    matmul_fusion = (ops["opcode"] == "fusion") & ops["is_matmul"] & ops["category"].str.endswith("fusion")
    ops.loc[matmul_fusion, "category"] = "convolution fusion"
    return ops


def _collective_matmuls(ops: pd.DataFrame, modules: list) -> tuple[list, list]:
    """Per op row: the matmuls a collective feeds or follows (comma-separated names) and their summed FLOPs
    per occurrence (NaN: not a collective, or no matmul reached); ``collective_compute``. The program's
    graph is its dump module, else the instruction texts the trace carries per op."""
    names: list = [None] * len(ops)
    flops: list = [np.nan] * len(ops)
    carries = (ops["collective_kind"].notna() & ~ops["is_async_start"]).to_numpy()
    if not carries.any():
        return names, flops
    keys = list(zip(ops["module"].astype(str), ops["program_id"].astype(str), ops["op_name"].astype(str)))
    programs: dict = {}
    for i in np.flatnonzero(carries):
        graph = ("module", id(modules[i])) if modules[i] is not None else ("trace",) + keys[i][:2]
        programs.setdefault(graph, []).append(int(i))
    flops_of = dict(zip(keys, ops["flops"].astype(float)))
    for graph, rows in programs.items():
        if graph[0] == "module":
            by_name, matmul = module_graph(modules[rows[0]])
        else:
            by_name, matmul = _trace_graph(ops, graph[1], graph[2])
        links = collective_matmuls(by_name, matmul, {keys[i][2]: str(ops["collective_kind"].iat[i]) for i in rows})
        for i in rows:
            dots = links.get(keys[i][2], ())
            if dots:
                names[i] = ",".join(dots)
                flops[i] = float(np.nansum([flops_of.get((keys[i][0], keys[i][1], d), np.nan) for d in dots]))
    return names, flops


def _trace_graph(ops: pd.DataFrame, module: str, program_id: str) -> tuple[dict, dict]:
    """One program's instructions parsed from the trace's per-op HLO text, and which are matmuls."""
    rows = ops[(ops["module"].astype(str) == module) & (ops["program_id"].astype(str) == program_id)]
    by_name, matmul = {}, {}
    for name, text, is_mm, category in zip(rows["op_name"], rows["hlo_text"], rows["is_matmul"], rows["category"]):
        ins = _parse_trace_text(text)
        if ins is not None:
            by_name[str(name)] = ins
            matmul[str(name)] = bool(is_mm) or category == "convolution fusion" or ins.opcode in ("dot", "convolution")
    return by_name, matmul


def _attention_roles(modules: list, instructions: list) -> list:
    """Per op row: (role, scores op) of the scores -> softmax -> context chain it is part of, or None."""
    by_module: dict[int, dict] = {}
    out = []
    for mod, ins in zip(modules, instructions):
        if mod is None or ins is None:
            out.append(None)
            continue
        if id(mod) not in by_module:
            by_module[id(mod)] = attention_roles(mod)
        out.append(by_module[id(mod)].get(ins.name))
    return out


def _parse_trace_text(text) -> Instruction | None:
    if not isinstance(text, str) or not text.startswith("%"):
        return None
    return _parsed_text(text)


@functools.lru_cache(maxsize=4096)  # the op facts and the collective graph read the same texts: parsed once
def _parsed_text(text: str) -> Instruction | None:
    try:
        return parse_instruction(text)
    except (HloParseError, ValueError):
        return None


def _instruction_facts(ins, module, trace_text, op_name: str, trace_lookup, category=None) -> dict:
    if ins is None:
        ins = _parse_trace_text(trace_text)
    category = category if isinstance(category, str) else None
    facts: dict = dict(_NO_HLO)
    if ins is None:
        transfer = kind_of(category=category, name=op_name)
        kind = transfer if transfer in KINDS else None
        # Unparsed text (damaged, or a form we do not read): the trace's category or the op's name still
        # says whether it is an async start or done; a done op timed as compute gave efficiency ~1e6.
        opcode = (category or op_name or "").rsplit(".", 1)[0]
        facts.update(transfer_kind=transfer, collective_kind=kind, category=_category(None, op_name, kind, False),
                     is_matmul=False, is_async_start=opcode.endswith("-start"), is_async_done=opcode.endswith("-done"))
        return facts

    operand_shapes = module.resolve_operand_shapes(ins) if module is not None else ins.operand_shapes
    wrapped = wrapped_instruction(module, ins) if module is not None else None
    to_host = ins.opcode in ("copy-start", "copy-done") and _touches_host(ins, operand_shapes)
    transfer = kind_of(ins.opcode, wrapped=wrapped.opcode if wrapped is not None else None, category=category,
                       to_host=to_host)
    kind = transfer if transfer in KINDS else None  # the ring model's collectives; send/recv are not priced
    is_matmul = ins.opcode in ("dot", "convolution")
    layout = layout_facts(ins, operand_shapes, fused_opcodes(ins, module))
    # A fusion that only moves data (a transpose/copy fusion) is data formatting whatever its kind.
    category = "data formatting" if layout["is_data_movement"] and not kind else _category(ins, op_name, kind, is_matmul)
    facts.update(
        opcode=ins.opcode,
        fusion_kind=ins.attrs.get("kind"),
        hlo_text=ins.text.strip(),
        is_async_start=ins.opcode.endswith("-start"),
        is_async_done=ins.opcode.endswith("-done"),
        transfer_kind=transfer,
        collective_kind=kind,
        category=category,
        is_matmul=is_matmul,
        dtype=(operand_shapes[0].dtype if is_matmul and operand_shapes else _array_shapes(ins.shape)[0].dtype),
        **layout,
    )
    if ins.opcode in ("dot", "convolution", "fusion"):
        try:
            dims = matmul_dims(ins, module)
        except (ValueError, IndexError, KeyError):  # odd labels or a missing body: dims unknown
            dims = None
        if dims:
            facts.update({f"matmul_{k}": float(v) for k, v in dims.items()})
    if to_host:
        facts["is_host_transfer"] = True
        facts["host_bytes"] = _largest_bytes(_array_shapes(ins.shape) + [s for sh in operand_shapes for s in _array_shapes(sh)])
    # The one start<->done pairing: a done op's operand that is a start op (dump or trace text).
    start = _partner(ins, _module_lookup(module) if module is not None else trace_lookup) \
        if facts["is_async_done"] else None
    facts["start_op"] = start.name if start is not None else None
    if kind is not None and not facts["is_async_start"]:
        payload = _collective_payload(kind, ins, operand_shapes)
        if facts["is_async_done"]:
            # The start holds the replica groups (and, for async-start wrappers, the shapes).
            if start is not None:
                start_operands = module.resolve_operand_shapes(start) if module is not None else start.operand_shapes
                payload = payload or _collective_payload(kind, start, start_operands)
                ins = start
        # The replica groups and payload are facts; their place on the mesh and their time depend on the chip
        # (models/collective_pricing.py).
        facts.update(collective_payload=payload, replica_groups=ins.attrs.get("replica_groups"),
                     source_target_pairs=ins.attrs.get("source_target_pairs"))
    return facts


def _partner(done: Instruction, lookup) -> Instruction | None:
    """The *-start op a *-done waits on (its operand), found through ``lookup(name)``."""
    for name in done.operand_names:
        ins = lookup(name)
        if ins is not None and ins.opcode.endswith("-start"):
            return ins
    return None


def _module_lookup(module: HloModule):
    def lookup(name):
        try:
            return module.instruction(name)
        except KeyError:
            return None
    return lookup

"""Join what the HLO says about each op to its measured times.

Sources, in order of trust: the trace's own per-op metadata (TPU: HLO text, category,
flops, bytes), then the after-optimizations HLO dump (any platform), then the op name
(GPU captures without a dump). Every number column has a ``*_source`` column beside it.

The dump module of each op is the one ``dump_matching`` matched to its program (module name and
program id), never one found by name alone.

Facts about one instruction, not about time (``instruction_facts``), become columns here too:
- the collective each op performs, its replica groups and payload (priced on the chip's links later, in
  ``models/collective_pricing.py``);
- host transfers (``copy-start``/``copy-done`` touching memory space ``S(5)``), whose
  bytes cross PCIe, not HBM;
- result bytes, operand vs result layouts, fused opcodes and layout changes (``layout_facts``), and
  whether an op is recomputation, so rules read columns instead of parsing HLO again.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...parsers.hlo_text import HloModule, Instruction
from .attention import attention_roles
from .collective_compute import collective_matmuls, module_graph
from .instruction_facts import NO_HLO, instruction_facts, parse_trace_text
from .layouts import is_recomputed

# Custom-call targets that run a hand-written kernel (Pallas/Mosaic TPU, cuDNN attention, Triton/Pallas GPU).
_KERNEL_TARGETS = r'custom_call_target="(?:tpu_custom_call|__cudnn\$fmha[^"]*|__gpu\$xla\.gpu\.triton|mosaic_gpu[^"]*)"'

FACT_COLUMNS = [
    "category", "opcode", "fusion_kind", "hlo_text", "tf_op", "source",
    "flops", "flops_source", "bytes_accessed", "bytes_source", "hbm_bytes", "host_bytes", "model_flops",
    "dtype", "is_matmul", "is_async_start", "is_async_done", "is_host_transfer", "transfer_kind", "start_op",
    "collective_kind", "collective_payload", "replica_groups", "source_target_pairs",
    "collective_matmuls", "collective_matmul_flops",
    "operand_layout", "result_layout", "result_bytes", "fused_opcodes", "layout_change", "is_data_movement",
    "layout_needed_by", "is_recomputed", "matmul_m", "matmul_n", "matmul_k", "matmul_batch", "attention_role",
    "attention_scores_op",
]


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
    ops = _with_trace_metadata(ops, trace_metadata)
    rows, found = _dump_costs(ops, dump_by_program)
    instructions: list[Instruction | None] = [f[1] if f else None for f in found]
    dump_modules: list[HloModule | None] = [f[0].module if f else None for f in found]
    _fill_from_dump(ops, rows, any(found))
    _add_instruction_facts(ops, instructions, dump_modules)
    roles = _attention_roles(dump_modules, instructions)
    ops["attention_role"] = [r[0] if r else None for r in roles]
    ops["attention_scores_op"] = [r[1] if r else None for r in roles]
    ops["is_recomputed"] = is_recomputed(ops["op_name"], ops["tf_op"]).astype(bool)
    ops["collective_matmuls"], ops["collective_matmul_flops"] = _collective_matmuls(ops, dump_modules)
    _bytes_where_they_move(ops)
    for col in FACT_COLUMNS:
        if col not in ops:
            ops[col] = None
    ops["hlo_text"] = ops["hlo_text"].fillna("")
    ops["category"] = ops["category"].fillna("other")
    # A fusion whose body holds a dot/convolution is a matmul, whatever its fusion kind.
    matmul_fusion = (ops["opcode"] == "fusion") & ops["is_matmul"] & ops["category"].str.endswith("fusion")
    ops.loc[matmul_fusion, "category"] = "convolution fusion"
    return ops


_TRACE_NUMBERS = ("flops", "model_flops", "bytes_accessed", "hbm_bytes")


def _with_trace_metadata(ops: pd.DataFrame, trace_metadata: pd.DataFrame | None) -> pd.DataFrame:
    """Source 1: the trace's per-op metadata (TPU), joined on program and op name."""
    if trace_metadata is not None and len(trace_metadata):
        md = trace_metadata.assign(program_id=trace_metadata["program_id"].fillna("").astype(str))
        # One row per op: a program id missing on one plane and empty on another are both "".
        md = md.drop_duplicates(["program_id", "op_name"])
        ops = ops.merge(md, on=["program_id", "op_name"], how="left")
    else:
        for col in ("hlo_text", "category", "flops", "model_flops", "bytes_accessed", "hbm_bytes", "tf_op", "source",
                    "kernels"):
            ops[col] = np.nan if col in _TRACE_NUMBERS else None
    # XLA's cost analysis cannot see into kernels: a trace's 0 FLOPs for one means unknown, not none.
    kernel = ops["hlo_text"].fillna("").astype(str).str.contains(_KERNEL_TARGETS, regex=True)
    ops.loc[kernel & (ops["flops"] == 0), "flops"] = np.nan
    ops["flops_source"] = np.where(ops["flops"].notna(), "trace", "")
    ops["bytes_source"] = np.where(ops["bytes_accessed"].notna(), "trace", "")
    return ops


def _fill_from_dump(ops: pd.DataFrame, rows: pd.DataFrame, any_found: bool) -> None:
    """Source 2: the matched dump module's costs, where the trace gave none; its source and op name too."""
    if not any_found:
        ops["cost_note"] = ""
        ops["host_bytes"] = 0.0
        ops["dtype"] = None
        ops["is_matmul"] = False
        return
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


def _add_instruction_facts(ops: pd.DataFrame, instructions: list, dump_modules: list) -> None:
    """Source 3: per-instruction facts, from the dump's Instruction, else by parsing the trace's HLO text;
    they fill what the trace and the dump's costs left empty."""
    texts = dict(zip(zip(ops["program_id"], ops["op_name"]), ops["hlo_text"]))
    facts = [
        instruction_facts(ins, mod, text, name,
                          lambda n, pid=pid: parse_trace_text(texts.get((pid, n))),
                          category)
        for ins, mod, text, name, pid, category in zip(
            instructions, dump_modules, ops["hlo_text"], ops["op_name"], ops["program_id"], ops["category"])
    ]
    fact_frame = pd.DataFrame(facts, index=ops.index, columns=list(NO_HLO))  # columns even with no op
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


def _bytes_where_they_move(ops: pd.DataFrame) -> None:
    """Async starts only issue work: the done op (or the synchronous op) carries the transfer. A host
    transfer moves its bytes over PCIe: they are not priced against HBM."""
    starts = ops["is_async_start"]
    ops.loc[starts, ["bytes_accessed", "hbm_bytes", "host_bytes"]] = 0.0
    host = ops["is_host_transfer"] & ~starts
    ops.loc[host, "hbm_bytes"] = 0.0
    ops.loc[host, "bytes_accessed"] = ops.loc[host, "host_bytes"]


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
        ins = parse_trace_text(text)
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



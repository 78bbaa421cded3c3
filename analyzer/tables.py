"""The analysis' tables, declared: what a row is, and each column's dtype, unit and meaning.

Each table is built once by its stage and passed through :meth:`Table.coerce`, which checks the columns
against the declaration (none missing, none undeclared) and gives every column its declared dtype, so
readers never coerce again (no object bools, no ``fillna(False)``). The JSON report's ``ops`` fields and
the ops section of ``docs/json_schema.md`` come from :data:`OPS` (``python -m xladiag.analyzer.tables``
prints that section; a test fails when the doc drifts). The names stages use among themselves (working tables,
scratch columns, internal dict keys) are declared in :mod:`.working_columns`; ``tests/test_declared_columns.py``
fails on a string subscript declared in neither.

dtypes: ``bool``; ``int64``; ``int32`` (the small keys of a table of millions of events: device, step, op id, half
the memory of ``int64``; a value outside it is a TableError); ``float64`` (NaN = unknown);
``category`` (few distinct values, NaN = unknown); ``text`` (pandas ``str``, NaN = unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..errors import InputError

DTYPES = ("bool", "int64", "int32", "float64", "category", "text")


class TableError(InputError):
    """A table that does not match its declaration: a bug in the stage that built it."""


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # one of DTYPES
    unit: str  # 's', 'ps', 'bytes', 'flops', 'count', 'fraction', ... ; '' for names and flags
    meaning: str
    json: str | None = None  # field name in the JSON report, None when the column is not public
    json_type: str | None = None  # its JSON type where the dtype does not say it


@dataclass(frozen=True)
class Table:
    name: str
    row: str  # what one row is
    columns: tuple[Column, ...]

    def __post_init__(self):
        bad = [c.name for c in self.columns if c.dtype not in DTYPES]
        assert not bad, f"{self.name}: unknown dtype for {bad}"

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def public(self) -> tuple[Column, ...]:
        """The columns the JSON report carries, in its order."""
        return tuple(c for c in self.columns if c.json)

    def empty(self) -> pd.DataFrame:
        return self.coerce(pd.DataFrame({name: pd.Series(dtype="object") for name in self.names}))

    def coerce(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The frame with exactly the declared columns, in declared order and dtype; TableError otherwise."""
        missing = [n for n in self.names if n not in frame.columns]
        undeclared = [n for n in frame.columns if n not in self.names]
        if missing or undeclared:
            raise TableError(f"{self.name} table: missing columns {missing}, undeclared columns {undeclared} "
                             "(declare them in analyzer/tables.py)")
        # copy=False: columns are not stacked into 2-D blocks (a copy of every row; copy-on-write keeps them apart)
        return pd.DataFrame({c.name: _as(frame[c.name], c, self.name) for c in self.columns}, index=frame.index,
                            copy=False)


def _as(values: pd.Series, column: Column, table: str) -> pd.Series:
    kind = column.dtype
    if kind == "bool":
        if values.dtype == bool:
            return values
        known = values.dropna()
        if not known.map(lambda v: isinstance(v, (bool, np.bool_))).all():
            raise TableError(f"{table} table: column {column.name} holds non-bool values {known.unique()[:3]}")
        return values.astype(object).where(values.notna(), False).astype(bool)  # unknown is False
    if kind == "int64":
        return values.astype("int64")
    if kind == "int32":
        if values.dtype == np.int32:
            return values
        if len(values) and values.dtype.kind in "iu":
            lo, hi = int(values.min()), int(values.max())
            if lo < np.iinfo(np.int32).min or hi > np.iinfo(np.int32).max:
                raise TableError(f"{table} table: column {column.name} holds {lo}..{hi}, beyond int32")
        return values.astype("int32")
    if kind == "float64":
        return pd.to_numeric(values, errors="raise").astype("float64")
    if kind == "category":
        return values if isinstance(values.dtype, pd.CategoricalDtype) else values.astype("category")
    return values.astype("str")


def _col(name, dtype, unit, meaning, json=None, json_type=None) -> Column:
    return Column(name, dtype, unit, meaning, json, json_type)


# One row per op event as recorded in the capture (every host, every device).
EVENTS = Table("events", "one op event: one execution of one HLO op on one device", (
    _col("device", "int64", "", "global device index (devices are numbered across hosts)"),
    _col("module", "category", "", "program (HLO module) name, '' when the event names none"),
    _col("program_id", "category", "", "XLA program id, '' when the capture has none"),
    _col("op_name", "category", "", "HLO op name (GPU kernels without one: the kernel name)"),
    _col("start_ps", "int64", "ps", "start on the device's timeline"),
    _col("duration_ps", "int64", "ps", "what the op cost: device time on TPU (as xprof), else the event's length"),
    _col("span_ps", "int64", "ps", "the event's extent on the timeline, for overlaps and busy time"),
    _col("line", "category", "", "trace line the event is on ('XLA Ops', 'Stream #k(...)', a CPU thread)"),
    _col("launch_ps", "int64", "ps", "host time the event's program execution (GPU: kernel) was launched, -1 if "
         "unknown: annotated steps own the work they launch (analyzer/capture/host_steps.py)"),
))

# The events inside measured steps (the timeline, the transfer rules).
# Its keys are int32: a run of many hosts holds one step of every device, a single host every step's events.
STEP_EVENTS = Table("step events", "one op event inside a measured step", tuple(
    replace(c, dtype="int32") if c.name == "device" else c for c in EVENTS.columns) + (
    _col("event", "int64", "", "row of the event in the capture's events table (all hosts': beyond int32 on a pod)"),
    _col("step", "int32", "", "step number on its device (0 is the warm-up when it is excluded)"),
    _col("op_id", "int32", "", "row key of the op in the ops table (its op_id column)"),
))

# One row per HLO op: what was measured, what the HLO says, what the roofline predicts.
OPS = Table("ops", "one HLO op (module, program, op name): the step program's ops, then other programs'", (
    _col("op_id", "int64", "", "key shared with the step events' op_id; -1 for ops outside the steps"),
    _col("op_name", "text", "", "HLO op name", "name"),
    _col("module", "text", "", "program (HLO module) name", "module"),
    _col("program_id", "text", "", "XLA program id ('' here, null in the JSON, when the capture has none)",
         "program_id"),
    _col("category", "category", "",
         "the op's kind: TPU `hlo_category` such as `loop fusion`, `convolution fusion`, `all-gather`; "
         "else derived from the HLO", "category"),
    _col("opcode", "category", "", "HLO opcode, where known", "opcode"),
    _col("time_class", "category", "", "the breakdown class its time counts in", "time_class"),
    _col("in_step", "bool", "", "whether the op belongs to the step program", "in_step"),
    _col("occurrences", "int64", "count", "executions inside measured steps, all devices (other programs: all)",
         "occurrences"),
    _col("occurrences_per_step", "float64", "count", "executions per device-step", "occurrences_per_step"),
    _col("measured_s_per_step", "float64", "s", "measured time per step on one device", "measured_s_per_step"),
    _col("share_of_step", "float64", "fraction", "`measured_s_per_step / step_s`", "share_of_step"),
    _col("mean_s", "float64", "s", "measured time per occurrence, mean", "mean_s"),
    _col("min_s", "float64", "s", "measured time per occurrence, least", "min_s"),
    _col("max_s", "float64", "s", "measured time per occurrence, most", "max_s"),
    _col("predicted_s", "float64", "s",
         "roofline prediction per occurrence: max(FLOPs / peak, bytes / HBM bandwidth), PCIe time for host "
         "transfers, the ring model for collectives; on GPUs at least the chip's kernel launch floor; null when "
         "the op has no cost model (unknown FLOPs)", "predicted_s"),
    _col("predicted_s_per_step", "float64", "s", "`predicted_s` x occurrences per step", "predicted_s_per_step"),
    _col("efficiency", "float64", "ratio",
         "`predicted_s / mean_s`: 1 = at its roofline, 0.1 = ten times slower than it could be; null for "
         "`*-done` ops, which measure a wait", "efficiency"),
    _col("bound_by", "category", "",
         "`compute`, `hbm`, `host`, the link of a collective (`ici` on TPU, `nvlink` / `xgmi` within a GPU node, "
         "`pcie` between GPUs without NVLink, `network` across GPU nodes), `latency` (fixed overhead dominates: "
         "a GPU op under its kernel launch floor), `unknown` (no cost model)",
         "bound_by"),
    _col("flops", "float64", "flops", "FLOPs per occurrence; null when unknown", "flops"),
    _col("flops_source", "category", "", "where the FLOPs came from: `trace` (trace metadata) or `hlo` (HLO dump)",
         "flops_source"),
    _col("cost_note", "text", "",
         "how counts and FLOPs not measured were found: loop trip counts (HLO only), a conditional priced at its "
         "costliest branch (an upper bound), a kernel's cost estimate or attention shapes, or why FLOPs are "
         "unknown", "cost_note"),
    _col("bytes_accessed", "float64", "bytes", "bytes accessed per occurrence", "bytes"),
    _col("bytes_source", "category", "", "where the bytes came from (same values as `flops_source`)",
         "bytes_source"),
    _col("hbm_bytes", "float64", "bytes", "of those, bytes to HBM", "hbm_bytes"),
    _col("host_bytes", "float64", "bytes", "of those, bytes over the host link", "host_bytes"),
    _col("arithmetic_intensity", "float64", "flops/byte", "FLOPs per HBM byte", "arithmetic_intensity"),
    _col("dtype", "category", "", "result element type", "dtype"),
    _col("collective_kind", "category", "",
         "for collectives: `all-gather`, `all-reduce`, `reduce-scatter`, `all-to-all`, `collective-permute`",
         "collective_kind"),
    _col("replica_group_size", "float64", "count", "for collectives: devices per replica group",
         "replica_group_size"),
    _col("collective_bytes", "float64", "bytes",
         "for collectives: the bytes the ring model is given per occurrence (V, the whole array): the gathered "
         "result of an all-gather, the operand of a reduce-scatter, the reduced array of an all-reduce, the "
         "global array of an all-to-all (its per-device buffer x group size), the buffer a collective-permute "
         "sends; a combined (tuple-shaped) collective: the sum of its members", "collective_bytes"),
    _col("collective_model", "text", "",
         "for collectives: where the prediction comes from: the topology and its source, the mesh axes the "
         "group spans, the torus axes (wraparound or not), DCN slices or GPU nodes it runs on, the bandwidth",
         "collective_model"),
    _col("source", "text", "", "Python source `file:line` of the op, where the HLO metadata has it", "source"),
    _col("tf_op", "text", "", "the JAX op path (`jit(train_step)/.../dot_general`)", "tf_op"),
    _col("hlo_text", "text", "", "the HLO instruction ('' when unknown)", "hlo_text", "string"),
    _col("kernels", "text", "",
         "GPU: the kernels the op launched, costliest first, each with its mean time per execution of the op over "
         "the whole capture (`;`-separated, five at most; null elsewhere)", "kernels"),
    _col("model_flops", "float64", "flops",
         "XLA's model FLOPs per occurrence (trace metadata; recomputation excluded)"),
    _col("is_matmul", "bool", "", "a dot or convolution, or a fusion holding one"),
    _col("is_async_start", "bool", "", "an async start op (`*-start`, `send`, `recv`): issues a transfer"),
    _col("is_async_done", "bool", "", "an async done op (`*-done`): waits for a transfer"),
    _col("is_host_transfer", "bool", "", "a copy to or from host memory (`S(5)`): its bytes cross PCIe"),
    _col("operand_layout", "text", "", "layout of its first operand, tiling and memory space included"),
    _col("result_layout", "text", "", "layout of its result"),
    _col("collective_predicted_s", "float64", "s", "ring-model time of a collective per occurrence"),
    _col("collective_bandwidth_s", "float64", "s", "bandwidth term of the collective model (grows with the bytes)"),
    _col("collective_latency_s", "float64", "s", "latency term of the collective model: hops x per-hop latency"),
    _col("collective_per_hop_bytes", "float64", "bytes", "bytes one hop of the ring carries"),
    _col("collective_bound_by", "category", "", "the link (`ici`, `nvlink`, `xgmi`, `pcie`, `network`) or `latency`: "
         "which term of the ring model dominates"),
    _col("collective_axis", "text", "",
         "for collectives: the devices of its replica groups as one label (same label = same mesh axis)"),
    _col("collective_matmuls", "text", "",
         "for collectives: the matmuls it feeds (all-gather, all-to-all, permute) or whose results it reduces "
         "(reduce-scatter, all-reduce), comma-separated (analyzer/hlo/collective_compute.py); null: none reached"),
    _col("collective_matmul_flops", "float64", "flops", "FLOPs per occurrence of those matmuls"),
    _col("transfer_kind", "category", "",
         "the transfer the op performs: a collective kind, `send-recv` or `host-offload` (collectives.kind_of)"),
    _col("start_op", "text", "", "for a done op, the name of the start op it waits for"),
    _col("result_bytes", "float64", "bytes", "bytes of the op's result at padded (tiled) size, tuples summed"),
    _col("fused_opcodes", "text", "", "a fusion's body opcodes, sorted and comma-separated (null: unknown body)"),
    _col("layout_change", "category", "",
         "copy / transpose / fusion whose result holds its largest operand's elements moved: `layout`, "
         "`tiling`, `transpose` or `relayout` (null: no such change)"),
    _col("is_data_movement", "bool", "", "a copy, a transpose, or a fusion of only data movement with one of them"),
    _col("layout_needed_by", "category", "",
         "for a layout change: the consumer whose semantics need it (`fft`, `all-to-all`, `dot`; "
         "analyzer/hlo/layout_needs.py); null when layout-only as far as the dump tells"),
    _col("is_recomputed", "bool", "",
         "recomputation: an XLA `.remat` clone or `rematted_computation` in its JAX op path"),
    # The matmul an op is or fuses (dot / convolution), logical sizes; NaN for other ops (hlo_costs.matmul_dims).
    _col("matmul_m", "float64", "count", "rows of the matmul: lhs free dims (convolution: batch x output positions)"),
    _col("matmul_n", "float64", "count", "columns of the matmul: rhs free dims (convolution: output features)"),
    _col("matmul_k", "float64", "count", "contracted size (convolution: input features per group)"),
    _col("matmul_batch", "float64", "count", "product of the dot's batch dims (1 without)"),
    # Unfused attention (analyzer/hlo/attention.py): a batched matmul -> softmax ops -> matmul chain.
    _col("attention_role", "category", "",
         "`scores` (the matmul writing the score matrix), `softmax` (ops between), `context` (the matmul "
         "reading it); null outside such a chain"),
    _col("attention_scores_op", "text", "", "the chain's scores op name (null outside a chain)"),
    # Transfers (analyzer/steps/transfers.py). The exposure columns are NaN for ops that are not the wait of a
    # transfer in the step (starts on TPU/CPU, non-transfers, other programs).
    _col("start_op_id", "int64", "", "for a done op, the op_id of its start op; -1 for other ops"),
    _col("transfer_is_async", "bool", "", "one end of an async transfer (start, done, send, recv)"),
    _col("transfer_bytes_per_step", "float64", "bytes", "bytes per step the transfer moves (collective or host)"),
    _col("exposed_s_per_step", "float64", "s", "seconds per step the device waits on this transfer"),
    _col("exposed_where_in_flight_measured_s_per_step", "float64", "s",
         "the same wait over the device-steps that recorded in-flight time (TPU: the span devices)"),
    _col("in_flight_s_per_step", "float64", "s", "start-to-done seconds per step; NaN when not recorded"),
    _col("hidden_fraction", "float64", "fraction", "1 - exposed / in flight; NaN without in-flight time"),
    # The schedule (analyzer/steps/schedule.py), from the op's dump module; defaults where there is none.
    _col("transfer_is_sync", "bool", "", "an async pair XLA runs synchronously (backend_config is_sync: true)"),
    _col("hlo_computation", "text", "", "the computation of the op's dump module it sits in; null without a dump"),
    _col("schedule_independent_s_per_step", "float64", "s",
         "for a transfer's wait (and its start): seconds per step of the other work in its schedule window "
         "(producer to first consumer) outside start..done, which a better schedule could place beside it; "
         "NaN without a dump"),
    # One representative occurrence per op (analyzer/steps/occurrences.py): where to find it in the trace.
    _col("occurrence_device", "int64", "", "device of the op's representative occurrence; -1 when it has none"),
    _col("occurrence_step", "int64", "", "its step: the device's median-duration measured step; -1 without"),
    _col("occurrence_start_ps", "int64", "ps", "its start on the capture's clock; -1 without"),
    _col("occurrence_end_ps", "int64", "ps", "its end (start + extent on the timeline); -1 without"),
    _col("occurrence_line", "text", "", "the trace line it is on (XLA Ops, a GPU stream, a CPU thread)"),
))

# One row per async transfer whose recorded span (TPU 'Async XLA Ops') ends in a measured step.
TRANSFER_SPANS = Table("transfer spans", "one async transfer in a measured step", (
    _col("device", "int64", "", "global device index"),
    _col("step", "int64", "", "step number on its device (the step its recorded span ends in)"),
    _col("op_id", "int64", "", "the done op's op_id; -1 when it is not an op of the step"),
    _col("kind", "category", "", "transfer kind of the done op (collectives.TRANSFER_KINDS); NaN for none"),
    _col("start_ps", "int64", "ps", "start of the transfer (its start op)"),
    _col("end_ps", "int64", "ps", "end of its done op, or of the recorded span when that is later"),
))

# One row per (device, measured step): the per-step distribution (compare, stragglers).
DEVICE_STEPS = Table("device steps", "one measured step on one device", (
    _col("device", "int64", "", "global device index"),
    _col("step", "int64", "", "step number on its device"),
    _col("duration_s", "float64", "s", "the step's length"),
    _col("busy_s", "float64", "s", "time some op runs (union of op spans)"),
    _col("idle_s", "float64", "s", "the rest of the step"),
))


DOC_BEGIN = "<!-- ops fields: generated from analyzer/tables.py by python -m xladiag.analyzer.tables -->"
DOC_END = "<!-- end of ops fields -->"


def json_schema_markdown(table: Table = OPS) -> str:
    """The ``docs/json_schema.md`` field table of a table's public columns, between DOC_BEGIN and DOC_END."""
    lines = [DOC_BEGIN, "| Field | Type | Unit | Meaning |", "| --- | --- | --- | --- |"]
    for c in table.public():
        json_type = c.json_type or {"bool": "bool", "int64": "int", "float64": "number or null"}.get(
            c.dtype, "string or null")
        meaning = c.meaning.replace("|", "\\|")
        lines.append(f"| `{c.json}` | {json_type} | {c.unit} | {meaning[0].upper() + meaning[1:]} |")
    return "\n".join(lines + [DOC_END]) + "\n"


if __name__ == "__main__":
    print(json_schema_markdown(), end="")

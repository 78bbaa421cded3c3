"""The names the stages use among themselves, declared: working tables, scratch columns, internal dict keys.

The public tables (what the analysis hands on, with dtypes) are in :mod:`.tables`, the JSON fields in
``report/*.schema.json``. Everything else a stage subscripts with a string is declared here, grouped by the
table or dict it belongs to and the module that builds it, each name with its meaning, so one place says what
every column name is. ``tests/test_declared_columns.py`` fails on a string subscript (``frame["x"]``,
``frame[["x", "y"]]``, ``.loc[rows, "x"]``, ``.assign(x=...)``) declared in none of the three.

A name several tables use (``step_num``, ``time_s``) is declared by each owner: the meaning may differ.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("frame", "dict")  # frame: columns of a DataFrame; dict: keys of a dict, record or regex match


@dataclass(frozen=True)
class Name:
    name: str
    meaning: str


@dataclass(frozen=True)
class Working:
    stage: str  # the module that builds the table or dict
    what: str  # which table or dict
    kind: str  # one of KINDS
    names: tuple[Name, ...]

    def __post_init__(self):
        assert self.kind in KINDS, f"{self.stage}: unknown kind {self.kind}"


def _frame(stage: str, what: str, **names: str) -> Working:
    return Working(stage, what, "frame", tuple(Name(n, m) for n, m in names.items()))


def _dict(stage: str, what: str, **names: str) -> Working:
    return Working(stage, what, "dict", tuple(Name(n, m) for n, m in names.items()))


WORKING: tuple[Working, ...] = (
    # --- capture: the parser's XSpace tables and the frames built from them -------------------------------
    _frame("parsers/xplane.py", "op metadata, planes and lines of an XSpace (XSpaceTables)",
           metadata_id="an event's metadata row on its plane (the key events and metadata share)",
           display_name="the metadata's display name (the HLO op name on TPU)",
           hlo_category="the metadata's `hlo_category` stat (TPU), e.g. `loop fusion`",
           hlo_op="event stat: the HLO op an event runs (CPU threads, GPU launches, TPU async spans)",
           hlo_module="event stat: the HLO module of that op",
           correlation_id="event stat: pairs a GPU kernel with the host call that launched it",
           run_id="event stat: the program execution an event belongs to",
           device_ordinal="event stat: the XLA host device an event runs for (CPU)",
           step_num="event stat of a StepTraceAnnotation: the user's step number"),
    _frame("analyzer/capture/planes.py", "device planes and the per-device table (Capture.devices)",
           local_index="the device's index on its host (from the plane name)",
           plane_name="the device plane's name",
           plane_stats="the plane's stats as a dict (peaks, vendor, core count)",
           core_count="cores of the device, NaN when the plane does not say",
           line_name="the name of an event's line (the events frame before tables.EVENTS)"),
    _frame("analyzer/capture/gpu_cpu_ops.py", "GPU kernels joined to their host launches",
           start_ps_launch="start of the launch event sharing the kernel's correlation_id"),
    _frame("analyzer/capture/gpu_cpu_ops.py", "kernel events with their kernel's name (kernel_metadata)",
           _kernel="the kernel's name ('' for a kernel named after no HLO op)"),
    _frame("analyzer/capture/build.py", "modules: one row per program execution (Capture.modules)",
           run_id="the execution's run id (its annotated step is the one that launched it)"),
    _frame("parsers/xla_memory_reports.py", "allocations of a buffer assignment",
           size_bytes="bytes of the allocation",
           maybe_live_out="whether the allocation may outlive the program (an output)"),
    _frame("parsers/xla_memory_reports.py", "allocations of a buffer assignment (memory_at_peak's reads)",
           index="the allocation's number", color="its memory space (0: device HBM)"),
    _frame("parsers/xla_memory_reports.py", "values of a buffer assignment (BufferAssignment.values)",
           allocation="the allocation holding the value", instruction="the instruction defining it",
           shape_index="its tuple index as printed ('{1}'), '' for the whole result",
           size_bytes="its bytes", offset_bytes="its offset in the allocation", shape="its shape as printed"),
    _frame("analyzer/hlo/memory_at_peak.py", "peak buffers (PEAK_BUFFERS) and the live values behind them",
           kind="parameter, output, activation, temporary, constant or unused",
           shape="shape without layout", _start="schedule position where a live value starts"),
    _dict("analyzer/capture/sanity.py", "counts of what the sanity checks dropped or found (also hosts/merge.py)",
          duplicate_hosts="hosts whose capture is the same file twice",
          far_starts="events starting implausibly far from the rest",
          impossible_durations="events with a negative or absurd duration",
          empty_executions="program executions or steps of zero length",
          implausible_flops="ops whose FLOPs were dropped as implausible",
          implausible_bytes="ops whose bytes were dropped as implausible"),
    # --- chips ---------------------------------------------------------------------------------------------
    _dict("analyzer/chips/catalog.py", "the chip catalogue (chips.toml), by key",
          cpu="the host CPU entry (no accelerator in the capture)"),
    # --- hlo: per-instruction costs and facts --------------------------------------------------------------
    _frame("analyzer/hlo/costs.py", "per-instruction costs of a dump module (DumpModule.costs, _COLUMNS)",
           computation="the HLO computation the instruction is in",
           flops_note="how a kernel's FLOPs were read, or why they are unknown",
           source_file="Python source file of the instruction (HLO metadata)",
           source_line="its line, nullable integer",
           runs="executions per run of the entry computation (loop trip counts)",
           branches="conditional branch tags the instruction is under",
           runs_note="how `runs` was found (loop bounds, costliest branch)"),
    _dict("analyzer/hlo/costs.py", "one spatial dimension of a convolution window (_parse_window)",
          size="kernel size", stride="stride", lo="padding before", hi="padding after",
          lhs_dilate="input (lhs) dilation", rhs_dilate="kernel (rhs) dilation"),
    _dict("analyzer/hlo/costs.py", "the logical sizes of a matmul (matmul_dims)",
          batch="product of the dot's batch dims"),
    _dict("analyzer/hlo/kernel_costs.py", "a dot's dimension numbers in a kernel's backend config",
          lhs_contracting_dimensions="contracted dims of the lhs"),
    _frame("analyzer/hlo/facts.py", "ops with their HLO facts, before roofline and tables.OPS (FACT_COLUMNS)",
           measured_s="measured time per occurrence (the mean), what the roofline compares with",
           collective_payload="bytes a collective moves (before the ring model): V",
           replica_groups="the collective's replica_groups attribute, as written",
           source_target_pairs="a collective-permute's source_target_pairs attribute, as written"),
    # --- models --------------------------------------------------------------------------------------------
    _frame("analyzer/models/roofline.py", "the roofline's terms, per occurrence",
           t_compute_s="FLOPs / peak", t_memory_s="HBM bytes / HBM bandwidth", t_host_s="host bytes / PCIe rate"),
    # --- steps and hosts -----------------------------------------------------------------------------------
    _frame("analyzer/steps/windows.py", "the steps (Steps.table) and the host wait per step (host_wait_s)",
           step_num="the user's step number (annotations), else the step's order",
           is_warmup="the first step of a device, excluded from the averages",
           busy_any_s="seconds of the step some device is busy",
           all_idle_s="seconds of the step no device is busy (waiting for the host)"),
    _frame("analyzer/steps/schedule.py", "ops with the schedule's columns, before attach_transfers (transfers.py)",
           static_exposed_s_per_step="without a trace: the wait the schedule's timeline predicts for a "
                                     "transfer (hlo/schedule.py static_waits); NaN for other ops"),
    _frame("analyzer/steps/occurrences.py", "measured steps ranked by duration per device",
           rank="the step's rank by duration on its device", n="measured steps of the device"),
    _frame("analyzer/steps/op_stats.py", "per-op statistics over the step events (also hosts/merge.py)",
           total_s="measured seconds of the op over all measured device-steps"),
    _frame("analyzer/hosts/reduce.py", "per-host aggregates: per-op totals, device extents, async spans",
           total_ps="summed duration of the op's events", min_ps="shortest event", max_ps="longest event",
           first_start_ps="a device's first event start", last_start_ps="its last event start",
           done_op="an async span's done op name", done_end_ps="end of the done op the span waits for (-1: none)",
           code="row of a key in the host's op keys"),
    _frame("analyzer/hosts/transfer_totals.py", "a GPU host's communication kernels, per op",
           exposed_ps="time of the op's kernels no compute kernel on the same device overlaps"),
    _frame("analyzer/hosts/span_sums.py", "a TPU or CPU host's async spans in measured steps, per done op",
           in_flight_ps="summed time from each span's start to its end or its done op's end, the later"),
    # --- rules: per-rule scratch columns and dicts ---------------------------------------------------------
    _frame("rules/exposed_collective.py", "the step's transfer waits (exposure_by_op), short names",
           is_async="tables.OPS transfer_is_async", bytes_per_step="tables.OPS transfer_bytes_per_step",
           span_s_per_step="tables.OPS in_flight_s_per_step",
           exposed_span_devices_s_per_step="tables.OPS exposed_where_in_flight_measured_s_per_step"),
    _frame("rules/latency_bound_collective.py", "the step's modelled collectives (classify_collectives)",
           latency_bound="the per-hop payload is below the chip's latency threshold",
           start_s="seconds per step of its start op (async collectives)",
           time_s="seconds per step: done wait plus start, else predicted"),
    _dict("rules/latency_bound_collective.py", "a group of collectives (kind, replica group); the class counts",
          count_per_step="collectives of the group per step", bytes_per_step="bytes they move per step",
          combined_predicted_s="the model's time for them combined into one",
          latency="collectives below the threshold", bandwidth="collectives above it"),
    _frame("rules/low_precision.py", "the step's dots that a lower precision would speed up",
           time_s="seconds per step of the dot", savings_s="seconds per step the lower precision saves",
           achieved="its measured FLOP/s over the chip's bf16 peak (NaN without a trace)"),
    _dict("rules/materialized_attention.py", "one score matrix and its softmax chain (_chains)",
          cost="softmax seconds plus score traffic seconds, per step", measured_s="the scores op's measured s/step",
          occ="executions per step", predicted="its predicted s/step", score_bytes="bytes of the score matrix",
          score_hbm_s="seconds per step moving the scores through HBM", softmax_ops="ops between the matmuls",
          softmax_s="seconds per step of those ops"),
    _frame("rules/mxu_padding.py", "the dots whose sizes the MXU pads (_padded_dots)",
           multiple="the MXU tile size the dims are padded to", fraction="share of the padded FLOPs that is padding",
           padded_s="seconds per step spent on padding", op_s="seconds per step of the dot",
           savings_s="seconds per step aligned sizes would save"),
    _frame("rules/remat_overhead.py", "the step's recomputed ops (recomputed_ops; read by hbm_headroom too)",
           time_s="seconds per step, measured else predicted", rate="seconds saved per byte kept"),
    _frame("rules/retiling_copy.py", "the layout-only ops (relayout_ops)",
           change="what the op changes (tables.OPS layout_change, else from its name)",
           recognised_by="`hlo` or `name`: how it was found", time_s="seconds per step",
           origin="its Python source, else its JAX op path",
           needed_by="tables.OPS layout_needed_by: the consumer that needs the move (needed=True rows)"),
    _dict("rules/sharding_intensity.py", "one mesh axis's numbers (_axis)",
          intensity="matmul FLOPs per collective byte", link_s="seconds per step on the link",
          matmul_s="seconds per step of the matmuls", exposed="exposed seconds per step",
          unhideable="link seconds the matmuls cannot hide", unlinked="collectives feeding no matmul",
          w="the axis's link bandwidth, bytes/s", linked="the collectives that feed matmuls (a frame)"),
    _dict("rules/catalog.py", "a rule's catalogue row and its details lines (regex groups)",
          id="the rule id", summary="the docstring's first paragraph", type="a detail's JSON type",
          meaning="a detail's meaning"),
    # --- compare -------------------------------------------------------------------------------------------
    _frame("compare/ops.py", "ops and findings of two reports side by side (pandas merge)",
           time="the op's seconds per step in the chosen time column",
           _merge="pandas' merge indicator: `both`, `left_only` (base), `right_only` (new)",
           # A merge suffixes the columns both sides have: _b for the base report, _n for the new one.
           **{f"{c}_b": f"{c} of the base report" for c in ("names", "time", "rule", "kind", "severity", "title",
                                                            "savings", "counted")},
           **{f"{c}_n": f"{c} of the new report" for c in ("module", "names", "source", "tf_op", "time_class",
                                                           "time", "rule", "kind", "severity", "title", "savings")}),
    _dict("compare/sides.py", "the selection record of a comparison (compare/selection.py builds it)",
          findings_left_out="per side, the findings a rule selection or baseline left out"),
    _dict("compare/reports.py", "ops_summary keys of the compare JSON the schema leaves open",
          rel_tol="relative tolerance an op's change must pass", step_tol="tolerance as a share of the step"),
    # --- report --------------------------------------------------------------------------------------------
    _frame("report/chart_data.py", "timeline events and roofline points for the charts",
           lane="the timeline row (device, or device and stream)", start_s="start within its step",
           step_start_ps="start of the event's step", intensity="FLOPs per HBM byte",
           achieved_flops_per_s="FLOPs per second measured", weight_s="seconds per step (the dot's size)"),
    _frame("report/svg.py", "plot coordinates",
           p_ai="x: intensity", p_y="y: FLOPs/s", p_r="dot radius", p_w="dot weight (draw order)",
           x0="left edge of an event bar", x1="right edge"),
    _dict("report/svg.py", "colour per bound_by", unknown="the colour of an unknown bound"),
    _dict("report/gates.py", "a threshold option's regex groups", number="the number", percent="a `%` if given"),
    _dict("report/html.py", "the Jinja filters", seconds="format_seconds", percent="format_percent"),
    _dict("report/json_schema.py", "JSON Schema keywords the schema builders write",
          properties="an object's fields", required="its required fields", description="its text",
          additionalProperties="false: no other field"),
)

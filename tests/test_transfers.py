"""Async transfers: the kind of each op, each done op's start, and the per-op transfer columns."""

from __future__ import annotations

import pandas as pd

from xladiag.analyzer.chip_catalog import load_catalog
from xladiag.analyzer.hlo_costs import wrapped_instruction
from xladiag.analyzer.hlo_dump import DumpModule
from xladiag.analyzer.hlo_facts import attach_hlo_facts
from xladiag.parsers.hlo_text import parse_hlo_module

MODULE = """HloModule jit_step, is_scheduled=true

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}

%wrapped_reduce_scatter (p: f32[1024]) -> (f32[128]) {
  %p = f32[1024]{0} parameter(0)
  %rs = f32[128]{0} reduce-scatter(f32[1024]{0} %p), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add
  ROOT %t = (f32[128]{0}) tuple(f32[128]{0} %rs)
}

ENTRY %main (a: bf16[128,4096], b: f32[1024], c: f32[256]) -> f32[256] {
  %a = bf16[128,4096]{1,0} parameter(0)
  %b = f32[1024]{0} parameter(1)
  %c = f32[256]{0} parameter(2)
  %all-gather-start = (bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) all-gather-start(bf16[128,4096]{1,0} %a), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}
  %all-gather-done = bf16[1024,4096]{1,0} all-gather-done((bf16[128,4096]{1,0}, bf16[1024,4096]{1,0}) %all-gather-start)
  %rs-start = ((f32[1024]{0}), (f32[128]{0})) async-start(f32[1024]{0} %b), calls=%wrapped_reduce_scatter
  %rs-done = (f32[128]{0}) async-done(((f32[1024]{0}), (f32[128]{0})) %rs-start), calls=%wrapped_reduce_scatter
  %copy-start = (f32[256]{0:S(5)}, f32[256]{0}, u32[]) copy-start(f32[256]{0} %c)
  %copy-done = f32[256]{0:S(5)} copy-done((f32[256]{0:S(5)}, f32[256]{0}, u32[]) %copy-start)
  ROOT %n = f32[256]{0} negate(f32[256]{0} %c)
}
"""


def _facts():
    module = parse_hlo_module(MODULE, "m.txt", strict=True)
    names = ["all-gather-start", "all-gather-done", "rs-start", "rs-done", "copy-start", "copy-done", "n"]
    table = pd.DataFrame({"module": "jit_step", "program_id": "", "op_name": names, "mean_s": 1e-6})
    dump = {("jit_step", ""): DumpModule(module)}  # the dump module matched to the program
    return module, attach_hlo_facts(table, None, dump, load_catalog()["v6e"], num_devices=8).set_index("op_name")


def test_wrapped_instruction_looks_past_the_tuple_root():
    module, _ = _facts()
    assert wrapped_instruction(module, module.instruction("rs-start")).opcode == "reduce-scatter"
    assert wrapped_instruction(module, module.instruction("rs-done")).opcode == "reduce-scatter"
    assert wrapped_instruction(module, module.instruction("all-gather-start")) is None


def test_every_done_op_knows_its_start_and_kind():
    _, ops = _facts()
    assert ops["start_op"].dropna().to_dict() == {
        "all-gather-done": "all-gather-start", "rs-done": "rs-start", "copy-done": "copy-start"}
    assert ops["transfer_kind"].isna()["n"]
    assert ops["transfer_kind"].dropna().to_dict() == {"all-gather-start": "all-gather", "all-gather-done": "all-gather", "rs-start": "reduce-scatter",
                     "rs-done": "reduce-scatter", "copy-start": "host-offload", "copy-done": "host-offload"}
    # Only the ring model's collectives are priced; the wrapped reduce-scatter gets its start's replica group.
    assert ops.loc["rs-done", "collective_kind"] == "reduce-scatter"
    assert ops.loc["rs-done", "replica_group_size"] == 8
    assert ops["collective_kind"].isna()[["copy-start", "copy-done", "n"]].all()

"""Generators of hostile XLA dumps, one family per failure a fuzz campaign on --xla_dump_to output found.

Each generator takes a numpy ``Generator`` and returns a :class:`Case`: the dump folder's files (an HLO text
and maybe its memory reports), a label saying what was drawn, and a text the report's warnings must hold
('' when the damage only makes numbers unknown). The same seed gives the same case. The families:

- trip counts: a while's ``known_trip_count`` that is no count (lists, floats, 1e400, long digit runs,
  negatives, INT64_MAX, booleans), with or without a loop condition to fall back on;
- call cycles: rings of 1-6 computations linked by fusions, calls, while bodies/conditions, conditional
  branches and reducers;
- deep backend configs: JSON nested 65 to 100k levels, raw or as a quoted string, on a while or a custom-call;
- dynamic and damaged dims: ``?`` sizes and out-of-range, repeated or negative dimension numbers in dots,
  convolutions, reductions and elementwise ops;
- scalar dots: an operand of rank 0 or 1 under a matrix result;
- huge memory reports: totals and allocation sizes from 2^50 + 1 to thousands of digits.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from builders import hlo_snippets as hs  # noqa: E402

HLO_NAME = "module_0001.jit_step.cpu_after_optimizations.txt"


@dataclass(frozen=True)
class Case:
    label: str
    files: dict  # file name -> text
    expect: str  # a text some report warning must hold ('' for none)


def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def _digits(rng: np.random.Generator, n: int) -> str:
    return str(int(rng.integers(1, 10))) + "".join(str(d) for d in rng.integers(0, 10, n - 1))


def trip_counts(rng: np.random.Generator) -> Case:
    n = _pick(rng, ['"-' + _digits(rng, int(rng.integers(1, 20))) + '"', _digits(rng, int(rng.integers(11, 400))),
                    '"' + _digits(rng, int(rng.integers(11, 400))) + '"', "1e400", "-1e400", "3.5", "true", "null",
                    '"9223372036854775807"', "9223372036854775807", '"2147483648"', "[32]", '"x"'])
    known = _pick(rng, [f'{{"n":{n}}}', n])
    limit = _pick(rng, [None, 32, 2**63 - 1, -7])
    config = f'{{"known_trip_count":{known}}}'
    expect = "" if known == "null" or known == '{"n":null}' else "known_trip_count"
    return Case(f"trip count {known[:40]}, condition limit {limit}", {HLO_NAME: hs.loop_module(config, limit)},
                expect)


_EDGES = ("fusion(%d), kind=kLoop, calls=%{}", "call(%d), to_apply=%{}", "while(%d), condition=%f0, body=%{}",
          "while(%d), condition=%{}, body=%f0", "conditional(%p, %d, %d), branch_computations={{%{}, %f0}}",
          "reduce(%d, %a), dimensions={{0}}, to_apply=%{}")


def call_cycles(rng: np.random.Generator) -> Case:
    size = int(rng.integers(1, 7))
    edges = [_pick(rng, _EDGES) for _ in range(size)]
    comps = []
    for i, edge in enumerate(edges):
        text = hs._computation(f"f{i}", edge.format(f"f{(i + 1) % size}"))
        comps.append(text.replace("  ROOT", "  %p = s32[] constant(0)\n  ROOT") if "conditional" in edge else text)
    entry = hs._computation("main", _pick(rng, ["fusion(%d), kind=kLoop, calls=%f0", "call(%d), to_apply=%f0"]),
                            entry=True)
    text = "HloModule jit_cycle\n\n" + "\n".join(comps) + "\n" + entry
    return Case(f"call cycle of {size}: " + " | ".join(e.split("(")[0] for e in edges), {HLO_NAME: text},
                "call cycle")


def deep_configs(rng: np.random.Generator) -> Case:
    depth = int(_pick(rng, [65, 200, 5000, 100_000]))
    opener = _pick(rng, ["{", "["])
    nested = hs.nested_json(depth) if opener == "{" else "[" * depth + "]" * depth
    config = '{"known_trip_count":{"n":"4"},"x":' + nested + "}"
    if rng.random() < 0.5:
        config = '"' + config.replace('"', '\\"') + '"'
    text = hs.loop_module(config, limit=_pick(rng, [None, 32]))
    if rng.random() < 0.5:  # on a custom-call instead: a kernel config nobody may parse
        text = text.replace("ROOT %out = f32[64,64]{1,0} get-tuple-element(%loop), index=1",
                            "%g = f32[64,64]{1,0} get-tuple-element(%loop), index=1\n  ROOT %out = f32[64,64]{1,0} "
                            f'custom-call(%g), custom_call_target="tpu_custom_call", backend_config={config}')
        text = text.replace(f", backend_config={config}\n  %g", "\n  %g")
    return Case(f"backend_config nested {depth} deep ({opener})", {HLO_NAME: text}, "backend_config nested")


def _dims(rng: np.random.Generator, rank: int) -> list[str]:
    return [_pick(rng, ["?", "8", "64", "<=64", "0", "1"]) for _ in range(rank)]


def dynamic_dims(rng: np.random.Generator) -> Case:
    lhs, rhs = _dims(rng, 2), _dims(rng, 2)
    numbers = [str(int(rng.integers(-2, 3))) for _ in range(2)]
    kind = _pick(rng, ["dot", "dot-numbers", "convolution", "reduce-window", "add"])
    if kind in ("dot", "dot-numbers"):
        attrs = (f"lhs_contracting_dims={{{numbers[0]}}}, rhs_contracting_dims={{{numbers[1]}}}" if kind != "dot"
                 else "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
        text = hs.dot_module(f"f32[{','.join(lhs)}]", f"f32[{','.join(rhs)}]", f"f32[{lhs[0]},{rhs[1]}]", attrs)
    elif kind == "convolution":
        window = f"window={{size={_pick(rng, ['3', '0', '-3', '?'])} stride={_pick(rng, ['1', '0', '-1'])}}}"
        text = hs.dot_module(f"f32[1,{lhs[0]},8]", f"f32[3,8,{rhs[1]}]", f"f32[1,{lhs[1]},{rhs[1]}]",
                             f"{window}, dim_labels=b0f_0io->b0f, feature_group_count={_pick(rng, ['1', '0', '-2'])}",
                             opcode="convolution")
    elif kind == "reduce-window":
        text = hs.dot_module(f"f32[{','.join(lhs)}]", "f32[]", f"f32[{','.join(lhs)}]",
                             f"window={{size={numbers[0]}x{numbers[1]}}}, to_apply=%add", opcode="reduce-window")
    else:
        text = hs.dot_module(f"f32[{','.join(lhs)}]", f"f32[{','.join(lhs)}]", f"f32[{','.join(lhs)}]", "",
                             opcode="add")
    return Case(f"{kind}: lhs {lhs}, rhs {rhs}, numbers {numbers}", {HLO_NAME: text}, "")


def scalar_dots(rng: np.random.Generator) -> Case:
    small = _pick(rng, ["f32[]", "f32[200]{0}", "f32[1]{0}"])
    big = "f32[1024,200]{1,0}" if rng.random() < 0.5 else "f32[200,72]{1,0}"
    lhs, rhs = (small, big) if rng.random() < 0.5 else (big, small)
    attrs = _pick(rng, ["lhs_contracting_dims={1}, rhs_contracting_dims={0}", "lhs_contracting_dims={},"
                        " rhs_contracting_dims={}", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"])
    return Case(f"dot {lhs} x {rhs}, {attrs}", {HLO_NAME: hs.dot_module(lhs, rhs, "f32[1024,72]{1,0}", attrs)}, "")


def huge_memory_reports(rng: np.random.Generator) -> Case:
    total = _pick(rng, [str(2**50 + 1), "1" + "0" * int(rng.integers(16, 60)),
                        _digits(rng, int(rng.integers(20, 6000)))])
    files = {HLO_NAME: hs.dot_module("f32[8,64]{1,0}", "f32[64,32]{1,0}", "f32[8,32]{1,0}")}
    if rng.random() < 0.5:
        files[HLO_NAME.replace(".txt", "-memory-usage-report.txt")] = hs.memory_usage_report(total)
    else:
        files[HLO_NAME.replace(".txt", "-buffer-assignment.txt")] = f"allocation 0: size {total}, parameter 0\n"
    return Case(f"memory size of {len(total)} digits", files, "over 2^50")


GENERATORS = (trip_counts, call_cycles, deep_configs, dynamic_dims, scalar_dots, huge_memory_reports)

"""Grammar-aware fuzzing of the HLO text parser with hypothesis.

Real modules (the bundled dumps and the shared v6e module) are cut into small seeds (header,
index tables and a few whole computations) and mutated at token level: tokens dropped,
duplicated, swapped; numbers made huge; deep nesting and long strings inserted; the text cut at a
line boundary or mid-line. Whatever the mutant, parsing either succeeds (and the parsed module
answers its usual questions) or raises one HloParseError line that names the file and line.

CI runs a seeded, bounded set (300 examples, about 10 s); ``XLADIAG_HLO_FUZZ_EXAMPLES=5000`` runs
more, and ``XLADIAG_HLO_FUZZ_RANDOM=1`` draws new examples instead of the seeded ones.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

import jsonschema
import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xladiag.analyzer.hlo.control_flow import loop_warnings
from xladiag.analyzer.hlo.costs import instruction_costs, matmul_dims
from xladiag.parsers.hlo_replica_groups import parse_replica_group_list
from xladiag.parsers.hlo_text import HloParseError, parse_hlo_module
from xladiag.report.json_schema import load_schema

REPO = Path(__file__).resolve().parents[1]
# Real modules only, from the repo (the MaxText v6e module is the bundled copy of the shared reference one).
SOURCES = sorted({p.resolve() for p in REPO.glob("sample_profiles/**/*after_optimizations*.txt")
                  if not re.search(r"-(buffer-assignment|memory-usage-report)", p.name)})
EXAMPLES = int(os.environ.get("XLADIAG_HLO_FUZZ_EXAMPLES", "300"))
SEEDED = not os.environ.get("XLADIAG_HLO_FUZZ_RANDOM")
RSS_CAP = 2 * 2**30  # the interpreter, pandas and hypothesis take ~0.3 GB; a blow-up shows above

# Tokens: strings, numbers, names, runs of blanks, then single characters.
_TOKEN = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|\d+|[A-Za-z_%][\w.\-]*|[ \t]+|\n|.')
_HUGE = ["0", "-1", "2147483648", "99999999999", "9223372036854775808", "1" + "0" * 25, "7" * 5000]
_NESTING = ["(" * 65, "{" * 1000, "(" * 100_000, "[" * 50, ")" * 20, "}\n"]


def _pieces(text: str) -> tuple[str, list[str]]:
    """The module's preamble (header and index tables) and its computations, each whole."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip().endswith("{") and line[:1] not in " \t"
              and not line.startswith("HloModule")]
    if not starts:
        return text, []
    blocks = [("".join(lines[a:b])) for a, b in zip(starts, starts[1:] + [len(lines)])]
    return "".join(lines[: starts[0]]), blocks


PIECES = [_pieces(p.read_text()) for p in SOURCES]


@st.composite
def seeds(draw) -> str:
    preamble, blocks = draw(st.sampled_from(PIECES))
    if not blocks:
        return preamble
    count = draw(st.integers(1, min(3, len(blocks))))
    start = draw(st.integers(0, len(blocks) - count))
    chosen = blocks[start: start + count]
    if draw(st.booleans()):
        chosen.append(blocks[-1])  # XLA prints ENTRY last: keep it in half the seeds
    return preamble + "".join(chosen)


@st.composite
def mutants(draw) -> str:
    tokens = _TOKEN.findall(draw(seeds()))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(tokens) - 1))
        op = draw(st.sampled_from(["drop", "duplicate", "swap", "number", "nest", "string", "line"]))
        if op == "drop":
            del tokens[i]
        elif op == "duplicate":
            tokens.insert(i, tokens[i])
        elif op == "swap" and i + 1 < len(tokens):
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
        elif op == "number":
            numbers = [j for j, t in enumerate(tokens) if t.isdigit()] or [i]
            tokens[draw(st.sampled_from(numbers))] = draw(st.sampled_from(_HUGE))
        elif op == "nest":
            tokens.insert(i, draw(st.sampled_from(_NESTING)))
        elif op == "string":
            tokens.insert(i, '"' + "x" * draw(st.sampled_from([10, 100_000])) + draw(st.sampled_from(['"', "\\", ""])))
        elif op == "line":  # duplicate a whole line (a second header, a repeated instruction …)
            newlines = [j for j, t in enumerate(tokens) if t == "\n"]
            if len(newlines) >= 2:
                a = draw(st.sampled_from(newlines[:-1]))
                b = newlines[newlines.index(a) + 1]
                tokens[b + 1: b + 1] = tokens[a + 1: b + 1]
        if not tokens:
            return ""
    text = "".join(tokens)
    cut = draw(st.sampled_from(["none", "none", "line", "anywhere"]))
    if cut == "line":
        ends = [m.end() for m in re.finditer("\n", text)] or [len(text)]
        text = text[: draw(st.sampled_from(ends))]
    elif cut == "anywhere":
        text = text[: draw(st.integers(0, len(text)))]
    return text


def _check(text: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = parse_hlo_module(text, "mutant.txt")
    except HloParseError as exc:
        message = str(exc)
        assert "\n" not in message and re.match(r"mutant\.txt:\d+: \S", message), message
        return
    assert psutil.Process().memory_info().rss < RSS_CAP  # the parsed module is still held here
    frame = module.instructions()
    assert frame.empty or ((frame["result_bytes"] >= 0).all() and frame["result_bytes"].max() < 2**63)
    for comp in module.computations.values():
        for ins in comp.instructions:
            ins.called_computations()
            raw = ins.attrs.get("replica_groups")
            if raw:
                try:
                    parse_replica_group_list(raw)
                except HloParseError as exc:
                    assert "\n" not in str(exc)


@pytest.mark.skipif(not SOURCES, reason="no HLO dump to fuzz")
@settings(max_examples=EXAMPLES, deadline=None, derandomize=SEEDED, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much, HealthCheck.large_base_example])
@given(mutants())
def test_mutated_modules_parse_or_fail_in_one_line(text):
    _check(text)


def test_seeds_parse_unmutated():
    # The fuzzer starts from valid text: every seed piece parses (truncation warnings aside).
    assert PIECES and all(blocks for _, blocks in PIECES)
    for preamble, blocks in PIECES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = parse_hlo_module(preamble + "".join(blocks[:3]) + blocks[-1], "seed.txt")
        assert module.computations


# ---- hostile dumps through the whole CLI: every report valid against the schema, nothing internal -----------

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
import fuzz_inputs  # noqa: E402
import hlo_hostile  # noqa: E402

# Whole CLI runs cost about a second each: a few per CI run, on top of one seeded case per family below; the
# parser-and-costs check of the same cases is cheap and runs many.
HOSTILE_EXAMPLES = int(os.environ.get("XLADIAG_HLO_HOSTILE_EXAMPLES", "6"))
HOSTILE_MODULES = int(os.environ.get("XLADIAG_HLO_HOSTILE_MODULES", "120"))


def _diagnose(case: hlo_hostile.Case, chip: str) -> tuple[dict, list[str]]:
    """The JSON report of the case's dump folder, from the CLI's entry point in this process, and the Python
    warnings it let out (with the interpreter's default filters, as a user's terminal would show them)."""
    from click.testing import CliRunner

    from xladiag.cli import main

    with tempfile.TemporaryDirectory(prefix="hostile-") as folder, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        for name, text in case.files.items():
            (Path(folder) / name).write_text(text)
        out = Path(folder) / "report.json"
        result = CliRunner().invoke(main, ["--hlo-dir", folder, "--chip", chip, "--format", "json", "-o", str(out),
                                           "-q"])
        assert result.exit_code == 0 and result.exception is None, (case.label, result.output, result.exception)
        return json.loads(out.read_text(encoding="utf-8")), [str(w.message) for w in caught]


@settings(max_examples=HOSTILE_MODULES, deadline=None, derandomize=SEEDED, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(hlo_hostile.GENERATORS), st.integers(0, 2**32 - 1))
def test_hostile_modules_are_costed_without_internal_errors(generator, seed):
    case = generator(np.random.default_rng(seed))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = parse_hlo_module(case.files[hlo_hostile.HLO_NAME], "hostile.txt")
        parsed = [str(w.message) for w in caught]
        costs = instruction_costs(module, scope="all")
        loops = loop_warnings(module)
        for ins in module.computations[module.entry].instructions:
            try:
                matmul_dims(ins, module)
            except (ValueError, IndexError, KeyError):  # what its callers read as sizes unknown
                pass
    assert [str(w.message) for w in caught] == parsed, case.label  # only the parser's one-line warnings
    assert all(w.startswith("hostile.txt") and "\n" not in w for w in parsed), parsed
    assert not (costs["flops"] < 0).any() and not (costs["runs"] > 2**31).any(), case.label
    assert all("\n" not in w for w in loops)


@settings(max_examples=HOSTILE_EXAMPLES, deadline=None, derandomize=SEEDED, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(hlo_hostile.GENERATORS), st.integers(0, 2**32 - 1), st.sampled_from(["v6e", "h100"]))
def test_hostile_dumps_give_valid_reports(generator, seed, chip):
    case = generator(np.random.default_rng(seed))
    doc, leaked = _diagnose(case, chip)
    assert not leaked, (case.label, leaked)
    jsonschema.validate(doc, load_schema())
    assert fuzz_inputs.json_problems(doc) == [], case.label  # finite, non-negative, shares at most 1
    assert not case.expect or any(case.expect in w for w in doc["warnings"]), (case.label, doc["warnings"])


@pytest.mark.parametrize("generator", hlo_hostile.GENERATORS, ids=lambda g: g.__name__)
def test_each_hostile_family_reaches_its_failure(generator):
    # Seeded cases of every family, whatever hypothesis draws: each hostile kind is exercised in every run.
    case = generator(np.random.default_rng(7))
    doc, leaked = _diagnose(case, "v6e")
    assert not leaked and fuzz_inputs.json_problems(doc) == [], case.label
    jsonschema.validate(doc, load_schema())
    assert not case.expect or any(case.expect in w for w in doc["warnings"]), (case.label, doc["warnings"])

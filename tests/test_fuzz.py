"""The fuzz suite at CI size: seeded mutants of every bundled capture and dump, through the real CLI entry
point, in this process (tests/fuzz/in_process.py); the process runner of long runs is checked on one seed.

A longer run of the same fuzzer, a process per mutant: ``python tests/fuzz/fuzz_inputs.py --mutants 5000 --seed N``.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import fuzz_inputs  # noqa: E402
import in_process  # noqa: E402
import mutators  # noqa: E402
import structured  # noqa: E402

CI_MUTANTS = 60
CI_SEED = 2026
# Structure-aware mutants of the built capture, three mutators each: every mutator once in three diagnoses.
STRUCTURED_MUTANTS, STRUCTURED_PER_MUTANT = 3, 3


@pytest.mark.slow
def test_fuzz_ci_run():
    with in_process.worker_runner(2) as runner:  # two processes, each started once, for two cores
        outcomes, broken = fuzz_inputs.run_fuzz(CI_MUTANTS, CI_SEED, workers=2, runner=runner)
    assert not broken, [(o.mutant.seed.name, o.problems) for o in broken]
    failed = [o for o in outcomes if o.problems]
    assert not failed, fuzz_inputs.summary(outcomes)
    # The run reached both the error path and full reports, on captures and on dumps.
    codes = Counter(o.code for o in outcomes)
    assert codes[0] >= 5 and codes[1] >= 5, codes
    assert {o.mutant.seed.kind for o in outcomes} == {"xplane", "hlo"}
    assert max(o.rss for o in outcomes) < fuzz_inputs.RSS_CAP_BYTES


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # preexec_fn forks; the child only execs
def test_process_runner_of_the_long_runs(tmp_path):
    """The runner of long runs (a process per mutant, under an address-space cap): a seed passes, its RSS read."""
    seed = next(s for s in fuzz_inputs.seeds() if s.name == "jax_many_programs/cpu-host.xplane.pb")
    outcome = fuzz_inputs.run_mutant(fuzz_inputs.unmutated(seed), tmp_path)
    assert outcome.code == 0 and outcome.problems == [], outcome.problems
    assert 0 < outcome.rss < fuzz_inputs.RSS_CAP_BYTES


def test_structure_aware_mutants_diagnose_cleanly(tmp_path):
    """Zero and negative durations, huge ids, mixed-type stats, lost stat metadata, repeated lines, a scaled
    clock and absurd device stats (structured.py): each run exits 0 with a schema-valid, plausible report, or
    1 with one line; never an internal error or a traceback."""
    assert STRUCTURED_MUTANTS * STRUCTURED_PER_MUTANT >= len(structured.MUTATORS)
    outcomes = [in_process.run_mutant(m, tmp_path)
                for m in structured.mutants(STRUCTURED_MUTANTS, CI_SEED, STRUCTURED_PER_MUTANT)]
    assert not [o for o in outcomes if o.problems], fuzz_inputs.summary(outcomes)
    assert Counter(o.code for o in outcomes)[0] >= 2, fuzz_inputs.summary(outcomes)


def test_every_structured_mutator_changes_the_capture():
    from xladiag.parsers.xspace_schema import XSpace

    base = structured.base_capture()
    for i, mutate in enumerate(structured.MUTATORS):
        space = XSpace.FromString(base)
        label = mutate(space, np.random.default_rng(i))
        assert space.SerializeToString() != base, label


def test_checker_validates_reports_against_the_schema(tmp_path):
    """The fuzz checks validate every report against the JSON Schema (a null device_type passed them)."""
    from xladiag.api import diagnose

    case = fuzz_inputs.write_case(structured.mutants(1, 0, per_mutant=0)[0], tmp_path)  # the built capture as is
    report = diagnose(case).to_dict()
    assert fuzz_inputs.schema_problems(report) == []
    report["device_list"][0]["device_type"] = None
    assert fuzz_inputs.schema_problems(report) == ["schema: device_list.device_type: None is not of type 'string'"]


def test_absurd_times_pass_only_where_the_report_warns_of_its_clock():
    report = {"step_s": 5e5, "warnings": [], "findings": []}
    assert fuzz_inputs.json_problems(report) == ["absurd time step_s"]
    report["warnings"] = [f"capture: the measured step lasts 500,000 s: ...; {fuzz_inputs.CLOCK_WARNING}"]
    assert fuzz_inputs._number_problems(report) == ["absurd time step_s"]
    assert not [p for p in fuzz_inputs.json_problems(report) if p.startswith("absurd")]


def test_in_process_runner_sees_what_a_process_would(tmp_path, monkeypatch):
    """A crash, a Python warning, a timeout, a runaway allocation and the memory used, each seen in-process."""
    import time
    import warnings

    import numpy as np

    import xladiag.api
    from xladiag.errors import InputError

    seed = next(s for s in fuzz_inputs.seeds() if s.name == "jax_many_programs/cpu-host.xplane.pb")

    def run(body):
        monkeypatch.setattr(xladiag.api, "diagnose", lambda *a, **k: body())
        outcome = in_process.run_mutant(fuzz_inputs.unmutated(seed), tmp_path / body.__name__)
        return outcome.code, outcome.problems, outcome.rss

    def crash():
        raise ZeroDivisionError("boom")

    def warn():
        warnings.warn("odd input", UserWarning, stacklevel=1)
        raise InputError("bad input")

    def hang():
        time.sleep(30)

    def runaway():  # past the 8 GiB of address space the runner allows: refused at once, nothing touched
        return np.empty(fuzz_inputs._ADDRESS_SPACE_LIMIT * 2, np.uint8)

    def big():
        np.ones(300_000_000, np.uint8).sum()
        raise InputError("bad input")

    assert run(crash)[:2] == (1, ["crash: diagnose: error: internal error: ZeroDivisionError: boom (rerun with --debug;"
                                  " please report)"])
    code, problems, _ = run(warn)
    assert code == 1 and len(problems) == 1 and problems[0].startswith("python warning: ")
    assert "odd input" in problems[0]
    code, problems, _ = run(runaway)
    assert code == 1 and len(problems) == 1 and "internal error: MemoryError" in problems[0], problems
    code, problems, rss = run(big)
    assert (code, problems) == (1, []) and rss >= 250_000_000
    monkeypatch.setattr(fuzz_inputs, "TIMEOUT_S", 1)
    assert run(hang)[:2] == (-9, ["timeout"])


def test_checker_flags_every_kind_of_absurd_number():
    report = {
        "step_s": 1.0,
        "mfu": 0.4,
        "findings": [{"rule": "remat", "est_savings_s_per_step": 2.0, "fraction_of_step": 1.5}],
        "ops": [{"efficiency": 570_520.0, "mean_s": -1.0, "measured_s_per_step": 2.88e5, "flops": math.nan,
                 "peak_flops_per_s": 9e17}],  # a rate, not a time: allowed
    }
    assert fuzz_inputs.json_problems(report) == sorted({
        "remat saves more than the step", "fraction_of_step above 1", "absurd efficiency", "negative mean_s",
        "absurd time measured_s_per_step", "non-finite flops"})


def test_mutants_are_reproducible_from_the_seed():
    seeds = fuzz_inputs.seeds()
    first = [fuzz_inputs.make_mutant(i, 5, seeds, {}) for i in range(8)]
    again = [fuzz_inputs.make_mutant(i, 5, seeds, {}) for i in range(8)]
    other = [fuzz_inputs.make_mutant(i, 6, seeds, {}) for i in range(8)]
    assert [(m.label, m.files) for m in first] == [(m.label, m.files) for m in again]
    assert [m.files for m in first] != [m.files for m in other]


def test_nested_damage_keeps_the_enclosing_lengths_right(tpu_xplane):
    """A huge length planted inside a plane re-encodes the plane's length, so only the inner check sees it."""
    import numpy as np

    data = tpu_xplane.read_bytes()
    for i in range(20):
        mutant, label = mutators.huge_length(data, np.random.default_rng(i), [data])
        if "depth" in label and "depth 0" not in label:
            top = mutators.fields(mutant, 0, len(mutant))
            assert top is not None and mutant != data, label
            return
    raise AssertionError("no nested mutation in 20 tries")


def test_fuzz_find_huge_allocation_number_is_a_note_not_a_crash(tmp_path):
    """Fuzz find: a 23-digit size in a buffer assignment overflowed int64 (OverflowError, exit 1)."""
    import pytest

    from xladiag.parsers.xla_memory_reports import MemoryReportError, parse_buffer_assignment

    text = "allocation 0: size 18446744073709551616999, parameter 0, shape |f32[4]| at ShapeIndex {}:\n"
    with pytest.raises(MemoryReportError, match="not a plausible size"):
        parse_buffer_assignment(text, "m.txt")
    assert len(parse_buffer_assignment(text.replace("18446744073709551616999", "16"), "m.txt").allocations) == 1

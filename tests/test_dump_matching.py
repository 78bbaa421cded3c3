"""Whole XLA dumps against real captures: each traced program gets its own dump module (by program id,
else by content, never by name alone), unrelated modules are ignored with a note, a foreign dump is a
warning, and without a trace one program is chosen. Data: the recorded samples jax_fsdp_tp_train (27
modules, jit__normal x4, jit_train_step x2) and jax_many_programs (six jit_dot programs, one op name)."""

from __future__ import annotations

import json
import re
import shutil
import warnings

import pytest

from conftest import CPU_SAMPLE, HLO_SAMPLE, SAMPLES
from xladiag.analyzer.analysis import analyze
from xladiag.errors import InputError

TRAIN = SAMPLES / "jax_fsdp_tp_train"
MANY = SAMPLES / "jax_many_programs"


def _analyze(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze(*args, **kw)


def _renumbered(paths, dump, shift: int):
    """Copy dump files into ``dump`` with their module ids shifted: a dump of another process."""
    dump.mkdir()
    for path in paths:
        number = int(path.name[7:11])
        shutil.copy(path, dump / path.name.replace(f"module_{number:04d}", f"module_{number + shift:04d}"))
    return dump


def _total_bytes(report) -> int:
    return int(re.search(r"^Total bytes:\s*(\d+)", report.read_text(), re.M).group(1))


@pytest.fixture(scope="module")
def train():
    return _analyze(TRAIN)


def test_whole_dump_every_traced_program_gets_its_own_module(train):
    known = json.loads((TRAIN / "known_answers.json").read_text())
    executed = {m["module_id"]: m["module_name"] for m in known["dump_modules"] if m["executed_in_trace"]}
    matched = train.dump.modules[train.dump.modules["matched_by"] != ""]
    assert dict(zip(matched["module_id"], matched["module"])) == executed  # 103 train step, 101 global norm
    assert set(matched["program_id"].astype(int)) == set(executed) and set(matched["matched_by"]) == {"program id"}
    # The annotated steps launch the train step and the global norm; the train step's ops take their FLOPs
    # and bytes from module 103, not its twin 63.
    step = train.ops[train.ops["in_step"]]
    assert set(step["program_id"]) == {"101", "103"} and (step["flops_source"] == "hlo").all()
    assert set(train.dump.analysed) == {"jit_train_step (module_0103)", "jit_global_norm (module_0101)"}
    own = next((TRAIN / "hlo").glob("module_0103.*memory-usage-report.txt"))
    twin = next((TRAIN / "hlo").glob("module_0063.*memory-usage-report.txt"))
    assert train.dump.peak_memory_bytes == _total_bytes(own) != _total_bytes(twin)
    ignored = [w for w in train.warnings if "not among the traced programs" in w]
    assert len(ignored) == 1 and "jit__normal x4" in ignored[0] and "jit_train_step" in ignored[0]


def test_programs_with_one_name_keep_their_own_flops():
    known = json.loads((MANY / "known_answers.json").read_text())
    analysis = _analyze(MANY)
    ops = analysis.ops.set_index("program_id")
    for program in known["programs"]:
        m, k, n = program["m_k_n"]
        assert ops.loc[str(program["program_id"]), "flops"] == 2 * m * k * n
        assert ops.loc[str(program["program_id"]), "flops_source"] == "hlo"


def _from_dump(analysis):
    """The dump modules' rows (not the HLO the capture itself carries)."""
    modules = analysis.dump.modules
    return modules[modules["file"] != "(capture)"]


def _flops_without_dump(sample):
    ops = _analyze(sample).ops
    return ops.set_index(["op_name", "program_id"])["flops"].fillna(-1)


def test_a_dump_of_another_program_is_a_warning_not_a_join():
    own = _flops_without_dump(MANY)  # what the capture's own HLO gives
    for foreign in (CPU_SAMPLE / "hlo", TRAIN / "hlo"):  # module 0 is jit_train_step there, jit_dot here
        analysis = _analyze(MANY, hlo_dir=foreign)
        assert any("matches none of the traced programs" in w for w in analysis.warnings)
        assert (_from_dump(analysis)["matched_by"] == "").all()
        flops = analysis.ops.set_index(["op_name", "program_id"])["flops"].fillna(-1)
        assert flops.sort_index().equals(own.sort_index())  # nothing pasted from the foreign dump


def test_without_ids_the_module_is_found_by_its_ops(tmp_path):
    """A dump from another run (ids shifted): jit_train_step is the compile whose ops the trace ran."""
    dump = _renumbered((TRAIN / "hlo").glob("module_0*.jit_train_step.cpu_after_optimizations*"),
                       tmp_path / "dump", 1000)
    analysis = _analyze(TRAIN, hlo_dir=dump)
    matched = analysis.dump.modules.set_index("module_id")
    assert matched.loc[1103, "matched_by"] == "content" and matched.loc[1103, "program_id"] == "103"
    assert matched.loc[1063, "matched_by"] == ""
    assert analysis.dump.peak_memory_bytes == _total_bytes(next(dump.glob("module_1103.*memory-usage-report.txt")))


def test_identical_candidates_are_ambiguous_and_join_nothing(tmp_path):
    """Six jit_dot modules that all hold one 'ynn_fusion': by content alone none can be told apart."""
    dump = _renumbered((MANY / "hlo").glob("*cpu_after_optimizations.txt"), tmp_path / "dump", 1)
    analysis = _analyze(MANY, hlo_dir=dump)
    assert (_from_dump(analysis)["matched_by"] == "").all()
    assert sum("fit its ops equally" in w for w in analysis.warnings) == 6


def test_hlo_only_analyses_the_program_with_the_most_flops_and_lists_the_rest():
    analysis = _analyze(hlo_dir=TRAIN / "hlo", chip="v6e")
    assert analysis.dump.analysed == ("jit_train_step (module_0103)",)  # the latest compile of the biggest program
    assert set(analysis.ops["module"]) == {"jit_train_step"}
    listed = next(w for w in analysis.warnings if "holds 27 programs" in w)
    assert "jit_loss_fn" in listed and "jit__normal x4" in listed
    chosen = _analyze(hlo_dir=TRAIN / "hlo", chip="v6e", program="jit_loss_fn")
    assert chosen.dump.analysed == ("jit_loss_fn (module_0046)",)
    assert _analyze(hlo_dir=TRAIN / "hlo", chip="v6e", program="module_0063").dump.analysed == (
        "jit_train_step (module_0063)",)
    with pytest.raises(InputError, match=r"program 'nope': no such module.*jit_loss_fn") as err:
        _analyze(hlo_dir=TRAIN / "hlo", chip="v6e", program="nope")
    assert "\n" not in str(err.value)


def test_a_module_cut_before_entry_is_ignored_beside_a_trace(tmp_path):
    sample = tmp_path / "run"
    shutil.copytree(CPU_SAMPLE, sample)
    hlo = next((sample / "hlo").glob("*after_optimizations.txt"))
    text = hlo.read_text()
    cut = text[: text.index("\nENTRY")] + "\n"
    (sample / "hlo" / "module_0004.jit_eval.cpu_after_optimizations.txt").write_text(
        cut.replace("HloModule jit_train_step", "HloModule jit_eval"))
    analysis = _analyze(sample)
    assert any("jit_eval (module_0004) is cut before its ENTRY" in w for w in analysis.warnings)
    assert analysis.dump.analysed == ("jit_train_step (module_0000)",)


def test_a_module_without_scheduled_instructions_does_not_crash(tmp_path):
    """Only a fused computation, cut before ENTRY: nothing runs as an op (was KeyError 'is_async_start')."""
    (tmp_path / "m.after_optimizations.txt").write_text(
        "HloModule jit_f\n\n%fused_computation (p: f32[8]) -> f32[8] {\n"
        "  %p = f32[8]{0} parameter(0)\n  ROOT %n = f32[8]{0} negate(f32[8]{0} %p)\n}\n")
    analysis = _analyze(hlo_dir=tmp_path, chip="v6e", program="jit_f")
    assert analysis.ops.empty and any("ENTRY" in w for w in analysis.warnings)


def test_hlo_only_a_dump_cut_before_entry_is_an_error_unless_named(tmp_path):
    """The bundled MaxText module is cut before ENTRY: no program, so HLO-only mode refuses it in one line;
    --program naming it analyses the computations it holds, with a warning."""
    from click.testing import CliRunner

    from xladiag.cli import main

    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)

    out = tmp_path / "r.json"
    refused = run("--hlo-dir", HLO_SAMPLE, "--chip", "v6e", "--format", "json", "-o", out, "-q")
    lines = refused.stderr.strip().splitlines()
    assert refused.exit_code == 1 and len(lines) == 1 and not out.exists()
    assert "cut before its ENTRY computation" in lines[0] and "--program jit_train_step" in lines[0]
    named = run("--hlo-dir", HLO_SAMPLE, "--chip", "v6e", "--program", "jit_train_step", "--format", "json",
                "-o", out)
    assert named.exit_code == 0, named.stderr
    report = json.loads(out.read_text())
    assert report["ops"] and any("ends before its ENTRY" in w for w in report["warnings"])


def test_cli_whole_dump_exit_0_and_program_option(tmp_path):
    from click.testing import CliRunner

    from xladiag.cli import main

    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)

    out = tmp_path / "r.json"
    done = run(TRAIN / "plugins", "--hlo-dir", TRAIN / "hlo", "--format", "json", "-o", out, "-q")
    assert done.exit_code == 0, done.stderr
    assert any("not among the traced programs" in w for w in json.loads(out.read_text())["warnings"])
    picked = run("--hlo-dir", TRAIN / "hlo", "--chip", "v6e", "--program", "jit_loss_fn", "--format", "json",
                 "-o", out, "-q")
    assert picked.exit_code == 0 and {o["module"] for o in json.loads(out.read_text())["ops"]} == {"jit_loss_fn"}
    bad = run("--hlo-dir", TRAIN / "hlo", "--chip", "v6e", "--program", "nope", "-o", out, "-q")
    lines = bad.stderr.strip().splitlines()
    assert bad.exit_code == 1 and len(lines) == 1 and "program 'nope'" in lines[0]


def test_several_dumps_in_one_dir(tmp_path):
    """Two processes' dumps side by side, both with a jit_train_step: the traced one (id 103) is found;
    the other process's jit_train_step (id 0) is listed as ignored."""
    root = tmp_path / "dumps"
    shutil.copytree(CPU_SAMPLE / "hlo", root / "other_run")
    mine = root / "this_run"
    mine.mkdir()
    for path in (TRAIN / "hlo").glob("module_0*.jit_train_step.cpu_after_optimizations*"):
        shutil.copy(path, mine / path.name)
    analysis = _analyze(TRAIN, hlo_dir=root)
    matched = _from_dump(analysis)
    matched = matched[matched["matched_by"] != ""]
    assert matched[["module_id", "program_id", "matched_by"]].values.tolist() == [[103, "103", "program id"]]
    # The other traced program (jit_global_norm, 101) is not in this dump: the capture's own HLO prices it.
    assert analysis.dump.analysed == ("jit_train_step (module_0103)", "jit_global_norm (HLO from the capture)")
    assert "101" in set(analysis.dump.modules.loc[analysis.dump.modules["file"] == "(capture)", "program_id"])
    assert any("not among the traced programs" in w and "jit_train_step x2" in w for w in analysis.warnings)


def test_hlo_only_ignores_a_cut_module_beside_whole_ones(tmp_path):
    shutil.copytree(CPU_SAMPLE / "hlo", tmp_path / "hlo")
    hlo = next((tmp_path / "hlo").glob("*after_optimizations.txt"))
    text = hlo.read_text()
    (tmp_path / "hlo" / "module_0009.jit_big.cpu_after_optimizations.txt").write_text(
        text[: text.index("\nENTRY")].replace("HloModule jit_train_step", "HloModule jit_big") + "\n")
    analysis = _analyze(hlo_dir=tmp_path / "hlo", chip="v6e")
    assert analysis.dump.analysed == ("jit_train_step (module_0000)",)
    assert any("jit_big (module_0009) is cut before its ENTRY" in w for w in analysis.warnings)

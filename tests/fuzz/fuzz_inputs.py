"""Mutation fuzzer: damaged copies of the bundled captures and dumps, each diagnosed by the real CLI.

    python tests/fuzz/fuzz_inputs.py --mutants 2000 --seed 1 [--workers 2] [--keep DIR] [--structured K]

Each mutant runs ``python -m xladiag.cli ... --format json`` in its own process (the RSS read from
``wait4`` is the run's own, or this runner's if larger: keep the runner small) and must: print no
traceback or Python warning, exit 0, 1 or 2, stay under the RSS cap, and, on exit 0, write JSON valid
against the report's JSON Schema whose every number is finite and plausible (see ``json_problems``). The
same ``--seed`` gives the same mutants; a failure prints the index to rerun. The CI test (tests/test_fuzz.py)
runs the same mutants with the same checks in-process instead (``in_process.py``), in worker processes started
once, and structure-aware mutants of a built capture (``structured.py``).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutators  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_profiles"
RSS_CAP_BYTES = 1_500_000_000
TIMEOUT_S = 120
_ADDRESS_SPACE_LIMIT = 8 << 30  # a runaway mutant fails inside its own process, not the machine
# Plausibility bounds for the numbers of a report made from the bundled samples (steps < 1 s).
MAX_SECONDS = 1e4
MAX_EFFICIENCY = 1e3
# Named 'fraction' but documented as a ratio that may pass 1 (remat FLOPs over the rest of the step's).
_RATIOS = {"extra_flops_fraction"}


@dataclass(frozen=True)
class Seed:
    """One bundled input: an xplane file (diagnosed alone) or a dump dir (diagnosed with --hlo-dir)."""

    kind: str  # 'xplane' | 'hlo'
    path: Path  # the xplane file, or the dump dir
    args: tuple[str, ...] = ()  # extra CLI arguments (HLO-only runs need a chip)

    @property
    def name(self) -> str:
        # A dump dir's whole path: a sample may hold several (jax_fsdp_buckets/before/hlo, .../after/hlo).
        rel = self.path.relative_to(SAMPLES).parts
        return "/".join(rel if self.kind == "hlo" else (rel[0], rel[-1]))

    def files(self) -> list[Path]:
        return [self.path] if self.kind == "xplane" else sorted(self.path.glob("*.txt"))


def seeds() -> list[Seed]:
    out = [Seed("xplane", p) for p in sorted(SAMPLES.glob("*/plugins/profile/*/*.xplane.pb"))]
    dump_dirs = sorted({p.parent for p in SAMPLES.rglob("*after_optimizations*.txt")})
    out += [Seed("hlo", d, ("--chip", "v6e" if "v6e" in str(d) else "cpu")) for d in dump_dirs]
    return out


@dataclass
class Mutant:
    index: int
    seed: Seed
    label: str
    files: dict[str, bytes]  # relative path -> content
    args: list[str]


_RUN = "plugins/profile/2000_01_01_00_00_00"


def unmutated(seed: Seed) -> Mutant:
    if seed.kind == "xplane":
        return Mutant(-1, seed, "unmutated", {f"{_RUN}/{seed.path.name}": seed.path.read_bytes()}, ["."])
    return Mutant(-1, seed, "unmutated", {p.name: p.read_bytes() for p in seed.files()},
                  ["--hlo-dir", ".", *seed.args])


def make_mutant(index: int, seed_value: int, all_seeds: list[Seed], cache: dict) -> Mutant:
    rng = np.random.default_rng([seed_value, index])
    kinds = sorted({s.kind for s in all_seeds})
    kind = kinds[int(rng.integers(len(kinds)))]  # captures and dumps alike, however many of each
    of_kind = [s for s in all_seeds if s.kind == kind]
    seed = of_kind[int(rng.integers(len(of_kind)))]
    base = unmutated(seed)
    same_kind = [f for s in all_seeds if s.kind == seed.kind for f in s.files()]
    target = seed.files()[int(rng.integers(len(seed.files())))]
    rel = f"{_RUN}/{target.name}" if seed.kind == "xplane" else target.name
    data = base.files[rel]
    if seed.kind == "xplane" and rng.random() < 0.04:  # two byte-identical host files
        base.files[f"{_RUN}/copy-{target.name}"] = data
        return Mutant(index, seed, "duplicated host file", base.files, base.args)
    pool = mutators.PROTO_MUTATORS if seed.kind == "xplane" else mutators.TEXT_MUTATORS
    mutate = pool[int(rng.integers(len(pool)))]
    others = [cache.setdefault(f, f.read_bytes()) for f in
              [same_kind[int(i)] for i in rng.integers(0, len(same_kind), 2)]]
    base.files[rel], label = mutate(data, rng, others)
    return Mutant(index, seed, f"{target.name}: {mutate.__name__}: {label}", base.files, base.args)


def _number_problems(doc, path: str = "") -> list[str]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _number_problems(v, f"{path}.{k}")]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _number_problems(v, f"{path}[{i}]")]
    if isinstance(doc, bool) or not isinstance(doc, (int, float)):
        return []
    key = path.rsplit(".", 1)[-1]
    if not math.isfinite(doc):
        return [f"non-finite {key}"]
    if doc < 0:
        return [f"negative {key}"]
    if ("share" in key or "fraction" in key or key == "mfu") and key not in _RATIOS and doc > 1 + 1e-9:
        return [f"{key} above 1"]
    is_time = key.endswith("_s") and not key.endswith("_per_s") or key.endswith("_s_per_step")
    if is_time and doc > MAX_SECONDS:
        return [f"absurd time {key}"]
    if key == "efficiency" and doc > MAX_EFFICIENCY:
        return ["absurd efficiency"]
    return []


# The warning of a report whose step is absurdly long (analysis.py): its times may then be as absurd.
CLOCK_WARNING = "the capture's clock is likely damaged or rescaled"


@functools.cache
def _schema_validator():
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads((REPO / "report" / "report.schema.json").read_text()))


def schema_problems(doc: dict) -> list[str]:
    """Where the report breaks its own JSON Schema (report/report.schema.json), one kind per field."""
    return sorted({f"schema: {'.'.join(str(p) for p in e.absolute_path if not isinstance(p, int))}: "
                   f"{e.message[:80]}" for e in _schema_validator().iter_errors(doc)})


def json_problems(doc: dict) -> list[str]:
    """What is implausible in a JSON report: the kinds of problem, without positions (for grouping). Absurd
    times are allowed where the report says its clock is (the warning is the finding)."""
    problems = _number_problems(doc)
    if any(CLOCK_WARNING in str(w) for w in doc.get("warnings") or []):
        problems = [p for p in problems if not p.startswith("absurd time")]
    step = doc.get("step_s")
    for finding in doc.get("findings") or []:
        saves = finding.get("est_savings_s_per_step")
        if step is not None and saves is not None and saves > step * 1.01 + 1e-12:
            problems.append(f"{finding.get('rule')} saves more than the step")
    return sorted(set(problems))


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (_ADDRESS_SPACE_LIMIT, _ADDRESS_SPACE_LIMIT))


@dataclass
class Outcome:
    mutant: Mutant
    code: int
    rss: int
    problems: list[str] = field(default_factory=list)


def write_case(mutant: Mutant, workdir: Path) -> Path:
    """The mutant's files on disk, in its own folder (the seed's own folder for an unmutated seed)."""
    case = workdir / f"m{mutant.index}" if mutant.index >= 0 else workdir
    for rel, content in mutant.files.items():
        (case / rel).parent.mkdir(parents=True, exist_ok=True)
        (case / rel).write_bytes(content)
    return case


def problems_of(code: int, stderr: str, rss: int, report: Path) -> list[str]:
    """What went wrong in one run: ``code`` the exit status (-9: killed at the timeout), ``stderr`` what the
    CLI printed there, ``report`` where it was told to write its JSON."""
    problems = []
    if "internal error" in stderr:  # the CLI's one line for an unexpected exception: still a crash
        problems.append("crash: " + next(ln for ln in stderr.splitlines() if "internal error" in ln)[:160])
    elif "Traceback" in stderr:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        where = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
        problems.append(f"traceback: {lines[-1][:120]} @ {where[-1][:140] if where else '?'}")
    elif "Warning" in stderr:
        problems.append("python warning: " + next(ln for ln in stderr.splitlines() if "Warning" in ln)[-120:])
    if code not in (0, 1, 2):
        problems.append("timeout" if code == -9 else f"exit {code}")
    if rss > RSS_CAP_BYTES:
        problems.append(f"rss {rss / 1e9:.1f} GB")
    if code == 0:
        try:
            doc = json.loads(report.read_text())
            problems += json_problems(doc) + schema_problems(doc)
        except (OSError, ValueError) as exc:
            problems.append(f"exit 0 without a JSON report: {type(exc).__name__}")
    elif "\n" in stderr.strip() and not problems:
        problems.append("error message over several lines")
    return problems


def finish(mutant: Mutant, case: Path, code: int, rss: int, problems: list[str]) -> Outcome:
    if not problems:
        shutil.rmtree(case, ignore_errors=True)
    # The files are on disk (kept when it failed): holding thousands of mutants would grow this process,
    # and a child's ru_maxrss starts at its parent's RSS (Linux keeps the high-water mark across exec).
    mutant.files = {}
    return Outcome(mutant, code, rss, problems)


def run_mutant(mutant: Mutant, workdir: Path) -> Outcome:
    """The mutant diagnosed by ``python -m xladiag.cli`` in its own process, under an address-space cap."""
    case = write_case(mutant, workdir)
    cmd = [sys.executable, "-m", "xladiag.cli", *mutant.args, "--format", "json", "-o", "report.json", "-q"]
    with open(case / "stderr", "wb") as err:
        proc = subprocess.Popen(cmd, cwd=case, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_limit_memory)
        timer = threading.Timer(TIMEOUT_S, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    rss = usage.ru_maxrss * 1024
    stderr = (case / "stderr").read_text(errors="replace")
    return finish(mutant, case, code, rss, problems_of(code, stderr, rss, case / "report.json"))


def run_fuzz(mutants: int, seed: int, workers: int = 2, first: int = 0, keep: Path | None = None,
             progress=None, runner=run_mutant) -> tuple[list[Outcome], list[Outcome]]:
    """(outcomes of the mutants, failing unmutated seeds). Seeds that fail unmutated are not mutated:
    their failure is a bug of its own, reported once instead of once per mutant. ``runner(mutant, workdir)``
    runs one; with ``workers=1`` all run on the calling thread (an in-process runner needs it)."""
    all_seeds, cache = seeds(), {}
    with tempfile.TemporaryDirectory(prefix="xladiag-fuzz-") as tmp:
        workdir = Path(keep) if keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(workers) as pool:
            each = pool.map if workers > 1 else map
            baseline = list(each(lambda s: runner(unmutated(s), workdir / s.name.replace("/", "_")), all_seeds))
            broken = [o for o in baseline if o.problems]
            healthy = [o.mutant.seed for o in baseline if not o.problems]

            def one(i: int) -> Outcome:
                outcome = runner(make_mutant(i, seed, healthy, cache), workdir)
                if progress:
                    progress(outcome)
                return outcome

            return list(each(one, range(first, first + mutants))) if healthy else [], broken


def summary(outcomes: list[Outcome]) -> str:
    codes = Counter(o.code for o in outcomes)
    failed = [o for o in outcomes if o.problems]
    kinds = Counter(p for o in failed for p in o.problems)
    lines = [f"{len(outcomes)} mutants: exit codes {dict(sorted(codes.items()))}, "
             f"max RSS {max((o.rss for o in outcomes), default=0) / 1e6:.0f} MB, {len(failed)} failed"]
    for problem, n in kinds.most_common():
        example = next(o for o in failed if problem in o.problems).mutant
        lines.append(f"  {n:5d}  {problem}   (e.g. #{example.index} {example.seed.name}: {example.label})")
    return "\n".join(lines)


def _run_structured(args, progress) -> list[Outcome]:
    import structured

    chosen = structured.mutants(args.first + args.mutants, args.seed, args.structured)[args.first:]
    with tempfile.TemporaryDirectory(prefix="xladiag-fuzz-") as tmp, ThreadPoolExecutor(args.workers) as pool:
        workdir = Path(args.keep or tmp)

        def one(mutant: Mutant) -> Outcome:
            outcome = run_mutant(mutant, workdir)
            progress(outcome)
            return outcome

        return list(pool.map(one, chosen))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="index of the first mutant (to rerun one)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep failing mutants (files, stderr) under this dir")
    parser.add_argument("--structured", type=int, default=0, metavar="K",
                        help="instead: structure-aware mutants of a built capture, K mutators each (structured.py)")
    args = parser.parse_args(argv)
    done = []

    def progress(o: Outcome) -> None:
        done.append(o)
        if o.problems:
            print(f"#{o.mutant.index} {o.mutant.seed.name} [{o.mutant.label}] exit {o.code}: "
                  f"{'; '.join(o.problems)}", flush=True)
        if len(done) % 100 == 0:
            print(f"... {len(done)} mutants", flush=True)

    if args.structured:
        outcomes, broken = _run_structured(args, progress), []
    else:
        outcomes, broken = run_fuzz(args.mutants, args.seed, args.workers, args.first, args.keep, progress)
    for o in broken:
        print(f"seed {o.mutant.seed.name} fails unmutated (not fuzzed): {'; '.join(o.problems)}")
    print(summary(outcomes))
    return 1 if broken or any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())

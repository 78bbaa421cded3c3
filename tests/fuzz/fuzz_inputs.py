"""Mutation fuzzer: damaged copies of the bundled captures and dumps, each diagnosed by the real CLI.

    python tests/fuzz/fuzz_inputs.py --mutants 2000 --seed 1 [--workers 2] [--keep DIR]

Each mutant runs ``python -m xladiag.cli ... --format json`` in its own process (so the RSS we read
from ``wait4`` is the run's own) and must: print no traceback or Python warning, exit 0, 1 or 2, stay
under the RSS cap, and, on exit 0, write JSON whose every number is finite and plausible (see
``json_problems``). The same ``--seed`` gives the same mutants; a failure prints the index to rerun.
"""

from __future__ import annotations

import argparse
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


@dataclass(frozen=True)
class Seed:
    kind: str  # 'xplane' | 'hlo'
    path: Path
    args: tuple[str, ...] = ()  # extra CLI arguments (HLO-only runs need a chip)


def seeds() -> list[Seed]:
    out = [Seed("xplane", p) for p in sorted(SAMPLES.glob("*/plugins/profile/*/*.xplane.pb"))]
    for p in sorted(SAMPLES.rglob("*.txt")):
        out.append(Seed("hlo", p, ("--chip", "cpu" if "cpu" in p.parts[-3] else "v6e")))
    return out


@dataclass
class Mutant:
    index: int
    seed: Seed
    label: str
    files: dict[str, bytes]  # relative path -> content
    args: list[str]


def make_mutant(index: int, seed_value: int, all_seeds: list[Seed], cache: dict) -> Mutant:
    rng = np.random.default_rng([seed_value, index])
    seed = all_seeds[int(rng.integers(len(all_seeds)))]
    data = cache.setdefault(seed.path, seed.path.read_bytes())
    same_kind = [cache.setdefault(s.path, s.path.read_bytes()) for s in all_seeds if s.kind == seed.kind]
    if seed.kind == "xplane":
        run = "plugins/profile/2000_01_01_00_00_00"
        if rng.random() < 0.04:  # two byte-identical host files
            return Mutant(index, seed, "duplicated host file", {f"{run}/a.xplane.pb": data,
                                                                 f"{run}/b.xplane.pb": data}, ["."])
        mutate = mutators.PROTO_MUTATORS[int(rng.integers(len(mutators.PROTO_MUTATORS)))]
        new, label = mutate(data, rng, same_kind)
        return Mutant(index, seed, f"{mutate.__name__}: {label}", {f"{run}/{seed.path.name}": new}, ["."])
    mutate = mutators.TEXT_MUTATORS[int(rng.integers(len(mutators.TEXT_MUTATORS)))]
    new, label = mutate(data, rng, same_kind)
    files = {p.name: cache.setdefault(p, p.read_bytes()) for p in seed.path.parent.glob("*.txt")}
    files[seed.path.name] = new
    return Mutant(index, seed, f"{mutate.__name__}: {label}", files, ["--hlo-dir", ".", *seed.args])


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
    if ("share" in key or "fraction" in key or key == "mfu") and doc > 1 + 1e-9:
        return [f"{key} above 1"]
    is_time = key.endswith("_s") and not key.endswith("_per_s") or key.endswith("_s_per_step")
    if is_time and doc > MAX_SECONDS:
        return [f"absurd time {key}"]
    if key == "efficiency" and doc > MAX_EFFICIENCY:
        return ["absurd efficiency"]
    return []


def json_problems(doc: dict) -> list[str]:
    """What is implausible in a JSON report: the kinds of problem, without positions (for grouping)."""
    problems = _number_problems(doc)
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


def run_mutant(mutant: Mutant, workdir: Path) -> Outcome:
    case = workdir / f"m{mutant.index}"
    for rel, content in mutant.files.items():
        (case / rel).parent.mkdir(parents=True, exist_ok=True)
        (case / rel).write_bytes(content)
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
    problems = []
    if "Traceback" in stderr:
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
            problems += json_problems(json.loads((case / "report.json").read_text()))
        except (OSError, ValueError) as exc:
            problems.append(f"exit 0 without a JSON report: {type(exc).__name__}")
    elif "\n" in stderr.strip() and not problems:
        problems.append("error message over several lines")
    if not problems:
        shutil.rmtree(case, ignore_errors=True)
    return Outcome(mutant, code, rss, problems)


def run_fuzz(mutants: int, seed: int, workers: int = 2, first: int = 0, keep: Path | None = None,
             progress=None) -> list[Outcome]:
    all_seeds, cache = seeds(), {}
    with tempfile.TemporaryDirectory(prefix="xladiag-fuzz-") as tmp:
        workdir = Path(keep) if keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)

        def one(i: int) -> Outcome:
            outcome = run_mutant(make_mutant(i, seed, all_seeds, cache), workdir)
            if progress:
                progress(outcome)
            return outcome

        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, range(first, first + mutants)))


def summary(outcomes: list[Outcome]) -> str:
    codes = Counter(o.code for o in outcomes)
    failed = [o for o in outcomes if o.problems]
    kinds = Counter(p for o in failed for p in o.problems)
    lines = [f"{len(outcomes)} mutants: exit codes {dict(sorted(codes.items()))}, "
             f"max RSS {max((o.rss for o in outcomes), default=0) / 1e6:.0f} MB, {len(failed)} failed"]
    for problem, n in kinds.most_common():
        example = next(o for o in failed if problem in o.problems).mutant
        lines.append(f"  {n:5d}  {problem}   (e.g. #{example.index} {example.seed.path.name}: {example.label})")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="index of the first mutant (to rerun one)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep failing mutants (files, stderr) under this dir")
    args = parser.parse_args(argv)
    done = []

    def progress(o: Outcome) -> None:
        done.append(o)
        if o.problems:
            print(f"#{o.mutant.index} {o.mutant.seed.path.name} [{o.mutant.label}] exit {o.code}: "
                  f"{'; '.join(o.problems)}", flush=True)
        if len(done) % 100 == 0:
            print(f"... {len(done)} mutants", flush=True)

    outcomes = run_fuzz(args.mutants, args.seed, args.workers, args.first, args.keep, progress)
    print(summary(outcomes))
    return 1 if any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())

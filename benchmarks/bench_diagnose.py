"""Speed and memory of ``diagnose`` against xprof's own converter on a ~1M-event TPU capture.

    python benchmarks/bench_diagnose.py                  # build into a temp dir, 3 runs per row
    python benchmarks/bench_diagnose.py --keep /tmp/big  # keep (and reuse) the capture there
    python benchmarks/bench_diagnose.py --events 200000 --repeat 1 --json results.json

Every measurement runs as ``python <wrapper> <command>``: the wrapper starts the command, waits for it and
reads ``getrusage(RUSAGE_CHILDREN)``, so each peak RSS belongs to that one command (and whatever it waited
for) and never mixes with another row's children. Wall time includes interpreter start and imports on both
sides, because that is what a user waits for.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]

_WRAPPER = r"""
import json, resource, subprocess, sys, time
cmd = json.loads(sys.argv[1])
t0 = time.perf_counter()
proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall_s = time.perf_counter() - t0
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
lines = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
print(json.dumps({"rc": proc.returncode, "wall_s": wall_s, "max_rss_bytes": usage.ru_maxrss * 1024,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "last_stderr": lines[-1] if lines else ""}))
"""

_XPROF = (
    "import sys\n"
    "from xprof.convert import raw_to_tool_data as r\n"
    "data, _ = r.xspace_to_tool_data([sys.argv[1]], 'hlo_stats', {'use_saved_result': False})\n"
    "assert data, 'xprof returned no hlo_stats'\n"
)

_PARSE_ONLY = "import sys\nfrom xladiag.parsers.xplane import read_xspace\nread_xspace(sys.argv[1])\n"


def measure(cmd: list[str]) -> dict:
    """One run of ``cmd`` in a fresh wrapper process: wall seconds, peak RSS bytes, exit code."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(cmd)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def build_capture(logdir: Path, num_events: int) -> Path:
    sys.path.insert(0, str(_REPO / "tests"))
    from builders import large_capture  # noqa: E402  (test fixture module, not part of the package)

    existing = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if existing:
        print(f"reusing {existing[0]}", file=sys.stderr)
        return existing[0]
    t0 = time.perf_counter()
    path = large_capture.large_capture(logdir, num_events=num_events)
    print(f"built {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return path


def diagnose_cmd(logdir: Path, out_json: Path) -> list[str]:
    exe = shutil.which("diagnose")
    head = [exe] if exe else [sys.executable, "-c", "import sys; from xladiag.cli import main; sys.exit(main())"]
    return head + [str(logdir), "--format", "json", "-o", str(out_json), "--quiet"]


def _clear_xprof_cache(xplane: Path) -> None:
    # xprof caches op stats next to the capture (ALL_HOSTS.op_stats_v2.pb); a cached run measures nothing.
    for cached in xplane.parent.glob("*.op_stats*.pb"):
        cached.unlink()


def run_rows(logdir: Path, xplane: Path, work: Path, repeat: int) -> list[dict]:
    rows = [("diagnose (ours, end to end)", lambda: diagnose_cmd(logdir, work / "out.json"))]
    if importlib.util.find_spec("xladiag.parsers.xplane") is not None:
        rows.append(("read_xspace (ours, parse only)", lambda: [sys.executable, "-c", _PARSE_ONLY, str(xplane)]))
    rows.append(("xprof hlo_stats", lambda: [sys.executable, "-c", _XPROF, str(xplane)]))
    results = []
    for label, make_cmd in rows:
        runs = []
        for _ in range(repeat):
            _clear_xprof_cache(xplane)
            runs.append(measure(make_cmd()))
        failed = [r for r in runs if r["rc"] != 0]
        row = {"label": label, "runs": runs}
        if failed:
            row["error"] = f"{label.split()[0]} failed: {failed[-1]['last_stderr'] or 'exit ' + str(failed[-1]['rc'])}"
        else:
            row["wall_s"] = statistics.median(r["wall_s"] for r in runs)
            row["wall_min_s"] = min(r["wall_s"] for r in runs)
            row["max_rss_bytes"] = max(r["max_rss_bytes"] for r in runs)
        results.append(row)
    _clear_xprof_cache(xplane)
    return results


def render(results: list[dict], xplane: Path, num_events: int) -> str:
    ref = next((r for r in results if r["label"].startswith("xprof") and "error" not in r), None)
    lines = [f"capture: {xplane} ({xplane.stat().st_size / 1e6:.1f} MB, ~{num_events:,} XLA Ops events); "
             f"{os.cpu_count()} CPUs",
             f"{'row':32} {'wall s (median)':>16} {'min s':>8} {'peak RSS MB':>12} {'time / xprof':>13} "
             f"{'RSS / xprof':>12}"]
    for r in results:
        if "error" in r:
            lines.append(f"{r['label']:32} {r['error']}")
            continue
        t_ratio = f"{r['wall_s'] / ref['wall_s']:.2f}" if ref else "-"
        m_ratio = f"{r['max_rss_bytes'] / ref['max_rss_bytes']:.2f}" if ref else "-"
        lines.append(f"{r['label']:32} {r['wall_s']:16.2f} {r['wall_min_s']:8.2f} "
                     f"{r['max_rss_bytes'] / 2**20:12.0f} {t_ratio:>13} {m_ratio:>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", type=Path, help="log dir to build the capture into and keep (reused if present)")
    ap.add_argument("--events", type=int, default=1_000_000, help="XLA Ops events in the capture")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (median wall time, max RSS)")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="xladiag_bench_") as tmp:
        work = Path(tmp)
        logdir = args.keep or work / "logdir"
        xplane = build_capture(logdir, args.events)
        results = run_rows(logdir, xplane, work, args.repeat)
        print(render(results, xplane, args.events))
        if args.json:
            args.json.write_text(json.dumps({"capture": str(xplane), "events": args.events,
                                             "cpus": os.cpu_count(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

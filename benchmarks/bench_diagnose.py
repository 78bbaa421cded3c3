"""``diagnose`` against xprof's ``hlo_stats`` converter: wall time, peak memory and CPU, as one markdown table.

    python benchmarks/bench_diagnose.py                          # TPU 1M, 5M, 16 hosts x 259k; GPU 5M, 16 x 259k
    python benchmarks/bench_diagnose.py --captures /tmp/xbench   # build the captures there once, reuse them
    python benchmarks/bench_diagnose.py --rows 1M,gpu1M          # any of _ROWS (10M: xprof needs ~12 GB)
    python benchmarks/bench_diagnose.py --readme README.md       # also rewrite the README's summary
    python benchmarks/bench_diagnose.py --smoke                  # tiny captures, one run (the CI check)

Each run is one command in a fresh wrapper process that starts it, samples the summed RSS of its whole
process tree (psutil, every 20 ms) and, once it exits, reads ``getrusage(RUSAGE_CHILDREN)``: wall time, CPU
time (user + system of every process it waited for) and the largest single-process peak. A row's peak
memory is the larger of the tree-sum samples and that single-process peak (exact for one process).
Wall time includes interpreter start and imports on both sides: a user waits for those too.

Runs are interleaved (xprof, diagnose JSON, diagnose HTML, then again), the table gives each median, and
xprof's cached ``*.op_stats*.pb`` is deleted before every run (with ``use_saved_result`` off), else a
second xprof run would only read its own cache back. The ratios divide medians of the same interleaved
runs, so load from other jobs on the machine shifts both sides alike; absolute times are only as quiet as
the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling modules, also when loaded by file path
from bench_dask import dask_table, run_dask_row  # noqa: E402
from bench_floor import count_events, floor_command, floor_table  # noqa: E402

# (hosts, events per host) by row name; "NxK" rows are N hosts of K events each; "gpu" rows are GPU-shaped
# (tests/builders/gpu_capture.py), the others TPU-shaped (tests/builders/large_capture.py).
_ROWS = {"1M": (1, 1_000_000), "5M": (1, 5_000_000), "10M": (1, 10_000_000), "16x259k": (16, 259_000),
         "16x304k": (16, 304_000), "gpu1M": (1, 1_000_000), "gpu5M": (1, 5_000_000),
         "gpu16x259k": (16, 259_000), "64x100k": (64, 100_000)}
_SMOKE_ROWS = {"20k": (1, 20_000), "2x10k": (2, 10_000), "gpu20k": (1, 20_000)}
_DEFAULT_ROWS = "1M,5M,16x259k,gpu5M,gpu16x259k"

_WRAPPER = r"""
import json, resource, subprocess, sys, time
import psutil
cmd = json.loads(sys.argv[1])
t0 = time.perf_counter()
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
root = psutil.Process(proc.pid)
peak = 0
while proc.poll() is None:
    try:
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        tree = []
    total = 0
    for p in tree:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    peak = max(peak, total)
    time.sleep(0.02)
err = proc.stderr.read()
proc.wait()
wall_s = time.perf_counter() - t0
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
print(json.dumps({"rc": proc.returncode, "wall_s": wall_s, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "peak_rss_bytes": max(peak, usage.ru_maxrss * 1024), "tree_sampled_bytes": peak,
                  "last_stderr": lines[-1] if lines else ""}))
"""

_XPROF = (
    "import sys\n"
    "from xprof.convert import raw_to_tool_data as r\n"
    "data, _ = r.xspace_to_tool_data(sys.argv[1:], 'hlo_stats', {'use_saved_result': False})\n"
    "assert data, 'xprof returned no hlo_stats'\n"
)


def measure(cmd: list[str]) -> dict:
    """One run of ``cmd`` in a fresh wrapper process: wall and CPU seconds, peak RSS bytes, exit code."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(cmd)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def build_capture(root: Path, name: str, hosts: int, events: int) -> tuple[Path, list[Path]]:
    """The log dir of row ``name`` under ``root`` (built once, reused) and its host files."""
    sys.path.insert(0, str(_REPO / "tests"))
    from builders import gpu_capture, large_capture  # noqa: E402  (test fixture modules, not the package)

    logdir = root / name
    files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if len(files) != hosts:
        shutil.rmtree(logdir, ignore_errors=True)
        t0 = time.perf_counter()
        gpu = name.startswith("gpu")
        if hosts == 1:
            (gpu_capture.gpu_capture if gpu else large_capture.large_capture)(logdir, num_events=events)
        elif gpu:
            gpu_capture.multi_host_gpu_capture(logdir, hosts=hosts, events_per_host=events)
        else:
            large_capture.multi_host_capture(logdir, hosts=hosts, events_per_host=events)
        files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
        print(f"built {name}: {len(files)} file(s), {_size(files) / 1e6:.1f} MB in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    return logdir, files


def _size(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def _clear_xprof_cache(files: list[Path]) -> None:
    # xprof caches op stats next to the capture (ALL_HOSTS.op_stats_v2.pb); a cached run measures nothing.
    for folder in {f.parent for f in files}:
        for cached in folder.glob("*.op_stats*.pb"):
            cached.unlink()


def commands(logdir: Path, files: list[Path], out: Path) -> dict[str, list[str]]:
    # python -m, not a `diagnose` on PATH: the code measured is the one importable here (PYTHONPATH).
    ours = [sys.executable, "-m", "xladiag.cli", str(logdir), "--quiet"]
    return {
        "xprof": [sys.executable, "-c", _XPROF, *map(str, files)],
        "floor": floor_command(files),
        "json": ours + ["--format", "json", "-o", str(out / "report.json")],
        "html": ours + ["--format", "html", "-o", str(out / "report.html")],
    }


def run_row(logdir: Path, files: list[Path], work: Path, repeat: int) -> dict:
    """Interleaved runs of the three commands on one capture; per command its runs and medians."""
    cmds = commands(logdir, files, work)
    runs: dict[str, list[dict]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for key, cmd in cmds.items():
            _clear_xprof_cache(files)
            runs[key].append(measure(cmd))
            print(f"  {key}: {runs[key][-1]['wall_s']:.2f} s, {runs[key][-1]['peak_rss_bytes'] / 2**20:.0f} MB",
                  file=sys.stderr)
    _clear_xprof_cache(files)
    out = {}
    for key, rs in runs.items():
        failed = [r for r in rs if r["rc"] != 0]
        if failed:
            out[key] = {"error": failed[-1]["last_stderr"] or f"exit {failed[-1]['rc']}", "runs": rs}
            continue
        out[key] = {"wall_s": statistics.median(r["wall_s"] for r in rs),
                    "peak_rss_bytes": statistics.median(r["peak_rss_bytes"] for r in rs),
                    "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                    "cpu_per_wall": statistics.median(r["cpu_s"] / r["wall_s"] for r in rs), "runs": rs}
    return out


def machine() -> str:
    """One line naming the machine the numbers come from."""
    model = ""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import psutil

        ram = f", {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    except ImportError:
        ram = ""
    try:
        from importlib.metadata import version

        xprof = f", xprof {version('xprof')}"
    except Exception:  # noqa: BLE001 (not installed: the xprof column says so)
        xprof = ""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cores} cores ({model or platform.machine()}){ram}, Python {platform.python_version()}{xprof}; "
            f"load average {load:.1f} at the end")


def _cell(r: dict) -> str:
    if "error" in r:
        return f"failed: {r['error'][:60]}"
    return f"{r['wall_s']:.2f} s / {r['peak_rss_bytes'] / 2**20:.0f} MB"


def _ratio(r: dict, ref: dict) -> str:
    if "error" in r or "error" in ref:
        return "-"
    return f"{r['wall_s'] / ref['wall_s']:.2f} / {r['peak_rss_bytes'] / ref['peak_rss_bytes']:.2f}"


def render(results: list[dict], repeat: int, note: str = "", dask: dict | None = None) -> str:
    """The markdown tables (against xprof; against the parse floor; the Dask run if any) and the machine line."""
    lines = []
    if results:
        lines += ["| capture | xprof `hlo_stats` wall / RSS | `diagnose` JSON wall / RSS | `diagnose` HTML wall / RSS "
                  "| ratio JSON time / memory | ratio HTML time / memory | CPU/wall xprof, JSON, HTML |",
                  "|---|---|---|---|---|---|---|"]
        for row in results:
            x, j, h = row["xprof"], row["json"], row["html"]
            cpu = ", ".join("-" if "error" in r else f"{r['cpu_per_wall']:.2f}" for r in (x, j, h))
            lines.append(f"| {row['label']} | {_cell(x)} | {_cell(j)} | {_cell(h)} | {_ratio(j, x)} | {_ratio(h, x)} "
                         f"| {cpu} |")
        lines += ["", *floor_table(results), ""]
    if dask:
        lines += [*dask_table(dask["label"], dask), ""]
    lines += [f"Medians of {repeat} interleaved run{'s' if repeat != 1 else ''} per command, xprof's cache "
              "removed before each; RSS: peak of the summed process tree; the parse floor: upb parsing the same files "
              "in as many processes as `diagnose` (one per file, up to the cores), interpreter start included. "
              + (note.rstrip(". ") + ". " if note else "")
              + "Machine: " + machine() + "."]
    return "\n".join(lines)


def real_row(logdir: Path, work: Path, repeat: int) -> dict:
    """A row for a capture folder as it is (its host files under plugins/profile/<run>/)."""
    files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if not files:
        raise SystemExit(f"{logdir}: no plugins/profile/<run>/*.xplane.pb")
    print(f"{logdir}: {len(files)} file(s)", file=sys.stderr)
    row = run_row(logdir, files, work, repeat)
    row["label"] = f"{logdir.name} (real), {_size(files) / 1e6:.1f} MB"
    row["events"] = count_events(files)
    return row


def _label(name: str, hosts: int, events: int, files: list[Path]) -> str:
    size = f"{_size(files) / 1e6:.1f} MB"
    shape = "GPU " if name.startswith("gpu") else ""
    if hosts == 1:
        count = f"{events / 1e6:g}M" if events >= 1e6 else f"{events / 1e3:g}k"
        return f"{shape}{count} events, {size}"
    return f"{shape}{hosts} hosts × {events / 1e3:g}k events, {size}"


_README_START, _README_END = "<!-- benchmark:start -->", "<!-- benchmark:end -->"


def update_readme(readme: Path, table: str) -> None:
    """Replace the text between the benchmark markers of ``readme`` with ``table``."""
    text = readme.read_text()
    pattern = re.compile(re.escape(_README_START) + ".*?" + re.escape(_README_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{readme}: no {_README_START} ... {_README_END} section to replace")
    block = (f"{_README_START}\n<!-- generated by `python benchmarks/bench_diagnose.py --readme README.md`; "
             f"do not edit by hand -->\n{table}\n{_README_END}")
    readme.write_text(pattern.sub(lambda _: block, text))


def _args(argv: list[str] | None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captures", type=Path, help="folder to build the captures into and keep (reused if present)")
    ap.add_argument("--rows", default=None, help=f"comma-separated, of {', '.join(_ROWS)} (default {_DEFAULT_ROWS}; "
                    "with --smoke every smoke row); '' for none")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per command (medians)")
    ap.add_argument("--smoke", action="store_true", help="tiny captures, one run: checks the benchmark works")
    ap.add_argument("--dask", metavar="ROW", help="also run this many-host row through --scheduler on a Dask "
                    "LocalCluster of 2 workers: peak RSS of every process (e.g. 16x259k, 64x100k; 2x10k with --smoke)")
    ap.add_argument("--logdir", type=Path, action="append", default=[],
                    help="also a row for this capture as it is (a real one: benchmarks/record_gpu_long_capture.py); "
                    "repeatable")
    ap.add_argument("--json", type=Path, help="also write every run's numbers here")
    ap.add_argument("--readme", type=Path, help="rewrite this README's benchmark section with the table")
    ap.add_argument("--note", default="", help="a sentence printed under the table (e.g. what else ran)")
    args = ap.parse_args(argv)
    table = _SMOKE_ROWS if args.smoke else _ROWS
    rows = (",".join(_SMOKE_ROWS) if args.smoke else _DEFAULT_ROWS) if args.rows is None else args.rows
    names = [n.strip() for n in rows.split(",") if n.strip()]
    unknown = [n for n in names + ([args.dask] if args.dask else []) if n not in table]
    if unknown:
        ap.error(f"unknown rows {unknown}; choose from {', '.join(table)}")
    if args.dask and table[args.dask][0] < 2:
        ap.error(f"--dask {args.dask}: a row of several hosts")
    return args, table, names


def main(argv: list[str] | None = None) -> int:
    args, table, names = _args(argv)
    repeat = 1 if args.smoke else args.repeat
    with tempfile.TemporaryDirectory(prefix="xladiag_bench_") as tmp:
        work = Path(tmp)
        root = args.captures or work / "captures"
        results, dask = [], None
        for name in names:
            hosts, events = table[name]
            logdir, files = build_capture(root, name, hosts, events)
            print(f"{name}: {len(files)} file(s)", file=sys.stderr)
            row = run_row(logdir, files, work, repeat)
            row["label"] = _label(name, hosts, events, files)
            row["events"] = count_events(files)
            results.append(row)
        for logdir in args.logdir:
            results.append(real_row(logdir, work, repeat))
        if args.dask:
            hosts, events = table[args.dask]
            logdir, files = build_capture(root, args.dask, hosts, events)
            dask = run_dask_row(logdir, files, repeat)
            dask["label"] = _label(args.dask, hosts, events, files)
        out = render(results, repeat, args.note, dask)
        print(out)
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "repeat": repeat, "rows": results, "dask": dask},
                                            indent=2))
        if args.readme:
            update_readme(args.readme, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

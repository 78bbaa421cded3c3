"""Write the JSON (or HTML) report of every bundled sample into one folder, to diff two versions of the code.

A refactor must change no number: run this before and after, then ``diff -r BEFORE AFTER``.
Each sample runs as a user would run it (captures as they are; HLO-only fixtures with ``--chip v6e`` and
``tpu7x``; the MaxText module with ``--program jit_train_step``).

    python benchmarks/sample_reports.py /tmp/before
    python benchmarks/sample_reports.py --format html /tmp/before_html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from click.testing import CliRunner

SAMPLES = Path(__file__).resolve().parents[1] / "sample_profiles"


def cases() -> dict[str, list[str]]:
    """Report file name -> diagnose arguments, for every sample folder."""
    out: dict[str, list[str]] = {}
    for folder in sorted(p for p in SAMPLES.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        if folder.name.startswith("hlo_rules_"):
            for chip in ("v6e", "tpu7x"):
                out[f"{folder.name}.{chip}"] = ["--hlo-dir", str(folder), "--chip", chip]
        elif folder.name.startswith("hlo_"):
            out[folder.name] = ["--hlo-dir", str(folder), "--program", "jit_train_step"]
        elif (folder / "before").is_dir():
            for side in ("before", "after"):
                out[f"{folder.name}.{side}"] = [str(folder / side)]
        else:
            out[folder.name] = [str(folder)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for <sample>.<format> (created)")
    parser.add_argument("--format", default="json", choices=("json", "html", "markdown"), help="default: json")
    args = parser.parse_args()
    from xladiag.cli import main as cli_main

    args.out.mkdir(parents=True, exist_ok=True)
    runner = CliRunner()
    failed = 0
    for name, argv in cases().items():
        target = args.out / f"{name}.{'md' if args.format == 'markdown' else args.format}"
        result = runner.invoke(cli_main, [*argv, "--format", args.format, "-o", str(target), "-q", "--workers", "1"])
        if target.exists():  # the checkout's own path is not a number: several checkouts compare equal
            target.write_text(target.read_text(encoding="utf-8").replace(str(SAMPLES.parent), "<repo>"),
                              encoding="utf-8")
        status = "ok" if result.exit_code == 0 else f"exit {result.exit_code}: {result.output.strip()[:200]}"
        failed += result.exit_code != 0
        print(f"{name}: {status}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

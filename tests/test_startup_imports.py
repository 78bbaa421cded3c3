"""Start-up stays light: the report stack loads only for the format rendered, ``--help`` loads no pandas.

Each check runs in a fresh interpreter (``sys.modules`` of this test process already holds everything).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_SAMPLE = ROOT / "sample_profiles" / "cpu_jax_train_step"
_REPORT_STACK = ("jinja2", "markupsafe", "xladiag.report.html", "xladiag.report.markdown", "xladiag.report.svg")


def _modules_after(code: str) -> set[str]:
    """Top-level and xladiag module names loaded once ``code`` has run in a fresh interpreter."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _cli(args: list[str]) -> str:
    return ("import sys\nfrom xladiag.cli import main\n"
            f"try:\n    main({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n")


def _loaded(modules: set[str], names) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


@pytest.mark.slow
def test_importing_the_api_loads_no_report_stack():
    assert _loaded(_modules_after("import xladiag.api"), _REPORT_STACK) == []


@pytest.mark.slow
def test_help_loads_neither_pandas_nor_numpy_nor_the_report_stack():
    modules = _modules_after(_cli(["--help"]))
    assert "xladiag.cli" in modules  # the command did run
    assert _loaded(modules, ("pandas", "numpy", *_REPORT_STACK)) == []
    # The subcommands load when called, not for the main command's help.
    assert _loaded(modules, ("xladiag.cli_compare", "xladiag.cli_history", "xladiag.mcp_server")) == []


@pytest.mark.slow
def test_subcommands_still_dispatch_and_import_by_name():
    modules = _modules_after(_cli(["compare", "--help"]) + "from xladiag.cli import history_main, mcp_main\n")
    assert {"xladiag.cli_compare", "xladiag.cli_history", "xladiag.mcp_server"} <= modules


@pytest.mark.slow
def test_json_report_loads_no_template_engine_and_html_does(tmp_path):
    as_json = _modules_after(_cli([str(CPU_SAMPLE), "--quiet", "--format", "json", "-o", str(tmp_path / "r.json")]))
    assert (tmp_path / "r.json").stat().st_size > 1000
    assert _loaded(as_json, _REPORT_STACK) == []
    as_html = _modules_after(_cli([str(CPU_SAMPLE), "--quiet", "--format", "html", "-o", str(tmp_path / "r.html")]))
    assert {"jinja2", "xladiag.report.html", "xladiag.report.svg"} <= as_html  # so the check above can fail

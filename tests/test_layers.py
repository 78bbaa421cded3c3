"""The house rules, read from the source with ``ast``: imports point down parsers -> analyzer -> rules ->
compare -> report -> api -> cli, and rules neither parse nor touch files.

Inside the analyzer the subpackages are layers too: tables -> chips -> capture | hlo -> steps | models ->
hosts -> inputs -> scopes -> analysis (tables and working_columns: declarations). Siblings on one level (capture
and hlo; steps and models) import neither each other.

Leaf modules (units, errors, writer, version, text_safety, options and the package's ``__version__``) may be
imported from any layer and import only each other. Imports inside functions count: a lazy import is still a
dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

LAYERS = {"parsers": 0, "analyzer": 1, "rules": 2, "compare": 2.5, "report": 3, "templates": 3, "api": 4, "config": 4,
          "cli": 5, "cli_common": 5, "cli_compare": 5, "cli_history": 5, "history": 2.5, "mcp_server": 5,
          "mcp_cache": 5, "mcp_views": 5, "cli_output": 5, "__main__": 5}
# The analyzer's own levels (a module directly in analyzer/ other than these is refused: put it in a subpackage).
# working_columns declares names only (tests/test_declared_columns.py reads it) and imports nothing of the package.
ANALYZER = {"tables": 0, "working_columns": 0, "chips": 1, "capture": 2, "hlo": 2, "steps": 3, "models": 3, "hosts": 4,
            "inputs": 5, "scopes": 5.5, "analysis": 6}
LEAVES = {"units", "errors", "writer", "version", "text_safety", "options"}
# Standard-library names a rule may not use: file and directory access.
IO_MODULES = {"os", "glob", "shutil", "pathlib", "io", "tempfile", "fnmatch", "zipfile", "tarfile", "gzip"}
IO_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "listdir", "scandir", "walk",
            "glob", "rglob", "iterdir", "exists", "is_file", "is_dir", "stat", "mkdir"}
# Known violations being removed (hlofacts: memory reports and HLO facts move to the analyzer). This list
# may only shrink: an entry that no longer happens fails the test, so delete it with the fix.
ALLOWED: set[tuple[str, str]] = set()


def _package_modules() -> dict[str, Path]:
    """Dotted name inside the package ('analyzer.steps.windows', 'cli', '' for __init__) -> file."""
    out = {}
    for path in sorted(REPO.rglob("*.py")):
        rel = path.relative_to(REPO)
        top = rel.parts[0]
        if top in ("tests", "benchmarks", "sample_profiles", "build", "artifacts") or top.startswith("."):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _package_modules()


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, ast.AST]]:
    """(imported package module, node) for every import of the package in the file."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".") if name else []
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                targets = [".".join(base + ([node.module] if node.module else []))]
            else:
                targets = [node.module or ""]
            # 'from pkg import sub' names a module when pkg/sub is one.
            targets = [f"{t}.{a.name}".strip(".") if f"{t}.{a.name}".strip(".") in modules else t
                       for t in targets for a in node.names]
        else:
            continue
        for target in targets:
            if node.level if isinstance(node, ast.ImportFrom) else False:
                found.append((target, node))
            elif target == "xladiag" or target.startswith("xladiag."):
                found.append((target.removeprefix("xladiag").lstrip("."), node))
            else:
                found.append(("<stdlib>" + target, node))
    return found


def _layer(module: str) -> tuple[float, int, str] | None:
    """(layer, analyzer level, analyzer subpackage) of a package module; None for the leaves and the package root
    (which holds __version__). Outside the analyzer the level is 0 and the subpackage ''."""
    parts = module.split(".")
    if module == "" or parts[0] in LEAVES:
        return None
    assert parts[0] in LAYERS, f"{module}: a new top-level module: put it in LAYERS or LEAVES of tests/test_layers.py"
    if parts[0] != "analyzer" or len(parts) == 1:
        return LAYERS[parts[0]], 0, ""
    assert parts[1] in ANALYZER, f"{module}: a module directly in analyzer/: put it in a subpackage (ANALYZER)"
    return LAYERS["analyzer"], ANALYZER[parts[1]], parts[1]


def _points_up(here: tuple[float, int, str], there: tuple[float, int, str]) -> bool:
    """An import from `here` to `there` breaks the layering: a higher layer, or inside the analyzer a higher
    level or a sibling subpackage on the same level."""
    if there[0] != here[0]:
        return there[0] > here[0]
    return there[1] > here[1] or (there[1] == here[1] and there[2] != here[2])


def _violations(modules: dict[str, Path], root: Path) -> set[tuple[str, str]]:
    """(file relative to root, what is wrong) for every broken house rule."""
    found = set()
    for name, path in modules.items():
        rel = str(path.relative_to(root))
        here = _layer(name)
        for target, _node in _imports(name, path, modules):
            if target.startswith("<stdlib>"):
                std = target.removeprefix("<stdlib>").split(".")[0]
                if name.startswith("rules.") and name != "rules.catalog" and std in IO_MODULES:
                    found.add((rel, f"imports {std}"))
                continue
            there = _layer(target)
            if name == "":
                continue  # the package root re-exports the API lazily: it is the top, not a layer
            if here is None and there is not None:
                found.add((rel, f"leaf imports {target}"))
            elif here is not None and there is not None and _points_up(here, there):
                found.add((rel, f"imports {target} ({_named(there)}) from {_named(here)}"))
            if name.startswith("rules.") and target.split(".")[0] == "parsers":
                found.add((rel, f"imports {target}"))
        if name.startswith("rules.") and name != "rules.catalog":  # the catalogue's CLI writes docs/rules.md
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    func = node.func
                    called = (func.id if isinstance(func, ast.Name)
                              else func.attr if isinstance(func, ast.Attribute) else "")
                    if called in IO_CALLS and (called != "open" or isinstance(func, ast.Name)):
                        found.add((rel, f"calls {called}()" if isinstance(func, ast.Name) else f"calls .{called}()"))
    return found


def _named(layer: tuple[float, int, str]) -> str:
    return f"layer {layer[0]:g}" + (f", analyzer level {layer[1]} ({layer[2]})" if layer[2] else "")


def test_imports_point_down_and_rules_do_no_io():
    found = _violations(MODULES, REPO)
    new = sorted(found - ALLOWED)
    assert not new, "layering broken:\n" + "\n".join(f"{f}: {what}" for f, what in new)
    fixed = sorted(ALLOWED - found)
    assert not fixed, "fixed, so remove from ALLOWED in tests/test_layers.py:\n" + "\n".join(map(str, fixed))


def test_the_walk_sees_every_layer_and_catches_what_it_should(tmp_path):
    """The walk is not vacuous: it finds the package's modules and flags planted violations."""
    assert {"parsers.xplane", "analyzer.analysis", "rules.registry", "report.json_out", "api", "cli", "units"} \
        <= set(MODULES)
    planted = {
        "analyzer/steps/planted.py": "from ...report import json_out\nfrom ... import units, errors\n",
        "rules/planted.py": "import glob\nfrom ..parsers import xplane\nfrom .base import make_finding\n\n"
                            "def check(a):\n    return open('x').read()\n",
        "errors.py": "from .analyzer.steps import windows\n",
        "report/planted.py": "def f():\n    from ..cli import main\n    from ..rules import registry\n",
        "analyzer/capture/planted.py": ("from ..hlo import facts\nfrom ..chips import catalog\n"
                                        "from ..hosts import merge\n"),
    }
    modules = {}
    for rel, source in planted.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        modules[rel.removesuffix(".py").replace("/", ".")] = path
    modules.update({name: tmp_path / "x.py" for name in (
        "report.json_out", "parsers.xplane", "analyzer.hlo.facts", "analyzer.chips.catalog", "analyzer.hosts.merge")})
    (tmp_path / "x.py").write_text("")
    assert _violations(modules, tmp_path) == {
        ("analyzer/steps/planted.py", "imports report.json_out (layer 3) from layer 1, analyzer level 3 (steps)"),
        ("analyzer/capture/planted.py", "imports analyzer.hlo.facts (layer 1, analyzer level 2 (hlo)) from layer 1, "
                                        "analyzer level 2 (capture)"),
        ("analyzer/capture/planted.py", "imports analyzer.hosts.merge (layer 1, analyzer level 4 (hosts)) from "
                                        "layer 1, analyzer level 2 (capture)"),
        ("rules/planted.py", "imports glob"),
        ("rules/planted.py", "imports parsers.xplane"),
        ("rules/planted.py", "calls open()"),
        ("errors.py", "leaf imports analyzer.steps"),
        ("report/planted.py", "imports cli (layer 5) from layer 3"),
    }

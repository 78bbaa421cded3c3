"""Every column name the stages pass each other is declared, read from the source with ``ast``.

String subscripts (``ops["measured_s_per_step"]``, ``frame[["a", "b"]]``, the column of ``.loc[mask, "x"]`` /
``.at[i, "x"]``, the keywords of ``.assign(x=...)``) are the interface between the stages. Each such string in
rules/, report/, compare/, history/ and analyzer/ must be declared: a column of a Table in analyzer/tables.py, a
field of the JSON contracts (report/*.schema.json, generated from declarations), or a name of
analyzer/working_columns.py (``WORKING``: working tables, scratch columns, internal dict keys, grouped by owner).

Nor may code branch on whether a column exists (``"x" in frame.columns``, ``"x" in frame``, ``frame.get("x")``):
``Table.coerce`` guarantees the declared columns. ``in x.columns`` always counts (a variable column too);
elsewhere a DataFrame is recognised by its name (``FRAME_NAMES``), its ``: pd.DataFrame`` annotation or an
assignment from a frame method (``FRAME_METHODS``), and the string must be a declared name.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from conftest import REPO
from xladiag.analyzer import tables, working_columns

SCANNED = ("rules", "report", "compare", "history", "analyzer")
SCHEMAS = ("report/report.schema.json", "report/compare.schema.json", "report/history.schema.json")
# Names (variables or attributes) that hold DataFrames across the stages; a presence test on one of them is
# flagged when the string is a declared name (``"reduce" in ops`` on a set of opcodes is not).
FRAME_NAMES = {"ops", "step_ops", "events", "device_steps", "devices", "frame", "df", "ev", "es", "sp", "in_step",
               "planes", "spans", "steps_frame"}
PRESENCE = "tests a column's presence: "
# DataFrame methods that return a DataFrame: a name assigned their result holds one.
FRAME_METHODS = {"sort_values", "assign", "merge", "copy", "reset_index", "rename", "drop_duplicates", "set_index",
                 "join", "drop", "dropna", "fillna", "astype", "query", "head", "tail"}
# Presence tests still to remove, (file, the test as written) -> why it stays. This list may only shrink: an
# entry that no longer happens fails the test, so delete it with the fix.
_MERGE = "to remove after the merge (another helper is editing this file)"
_LATER = "outside rules/ and compare/: to remove in a follow-up"
ALLOWED: dict[tuple[str, str], str] = {
    ("analyzer/tables.py", "n not in frame.columns"): "Table.coerce: the check every other test relies on",
    ("analyzer/analysis.py", "'opcode' in in_step"): _MERGE,
    ("analyzer/capture/build.py", "'run_id' not in events"): _MERGE,
    ("analyzer/capture/host_steps.py", "s in es.columns"): _MERGE,
    ("analyzer/models/roofline.py", "name not in ops.columns"): _MERGE,
    ("analyzer/models/roofline.py", "'dtype' not in ops.columns"): _MERGE,
    ("analyzer/models/roofline.py", "'collective_bound_by' in ops.columns"): _MERGE,
    ("analyzer/models/roofline.py", "count_column in ops.columns"): _MERGE,
    ("analyzer/hosts/step_times.py", "'host' not in devices.columns"): _LATER,
    ("analyzer/steps/transfer_spans.py", "'done_end_ps' in async_spans"):
        "async spans carry done_end_ps only when hosts were reduced where read: two shapes, to declare as two tables",
    ("analyzer/steps/transfers.py", "'span_ps' in step_ops"): _LATER + " (tests hand it event tables without span_ps)",
    ("analyzer/steps/windows.py", "'step_num' not in frame"): _LATER + " (only annotated steps bring step_num)",
    ("analyzer/steps/windows.py", "'launch_ps' in ops"): _LATER + " (the multi-host lite capture has no launch_ps)",
    ("report/json_out.py", "c in devices.columns"): _LATER + " (Capture.devices has no declared Table yet)",
    ("report/trace_links.py", "'host' in devices"): _LATER + " (Capture.devices has no declared Table yet)",
    ("report/trace_links.py", "'plane_name' in devices"): _LATER + " (Capture.devices has no declared Table yet)",
}


def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string constants a subscript key names: one string, or a list / tuple of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _annotations(tree: ast.AST) -> set[int]:
    """ids of the nodes inside annotations: ``dict[str, "Table"]`` names a type, not a column."""
    roots = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


def _keys(node: ast.AST) -> list[ast.Constant]:
    """The strings a node uses as column / field names."""
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(node.value, ast.Attribute) and node.value.attr in ("loc", "at", "iloc", "iat"):
            return _strings(key.elts[-1]) if isinstance(key, ast.Tuple) and len(key.elts) == 2 else []
        return _strings(key)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "assign":
        return [ast.Constant(k.arg, lineno=k.value.lineno) for k in node.keywords if k.arg]
    return []


def _frames(tree: ast.AST) -> set[str]:
    """FRAME_NAMES, the names annotated as DataFrames in this module and those assigned a frame's copy
    (``o = events.sort_values(...)``, ``x = pd.DataFrame(...)``)."""
    named = set(FRAME_NAMES)
    for node in ast.walk(tree):
        target, annotation = None, None
        if isinstance(node, ast.arg):
            target, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, annotation = node.target.id, node.annotation
        if annotation is not None and "DataFrame" in ast.unparse(annotation):
            named.add(target)
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
               and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call)
               and isinstance(n.value.func, ast.Attribute)]
    grown = True
    while grown:  # a copy of a copy is a frame too
        before = len(named)
        for n in assigns:
            func = n.value.func
            if func.attr in FRAME_METHODS and _name(func.value) in named or ast.unparse(func) == "pd.DataFrame":
                named.add(n.targets[0].id)
        grown = len(named) > before
    return named


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _presence(node: ast.AST, frames: set[str], names: set[str]) -> bool:
    """Whether the node tests a DataFrame for a column."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
        where, what = node.comparators[0], node.left
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and node.args:
        where, what = node.func.value, node.args[0]
    else:
        return False
    if isinstance(where, ast.Attribute) and where.attr == "columns" and not isinstance(node, ast.Call):
        return True
    string = isinstance(what, ast.Constant) and isinstance(what.value, str)
    return string and _name(where) in frames and what.value in names


def declared() -> set[str]:
    """Every declared name."""
    columns = {c.name for t in vars(tables).values() if isinstance(t, tables.Table) for c in t.columns}
    fields: set[str] = set()

    def walk(schema):
        if isinstance(schema, dict):
            fields.update(schema.get("properties", {}))
            for value in schema.values():
                walk(value)
        elif isinstance(schema, list):
            for value in schema:
                walk(value)

    for path in SCHEMAS:
        walk(json.loads((REPO / path).read_text(encoding="utf-8")))
    working = {n.name for w in working_columns.WORKING for n in w.names}
    return columns | fields | working


def violations(files: list[Path], root: Path) -> set[tuple[str, int, str]]:
    """(file relative to root, line, what is wrong) for each undeclared name and each presence test."""
    names = declared()
    found = set()
    for path in files:
        rel = str(path.relative_to(root))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip, frames = _annotations(tree), _frames(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            for key in _keys(node):
                if key.value not in names:
                    found.add((rel, key.lineno, f"undeclared name {key.value!r}"))
            if _presence(node, frames, names):
                found.add((rel, node.lineno, PRESENCE + ast.unparse(node)))
    return found


def _scanned() -> list[Path]:
    return sorted(p for d in SCANNED for p in (REPO / d).rglob("*.py"))


def test_every_column_name_is_declared_and_none_is_tested_for():
    found = violations(_scanned(), REPO)
    presence = {(f, what.removeprefix(PRESENCE)): line for f, line, what in found if what.startswith(PRESENCE)}
    new = sorted(v for v in found if (v[0], v[2].removeprefix(PRESENCE)) not in ALLOWED)
    assert not new, "declare the name (analyzer/tables.py, analyzer/working_columns.py) or drop the presence " \
        "test:\n" + "\n".join(f"{f}:{line}: {what}" for f, line, what in new)
    fixed = sorted(set(ALLOWED) - set(presence))
    assert not fixed, "fixed, so remove from ALLOWED in tests/test_declared_columns.py:\n" + "\n".join(map(str, fixed))


def keys_used(files: list[Path]) -> set[str]:
    """Every string the files use as a subscript key or assign keyword."""
    used = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _annotations(tree)
        used |= {k.value for node in ast.walk(tree) if id(node) not in skip for k in _keys(node)}
    return used


def test_working_declarations_are_used_and_explained():
    """The working names are no dump: each is used as a key somewhere and says what it is and who builds it."""
    groups = working_columns.WORKING
    unused = sorted({n.name for w in groups for n in w.names} - keys_used(_scanned()))
    assert not unused, f"declared in analyzer/working_columns.py but used nowhere: {unused}"
    assert all(w.stage.endswith(".py") and (REPO / w.stage).exists() and w.what for w in groups)
    assert all(n.meaning for w in groups for n in w.names)


def test_the_walk_catches_what_it_should(tmp_path):
    """The walk is not vacuous: it finds every scanned package and flags planted violations."""
    scanned = {p.relative_to(REPO).parts[0] for p in _scanned()}
    assert scanned == set(SCANNED) and len(_scanned()) > 60
    planted = tmp_path / "rules" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "import pandas as pd\n"
        "from typing import Optional\n\n"
        "def f(ops, table: pd.DataFrame, d: dict) -> dict[str, 'Optional']:\n"
        "    a = ops['measured_s_per_step'] + ops['padded_s'] + ops['no_such_col']\n"
        "    b = ops[['op_name', 'no_such_list_col']]\n"
        "    c = ops.loc[ops['in_step'], 'no_such_loc_col'] + ops.at[0, ['time_s', 'no_such_at_col']]\n"
        "    e = ops.assign(no_such_kw=1, time_s=2)\n"
        "    ok = d['headline'], d.get('no_such_key'), 'reduce' in ops\n"
        "    if 'flops' in ops.columns or 'flops' in table or ops.get('flops') is None:\n"
        "        return {}\n"
        "    o = table.sort_values('flops')\n"
        "    return 'dtype' in o and x\n")
    assert violations([planted], tmp_path) == {
        ("rules/planted.py", 5, "undeclared name 'no_such_col'"),
        ("rules/planted.py", 6, "undeclared name 'no_such_list_col'"),
        ("rules/planted.py", 7, "undeclared name 'no_such_loc_col'"),
        ("rules/planted.py", 7, "undeclared name 'no_such_at_col'"),
        ("rules/planted.py", 8, "undeclared name 'no_such_kw'"),
        ("rules/planted.py", 10, "tests a column's presence: 'flops' in ops.columns"),
        ("rules/planted.py", 10, "tests a column's presence: 'flops' in table"),
        ("rules/planted.py", 10, "tests a column's presence: ops.get('flops')"),
        ("rules/planted.py", 13, "tests a column's presence: 'dtype' in o"),
    }

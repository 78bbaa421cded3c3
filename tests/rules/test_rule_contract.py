"""The rule contract: registry, catalogue, documented details keys and stable finding keys.

Every rule runs on the bundled samples (together they make all four rules fire); what it emits must match
what its docstring promises, key for key and type for type, because ``details`` is public JSON.
"""

from __future__ import annotations

import pytest

from builders import scenarios as xb
from conftest import CPU_SAMPLE, GPU_SAMPLE, HLO_PROGRAM, HLO_SAMPLE, REPO, TPU_SAMPLE, diagnosed
from xladiag.analyzer.analysis import analyze
from xladiag.report.json_out import finding_dict
from xladiag.rules import catalog
from xladiag.rules.base import Finding, Rule
from xladiag.rules.registry import RULES, run_rules

_IS_TYPE = {
    "text": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "count": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
    "s": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bytes": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
    "flops": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
    "fraction": lambda v: isinstance(v, (int, float)) and -1e-9 <= v <= 1 + 1e-9,
    "list": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


@pytest.fixture(scope="module")
def sample_findings(tmp_path_factory) -> dict[str, list[Finding]]:
    hosts = tmp_path_factory.mktemp("hosts")  # no bundled capture has several hosts: one slow host, built
    xb.multi_host_steps(4, slow_host=2, slow_ms=0.5)[0].write(hosts)
    # The samples' analyses are the session's shared ones (conftest.diagnosed): the rules only read them.
    shared = {"tpu": diagnosed(TPU_SAMPLE), "gpu": diagnosed(GPU_SAMPLE), "cpu": diagnosed(CPU_SAMPLE),
              "hlo": diagnosed(hlo_dir=HLO_SAMPLE, chip="v6e", program=HLO_PROGRAM),
              "input": diagnosed(REPO / "sample_profiles" / "jax_input_bound"),
              "attention": diagnosed(hlo_dir=REPO / "sample_profiles" / "hlo_rules_attention_naive", chip="v6e"),
              "memory": diagnosed(hlo_dir=REPO / "sample_profiles" / "hlo_rules_hbm_near_full", chip="v6e"),
              "remat": diagnosed(hlo_dir=REPO / "sample_profiles" / "hlo_rules_hbm_remat", chip="v6e"),
              "matmul": diagnosed(hlo_dir=REPO / "sample_profiles" / "hlo_rules_matmul_compute_bound", chip="tpu7x")}
    analyses = {"hosts": analyze(hosts), **{name: report.analysis for name, report in shared.items()}}
    return {name: run_rules(a) for name, a in analyses.items()}


def test_registry_holds_rules_with_unique_ids():
    ids = [r.id for r in RULES]
    assert ids == ["exposed-collective", "exposed-host-transfer", "remat-overhead", "retiling-copy",
                   "latency-bound-collective", "input-bound", "mxu-padding", "materialized-attention",
                   "sharding-intensity", "straggler-host", "hbm-headroom", "low-precision"]
    assert all(isinstance(r, Rule) for r in RULES)


def test_every_rule_fires_on_some_sample(sample_findings):
    fired = {f.rule for findings in sample_findings.values() for f in findings}
    assert fired == {r.id for r in RULES}


def test_details_match_the_docstring_key_for_key_and_type_for_type(sample_findings):
    documented = {row["id"]: {d.name: d.type for d in row["details"]} for row in catalog.rule_catalog()}
    for sample, findings in sample_findings.items():
        for f in findings:
            emitted = finding_dict(f)["details"]  # as the JSON has it: NaN -> null
            assert list(emitted) == list(documented[f.rule]), (sample, f.rule)
            for name, value in emitted.items():
                type_ = documented[f.rule][name]
                if value is None:
                    assert type_.endswith(" or null"), (sample, f.rule, name)
                else:
                    assert _IS_TYPE[type_.removesuffix(" or null")](value), (sample, f.rule, name, value)


def test_finding_keys_are_unique_and_stable(sample_findings):
    for findings in sample_findings.values():
        keys = [f.key for f in findings]
        assert len(set(keys)) == len(keys), keys
    cpu = {f.key: f for f in sample_findings["cpu"]}
    # One exposed-collective finding per transfer kind; kind is also the details' kind.
    exposed = [k for k in cpu if k.startswith("exposed-collective:")]
    assert sorted(exposed) == ["exposed-collective:all-gather:", "exposed-collective:all-reduce:",
                               "exposed-collective:reduce-scatter:"]
    assert all(cpu[k].kind == cpu[k].details["kind"] for k in exposed)
    assert [f.key for f in sample_findings["tpu"]] == ["exposed-host-transfer:host-offload:"]
    # The same capture analysed twice gives the same keys (nothing run-dependent in them).
    again = run_rules(analyze(CPU_SAMPLE))
    assert sorted(f.key for f in again) == sorted(cpu)
    rule, kind, main_op = "retiling-copy::".split(":", 2)
    assert (rule, kind, main_op) == ("retiling-copy", "", "")
    d = finding_dict(sample_findings["tpu"][0])
    assert (d["kind"], d["key"]) == ("host-offload", "exposed-host-transfer:host-offload:")


def test_docs_rules_md_is_generated_from_the_docstrings():
    rows = catalog.rule_catalog()
    assert [r["id"] for r in rows] == [r.id for r in RULES]
    for row in rows:
        assert all(len(row[k]) > 40 for k in ("what", "why", "cost", "fix")), row["id"]
        assert len(row["details"]) >= 5, row["id"]
    generated = REPO / "docs" / "rules.md"
    assert generated.read_text(encoding="utf-8") == catalog.render_markdown(rows), \
        "docs/rules.md is stale: python -m xladiag.rules.catalog --write docs/rules.md"


def test_readme_rule_table_is_the_generated_one():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert catalog.render_readme_table() in readme, \
        "README's rule table is stale: paste the output of python -m xladiag.rules.catalog --readme"


@pytest.mark.parametrize("doc,problem", [
    ("Summary.\n\nWhat it finds:\n    x\nFix:\n    y\n", "expected"),
    ("S.\nWhat it finds:\n  a\nWhy it costs time:\n  b\nHow the cost is estimated:\n  c\nFix:\n  d\nDetails:\n"
     "    cost_s: no type\n", "is not 'name"),
    ("S.\nWhat it finds:\n  a\nWhy it costs time:\n  b\nHow the cost is estimated:\n  c\nFix:\n  d\nDetails:\n"
     "    cost (seconds): unknown type\n", "is not 'name"),
    ("S.\nWhat it finds:\n  a\nWhy it costs time:\n  b\nHow the cost is estimated:\n  c\nFix:\n  d\nDetails:\n"
     "    a (s): one\n    a (s): twice\n", "repeated"),
])
def test_malformed_docstrings_are_refused(doc, problem):
    with pytest.raises(catalog.CatalogError, match=problem):
        catalog.parse_rule_docstring(doc, "broken")


def test_details_continuation_lines_join_the_key_above():
    doc = ("S.\nWhat it finds:\n  a\nWhy it costs time:\n  b\nHow the cost is estimated:\n  c\nFix:\n  d\n"
           "Details:\n    ops (list): per op: `op`,\n        `s_per_step`\n    share (fraction or null): of the step\n")
    keys = catalog.parse_rule_docstring(doc, "ok")["details"]
    assert [(k.name, k.type, k.meaning) for k in keys] == [
        ("ops", "list", "per op: `op`, `s_per_step`"), ("share", "fraction or null", "of the step")]


def test_the_adding_a_rule_example_is_a_working_rule(sample_findings, monkeypatch):
    """docs/adding_a_rule.md's rule file, run as a module of the rules package, is a rule the catalogue reads."""
    import re
    import sys
    import types

    from xladiag.rules import registry
    from xladiag.rules.base import ModuleRule

    text = (REPO / "docs" / "adding_a_rule.md").read_text(encoding="utf-8")
    source = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "RULE_ID" in b)
    module = types.ModuleType("xladiag.rules.inefficient_op")
    module.__package__ = "xladiag.rules"
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up there
    exec(compile(source, "docs/adding_a_rule.md", "exec"), module.__dict__)
    rule = ModuleRule(module)
    row = catalog.rule_catalog((rule,))[0]
    assert row["id"] == "inefficient-op" and [d.name for d in row["details"]] == ["efficiency", "predicted_s_per_step"]
    analysis = analyze(CPU_SAMPLE)
    found = registry.run_rules(analysis, (rule,))
    ops = analysis.ops
    expected = ops[ops["in_step"] & (ops["efficiency"] < 0.1) & (ops["share_of_step"] >= 0.05)]
    assert sorted(f.main_op for f in found) == sorted(expected["op_name"].astype(str)) and len(found) > 0
    assert all(f.key == f"inefficient-op::{f.main_op}" for f in found)
    # The registry really is one name per line in _RULE_MODULES.
    assert [f"{m}".replace("_", "-") for m in registry._RULE_MODULES] == [r.id for r in RULES]

"""The shipped JSON Schema: every bundled sample's report validates, and real mistakes do not."""

from __future__ import annotations

import copy
import fnmatch
import json
import sys
from functools import cache

import jsonschema
import pytest

from conftest import HLO_PROGRAM, HLO_SAMPLE, REPO, SAMPLES, diagnosed
from xladiag.api import diagnose
from xladiag.report.json_schema import SCHEMA_FILES, load_schema, schema_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
REGENERATE = "python -m xladiag.report.json_schema (after adding the field to report/json_schema.py)"


@cache
def sample_report(name: str) -> str:
    path = SAMPLES / name
    if any(path.glob("plugins/profile/*/*.xplane.pb")):
        return diagnosed(path).to_json()
    program = HLO_PROGRAM if name == HLO_SAMPLE.name else None  # that dump is cut before its ENTRY
    return diagnosed(hlo_dir=path, chip="v6e", program=program).to_json()


def validator():
    return jsonschema.Draft202012Validator(load_schema("report"))


def errors(data) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator().iter_errors(data)]


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_shipped_and_docs_schema_are_the_generated_one(name):
    text = schema_text(name)
    for path in (REPO / "report" / SCHEMA_FILES[name], REPO / "docs" / SCHEMA_FILES[name]):
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run {REGENERATE}"
    jsonschema.Draft202012Validator.check_schema(json.loads(text))


def test_schema_is_package_data():
    """CI installs the wheel: the schema must be in it, not only in the source tree."""
    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = meta["tool"]["setuptools"]["package-data"].get("xladiag.report", [])
    assert all(any(fnmatch.fnmatch(f, p) for p in patterns) for f in SCHEMA_FILES.values()), patterns
    assert "jsonschema" in " ".join(meta["project"]["optional-dependencies"]["test"])


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_sample_report_validates(name):
    data = json.loads(sample_report(name))
    assert errors(data) == [], f"{name}: the report does not match the schema; if a field was added, run {REGENERATE}"


def _mutations(data: dict):
    """(what, mutated report) pairs: each a mistake a renderer or a refactor could make."""
    finding = next(i for i, f in enumerate(data["findings"]) if f["ops"])

    def edit(fn):
        d = copy.deepcopy(data)
        fn(d)
        return d

    yield "severity missing", edit(lambda d: d["findings"][finding].pop("severity"))
    yield "severity out of vocabulary", edit(lambda d: d["findings"][finding].update(severity="critical"))
    yield "kind out of vocabulary", edit(lambda d: d["findings"][finding].update(kind="all_gather"))
    yield "renamed finding key", edit(lambda d: d["findings"][finding].update(
        est_saving_s_per_step=d["findings"][finding].pop("est_savings_s_per_step")))
    yield "saving as text", edit(lambda d: d["findings"][finding].update(est_savings_s_per_step="12 ms"))
    yield "NaN written as a string", edit(lambda d: d.update(step_s="NaN"))
    yield "mfu as a percentage", edit(lambda d: d.update(mfu=35.0))
    yield "op field dropped", edit(lambda d: d["ops"][0].pop("measured_s_per_step"))
    yield "bound_by out of vocabulary", edit(lambda d: d["ops"][0].update(bound_by="memory"))
    yield "in_step null", edit(lambda d: d["ops"][0].update(in_step=None))
    yield "finding op without a name", edit(lambda d: d["findings"][finding]["ops"][0].pop("name"))
    yield "breakdown class renamed", edit(lambda d: d["breakdown"].update(hbm=d["breakdown"].pop("memory")))
    yield "schema_version bumped", edit(lambda d: d.update(schema_version=d["schema_version"] + 1))
    yield "platform out of vocabulary", edit(lambda d: d.update(platform="TPU"))


@pytest.mark.parametrize("name", ["cpu_jax_train_step", "tpu_v6e_host_offload"])
def test_mutated_reports_fail(name):
    data = json.loads(sample_report(name))
    assert errors(data) == []
    passed = [what for what, bad in _mutations(data) if not errors(bad)]
    assert passed == [], f"the schema accepts these mistakes: {passed}"


def test_report_with_gates_validates():
    report = diagnose(SAMPLES / "cpu_jax_train_step").with_gates(fail_on="high", min_mfu=0.5,
                                                                 max_exposed_collective=0.1)
    data = json.loads(report.to_json())
    assert len(data["gates"]) == 3 and any(g["tripped"] for g in data["gates"])
    assert errors(data) == []
    data["gates"][0]["tripped"] = "yes"
    assert errors(data)


@pytest.mark.parametrize("base,new", [("cpu_jax_train_step", "cpu_jax_train_step"),
                                      ("jax_fsdp_tp_train", "cpu_jax_train_step"),
                                      ("hlo_rules_fsdp_256_tokens", "hlo_rules_fsdp_16k_tokens")])
def test_compare_json_validates_and_mistakes_fail(base, new, tmp_path):
    import xladiag

    def side(name):
        if name.startswith("hlo_"):  # a saved JSON report: compare reads those as well as captures
            path = tmp_path / f"{name}.json"
            path.write_text(sample_report(name), encoding="utf-8")
            return path
        return SAMPLES / name

    data = xladiag.compare(side(base), side(new), fail_on_regression=0.05).to_dict()
    check = jsonschema.Draft202012Validator(load_schema("compare"))
    assert [e.message for e in check.iter_errors(data)] == []
    bad = copy.deepcopy(data)
    bad["step"]["verdict"] = "regressed"
    assert list(check.iter_errors(bad))
    bad = copy.deepcopy(data)
    bad["base"].pop("per_step_s")
    assert list(check.iter_errors(bad))


def test_a_report_written_before_the_fields_added_within_its_version_still_validates():
    """compare and baselines read earlier reports of the same schema_version: fields added since are optional."""
    from xladiag.report.json_schema import ADDED_OP_FIELDS, ADDED_TOP_FIELDS

    data = json.loads(diagnosed(SAMPLES / "cpu_jax_train_step").to_json())
    assert set(ADDED_TOP_FIELDS) <= set(data) and all(set(ADDED_OP_FIELDS) <= set(op) for op in data["ops"])
    for key in ADDED_TOP_FIELDS:
        del data[key]
    for op in data["ops"]:
        for key in ADDED_OP_FIELDS:
            del op[key]
    jsonschema.validate(data, load_schema("report"))
    data.pop("findings")  # a field of the first schema-2 reports stays required
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, load_schema("report"))

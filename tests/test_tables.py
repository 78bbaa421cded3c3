"""The declared tables: every table the analysis hands on has exactly its declared columns and dtypes,
and the JSON contract's ops section is generated from the declaration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import CPU_SAMPLE, GPU_SAMPLE, HLO_PROGRAM, HLO_SAMPLE, REPO, TPU_SAMPLE
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.tables import DEVICE_STEPS, EVENTS, OPS, STEP_EVENTS, Table, TableError, json_schema_markdown
from xladiag.report.json_out import ops_records

_NUMPY = {"bool": np.bool_, "int64": np.int64, "int32": np.int32, "float64": np.float64}


def _assert_declared(frame: pd.DataFrame, table: Table):
    assert list(frame.columns) == table.names, table.name
    for c in table.columns:
        dtype = frame[c.name].dtype
        if c.dtype == "category":
            assert isinstance(dtype, pd.CategoricalDtype), (table.name, c.name, dtype)
        elif c.dtype == "text":
            assert pd.api.types.is_string_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype), (c.name, dtype)
        else:
            assert dtype == _NUMPY[c.dtype], (table.name, c.name, dtype)


@pytest.fixture(scope="module", params=["tpu", "gpu", "cpu", "hlo"])
def analysis(request):
    if request.param == "hlo":
        return analyze(hlo_dir=HLO_SAMPLE, chip="v6e", program=HLO_PROGRAM)
    return analyze({"tpu": TPU_SAMPLE, "gpu": GPU_SAMPLE, "cpu": CPU_SAMPLE}[request.param])


def test_analysis_tables_are_the_declared_ones(analysis):
    _assert_declared(analysis.ops, OPS)
    _assert_declared(analysis.step_ops, STEP_EVENTS)
    _assert_declared(analysis.device_steps, DEVICE_STEPS)
    assert len(analysis.ops) >= 8
    # Flags are real bools, so plain boolean algebra works: a done op is never also a start op.
    assert not (analysis.ops["is_async_start"] & analysis.ops["is_async_done"]).any()


def test_capture_events_are_the_declared_table(tpu_xplane):
    from xladiag.analyzer.capture.build import build_capture
    from xladiag.parsers.xplane import read_xspace

    events = build_capture([read_xspace(tpu_xplane)]).events
    _assert_declared(events, EVENTS)
    assert (events["span_ps"] >= 0).all() and (events["duration_ps"] > 0).any()


def test_json_ops_fields_come_from_the_declaration(analysis):
    records = ops_records(analysis.ops)
    assert list(records[0]) == [c.json for c in OPS.public()]
    assert all(isinstance(r["in_step"], bool) and isinstance(r["hlo_text"], str) for r in records)


def test_json_schema_doc_ops_section_is_generated():
    doc = (REPO / "docs" / "json_schema.md").read_text(encoding="utf-8")
    assert json_schema_markdown() in doc, \
        "docs/json_schema.md ops fields are stale: paste the output of python -m xladiag.analyzer.tables"


def test_coerce_checks_columns_and_gives_dtypes():
    table = Table("t", "a row", tuple(OPS.columns[:0]) + (
        OPS.column("op_id"), OPS.column("in_step"), OPS.column("flops"), OPS.column("bound_by"),
        OPS.column("op_name")))
    raw = pd.DataFrame({"op_id": [0, 1, 2], "in_step": [True, None, False], "flops": [1, None, "3"],
                        "bound_by": ["hbm", "hbm", None], "op_name": ["a", None, "c"]}, dtype=object)
    raw["flops"] = [1.0, None, 3.0]
    out = table.coerce(raw)
    assert out["in_step"].tolist() == [True, False, False] and out["in_step"].dtype == bool
    assert out["flops"].dtype == np.float64 and np.isnan(out["flops"][1])
    assert list(out["bound_by"].cat.categories) == ["hbm"] and pd.isna(out["bound_by"][2])
    assert pd.isna(out["op_name"][1]) and out["op_name"][2] == "c"
    with pytest.raises(TableError, match=r"missing columns \['op_name'\]"):
        table.coerce(raw.drop(columns="op_name"))
    with pytest.raises(TableError, match=r"undeclared columns \['extra'\]"):
        table.coerce(raw.assign(extra=1))
    with pytest.raises(TableError, match="non-bool"):
        table.coerce(raw.assign(in_step=["yes", True, False]))
    with pytest.raises((ValueError, TypeError)):  # an int column cannot hold unknowns
        table.coerce(raw.assign(op_id=[0, None, 2]))


def test_int32_keys_are_narrowed_exactly_and_a_value_beyond_is_refused():
    table = Table("keys", "one key", (STEP_EVENTS.column("step"), STEP_EVENTS.column("event")))
    out = table.coerce(pd.DataFrame({"step": np.array([0, 7, 2**31 - 1]), "event": np.array([0, 1, 2**40])}))
    assert out["step"].dtype == np.int32 and out["step"].tolist() == [0, 7, 2**31 - 1]
    assert out["event"].dtype == np.int64 and out["event"].iloc[2] == 2**40  # a pod's event rows pass int32
    with pytest.raises(TableError, match=r"step holds -1\.\.2147483648, beyond int32"):
        table.coerce(pd.DataFrame({"step": np.array([-1, 2**31]), "event": [0, 1]}))

"""Scopes (analyzer/scopes.py): time, FLOPs and bytes per framework name path, in every report format.

The recorded samples' structure is known from their scripts (sample_profiles/make_*.py): jax_fsdp_tp_train is
a 2-layer transformer (q, k, v projections ``bsd,dhk->bshk``, output projection ``bshk,hkd->bsd``, MLP
``bsd,df->bsf`` / ``bsf,fd->bsd`` with D_FF = 4 D_MODEL, unembedding ``bsd,dv->bsv`` with VOCAB = D_FF on
SEQ - 1 positions); cpu_jax_train_step runs 2 MLP blocks under ``shard_map`` inside ``jax.checkpoint``.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLES, diagnosed
from xladiag.analyzer.scopes import SCOPES, scope_of, scope_table
from xladiag.report.scopes_out import records, top_scopes
from xladiag.report.svg_icicle import icicle_chart

SUMS = ("measured_s_per_step", "predicted_s_per_step", "flops_per_step", "bytes_per_step")
TRAIN = "jit(train_step)"


@pytest.mark.parametrize("tf_op, scope", [
    # forward and backward (remat recomputation included) of one einsum: the same scope
    ("jit(train_step)/jvp(bsd,dhk->bshk)/dot_general", (TRAIN, "bsd,dhk->bshk")),
    ("jit(train_step)/transpose(jvp(jvp()))/checkpoint/bsd,dhk->bshk/dot_general", (TRAIN, "bsd,dhk->bshk")),
    ("jit(train_step)/jvp(Transformer)/decoder/layer_3/attention/dot_general",
     (TRAIN, "Transformer", "decoder", "layer_3", "attention")),
    ("jit(train_step)/transpose(jvp(Transformer))/decoder/layer_3/attention/dot_general",
     (TRAIN, "Transformer", "decoder", "layer_3", "attention")),
    ("jit(train_step)/transpose(jvp(jit(_take)))/scatter-add", (TRAIN, "jit(_take)")),  # a call keeps its name
    ("jit(f)/transpose(jvp(jvp()))/checkpoint/rematted_computation/vmap(jit(_where))/select_n",
     ("jit(f)", "jit(_where)")),
    ("jit(f)/remat/shard_map/psum", ("jit(f)", "shard_map")),
    ("jit(f)/jvp()/while/body/add", ("jit(f)", "while", "body")),
    # a fused op counts where all its sources are
    ("jit(f)/(transpose(jvp(jvp()))/checkpoint/mlp/up/reduce_sum:jvp(mlp)/up/dot_general)", ("jit(f)", "mlp", "up")),
    ("jit(f)/(transpose(jvp(mlp))/reduce_sum:jvp(attn)/dot_general:jvp()/mul)", ("jit(f)",)),
    ("jit(f)/jit(main)/add:", ("jit(f)", "jit(main)")),
    ("jit(f)/transpose(jvp(jvp()))/checkpoint/vmap()/transpose;jit(f)/transpose(jvp(jvp()))/checkpoint/vmap(a,b->c)/t",
     ("jit(f)",)),
    ("jit(f)/jvp(mlp)/up/dot_general;jit(f)/transpose(jvp(mlp))/up/add", ("jit(f)", "mlp", "up")),
    ("dot_general", ()), ("", ()), (None, ()), (float("nan"), ()),
])
def test_scope_of_strips_transformation_wrappers(tf_op, scope):
    assert scope_of(tf_op) == scope


def test_hostile_paths_end():
    deep = "jit(f)/" + "(" * 5000 + "a/x:b/y" + ")" * 5000
    assert scope_of(deep)[0] == "jit(f)"
    assert scope_of("jit(f)/" + "jvp(" * 5000 + "layer" + ")" * 5000 + "/dot") == ("jit(f)", "layer")
    assert scope_of(";".join(["jit(f)/a/x"] * 3 + ["jit(f)/a/(b/c:b/d)"])) == ("jit(f)", "a")
    assert scope_of("))/((/:;/)") is not None


def _ops(rows: list[tuple]) -> pd.DataFrame:
    """An ops table with what scope_table reads: (name, tf_op, measured, predicted, flops, bytes, count, opcode)."""
    cols = ["op_name", "tf_op", "measured_s_per_step", "predicted_s_per_step", "flops", "bytes_accessed",
            "occurrences_per_step", "opcode"]
    frame = pd.DataFrame(rows, columns=cols)
    frame["in_step"] = True
    return frame


def test_self_and_total_sums_over_a_constructed_tree():
    ops = _ops([
        ("dot.1", "jit(f)/jvp(layer)/attn/dot_general", 3.0, 1.0, 10.0, 4.0, 2.0, "dot"),
        ("dot.2", "jit(f)/transpose(jvp(layer))/attn/dot_general", 5.0, 2.0, 20.0, 8.0, 1.0, "dot"),
        ("add.1", "jit(f)/jvp(layer)/add", 1.0, 0.5, np.nan, 2.0, 1.0, "add"),
        ("mul.1", "jit(f)/jvp()/mul", 0.5, np.nan, np.nan, np.nan, 1.0, "multiply"),
        ("copy.1", None, 0.25, 0.125, 0.0, 1.0, 1.0, "copy"),
    ])
    ops.loc[len(ops)] = ["other.1", "jit(f)/layer/attn/x", 100.0, 1.0, 1.0, 1.0, 1.0, "dot", False]
    table = scope_table(ops, [("rule-a::dot.2", ["dot.2"]), ("rule-b::add.1", ["add.1", "nowhere"])])
    assert list(table.columns) == SCOPES.names
    rows = table.set_index("scope")
    assert list(table["scope"]) == ["", "jit(f)", "jit(f)/layer", "jit(f)/layer/attn"]  # depth first
    assert list(table["parent"].fillna("<root>")) == ["<root>", "", "jit(f)", "jit(f)/layer"]
    attn, layer, root = rows.loc["jit(f)/layer/attn"], rows.loc["jit(f)/layer"], rows.loc[""]
    assert (attn["ops"], attn["self_measured_s_per_step"], attn["self_flops_per_step"]) == (2, 8.0, 40.0)
    assert attn["self_bytes_per_step"] == 16.0 and attn["finding_keys"] == "rule-a::dot.2"
    assert (layer["ops"], layer["total_ops"], layer["total_measured_s_per_step"]) == (1, 3, 9.0)
    assert math.isnan(layer["self_flops_per_step"]) and layer["total_flops_per_step"] == 40.0
    assert layer["finding_keys"] == "rule-b::add.1"
    assert rows.loc["jit(f)", "self_measured_s_per_step"] == 0.5  # jvp()/mul: the program itself
    assert math.isnan(rows.loc["jit(f)", "self_predicted_s_per_step"])
    # the root: the whole step (the op without a name path in it), other programs' ops left out
    assert (root["ops"], root["total_ops"], root["total_measured_s_per_step"]) == (1, 5, 9.75)
    assert root["total_predicted_s_per_step"] == 3.625 and root["depth"] == 0 and root["name"] == "(step)"


def test_a_loop_event_spanning_its_body_is_not_counted_twice():
    ops = _ops([("while.1", "jit(f)/while", 10.0, 0.0, 0.0, 0.0, 1.0, "while"),
                ("dot.1", "jit(f)/while/body/dot_general", 6.0, 1.0, 1.0, 1.0, 3.0, "dot"),
                ("add.1", "jit(f)/while/body/add", 4.0, 1.0, 1.0, 1.0, 3.0, "add")])
    nested = scope_table(ops, busy_s=10.5).set_index("scope")
    assert nested.loc["", "total_measured_s_per_step"] == 10.0
    assert nested.loc["jit(f)", "total_ops"] == 3  # the loop op still counts, its time not
    apart = scope_table(ops, busy_s=25.0).set_index("scope")  # the sums fit the busy time: no nesting
    assert apart.loc["", "total_measured_s_per_step"] == 20.0


def _check_totals(analysis):
    """The root's totals are the sums over the step's ops; each scope's total is its self plus its children's."""
    table = analysis.scopes
    in_step = analysis.ops[analysis.ops["in_step"]]
    root = table.iloc[0]
    assert root["scope"] == "" and root["total_ops"] == len(in_step)
    count = in_step["occurrences_per_step"]
    expect = {"measured_s_per_step": in_step["measured_s_per_step"].sum(),
              "predicted_s_per_step": in_step["predicted_s_per_step"].sum(),
              "flops_per_step": (in_step["flops"] * count).sum(),
              "bytes_per_step": (in_step["bytes_accessed"] * count).sum()}
    for name, value in expect.items():
        assert root[f"total_{name}"] == pytest.approx(value, rel=1e-9), name
    kids = table.groupby("parent")
    for _, row in table.iterrows():
        below = kids.get_group(row["scope"]) if row["scope"] in kids.groups else table.iloc[:0]
        assert row["total_ops"] == row["ops"] + below["total_ops"].sum()
        for name in SUMS:
            assert row[f"total_{name}"] == pytest.approx(
                np.nansum([row[f"self_{name}"], below[f"total_{name}"].sum()]), rel=1e-9, abs=1e-15), name
    return table.set_index("scope")


def _children(table: pd.DataFrame, parent: str) -> pd.DataFrame:
    return table[table["parent"] == parent]


def test_fsdp_tp_transformer_scopes_follow_the_model():
    analysis = diagnosed(SAMPLES / "jax_fsdp_tp_train").analysis
    table = _check_totals(analysis)
    under = _children(table, TRAIN)
    einsum = {e: f"{TRAIN}/{e}" for e in ("bsd,dhk->bshk", "bshk,hkd->bsd", "bsd,df->bsf", "bsf,fd->bsd",
                                          "bsd,dv->bsv")}
    assert set(einsum.values()) <= set(under.index)
    flops = {e: table.loc[s, "total_flops_per_step"] for e, s in einsum.items()}
    # The MLP matmuls hold the most FLOPs (D x D_FF each); q, k, v together 3 D^2 = 3/4 of one; wo D^2 = 1/4.
    assert under["total_flops_per_step"].idxmax() in (einsum["bsd,df->bsf"], einsum["bsf,fd->bsd"])
    assert flops["bsd,df->bsf"] == pytest.approx(flops["bsf,fd->bsd"], rel=1e-3)
    assert flops["bsd,dhk->bshk"] / flops["bsf,fd->bsd"] == pytest.approx(0.75, rel=0.01)
    assert flops["bshk,hkd->bsd"] / flops["bsf,fd->bsd"] == pytest.approx(0.25, rel=0.01)
    # The unembedding (VOCAB = D_FF) is one layer's w_in over SEQ - 1 positions.
    assert flops["bsd,dv->bsv"] / flops["bsd,df->bsf"] == pytest.approx(0.5 * 63 / 64, rel=1e-3)
    # The projection called three times per layer has the most ops and the most time.
    assert under["total_ops"].idxmax() == einsum["bsd,dhk->bshk"]
    assert under["total_measured_s_per_step"].idxmax() == einsum["bsd,dhk->bshk"]
    # ... its forward and its backward (under transpose and checkpoint) both count there.
    ops = analysis.ops[analysis.ops["in_step"]]
    tf_ops = [t for t in ops["tf_op"] if "/".join(scope_of(t)) == einsum["bsd,dhk->bshk"]]
    assert any(t.startswith(f"{TRAIN}/jvp(") for t in tf_ops)
    assert any("transpose(" in t and "/checkpoint/" in t for t in tf_ops)


def test_cpu_train_step_scopes_put_the_mlp_blocks_on_top():
    table = _check_totals(diagnosed(SAMPLES / "cpu_jax_train_step").analysis)
    under = _children(table, TRAIN)
    assert under["total_measured_s_per_step"].idxmax() == f"{TRAIN}/shard_map"  # the 2 checkpointed MLP blocks
    assert set(_children(table, f"{TRAIN}/shard_map").index) >= {f"{TRAIN}/shard_map/bsd,df->bsf",
                                                                   f"{TRAIN}/shard_map/bsf,fd->bsd"}
    unembed = table.loc[f"{TRAIN}/bsd,dv->bsv", "total_flops_per_step"]
    w_out = table.loc[f"{TRAIN}/shard_map/bsf,fd->bsd", "total_flops_per_step"]
    assert unembed / w_out == pytest.approx(0.5 * 63 / 64, rel=1e-3)  # 2 layers' w_out vs one D x V on SEQ - 1


def test_reports_carry_the_scopes_and_the_findings_on_them():
    report = diagnosed(SAMPLES / "jax_fsdp_tp_train")
    data = report.to_dict()
    assert data["scopes"] == records(report.scopes)
    assert data["scopes"][0]["parent"] is None and data["scopes"][0]["scope"] == ""
    keyed = {k for s in data["scopes"] for k in s["finding_keys"]}
    in_step = set(report.analysis.ops.loc[report.analysis.ops["in_step"], "op_name"])
    expect = {f.key for f in report.findings if any(op.name in in_step for op in f.ops)}
    assert keyed == expect and keyed
    assert top_scopes(data["scopes"], True)[0] == (TRAIN, data["scopes"][1])
    md, text = report.to_markdown(), report.to_text()
    assert "## Where in the model" in md and "bsd,dhk-&gt;bshk" in md
    section = text[text.index("Where in the model"):]
    assert "· bsd,dhk->bshk" in section and section.index("bsd,dhk->bshk") < section.index("bsd,dv->bsv")
    html = report.to_html()
    assert html.count('<svg class="sc"') >= len(_children(report.scopes, TRAIN)) and 'id="scopes-icicle"' in html


def test_icicle_lays_children_inside_their_parent_and_escapes_names():
    scopes = [{"scope": "", "name": "(step)", "parent": None, "depth": 0, "ops": 0, "total_ops": 3,
               "total_measured_s_per_step": 4.0, "self_measured_s_per_step": None, "finding_keys": [],
               "total_predicted_s_per_step": 1.0, "total_flops_per_step": 1.0, "total_bytes_per_step": 1.0},
              ]
    for scope, parent, t in (("a", "", 3.0), ("a/<b>", "a", 2.0), ("a/c", "a", 1.0), ("d", "", 1.0)):
        scopes.append({**scopes[0], "scope": scope, "name": scope.split("/")[-1], "parent": parent,
                       "depth": scope.count("/") + 1, "total_measured_s_per_step": t})
    svg = icicle_chart(scopes, measured=True, width=400)
    spans = [(float(a), float(b)) for a, b in
             re.findall(r'data-x0="([0-9.]+)" data-x1="([0-9.]+)"', svg)]
    assert spans == [(0, 1), (0, 0.75), (0, 0.5), (0.5, 0.75), (0.75, 1)]
    assert "&lt;b&gt;" in svg and "<b>" not in svg
    rect = r'<rect width="100%" height="100%" fill="(#[0-9a-f]+)"'
    fills = re.findall(rect, svg)
    assert fills[1] != fills[0] and fills[2] != fills[1] and fills[3] != fills[1] and fills[4] != fills[0]
    chain = [{**scopes[0], "scope": "/".join(["while"] * d), "name": "while", "parent": "/".join(["while"] * (d - 1)),
              "depth": d} for d in range(1, 4)]
    fills = re.findall(rect, icicle_chart(scopes[:1] + chain, measured=True))
    assert len(fills) == 4 and all(a != b for a, b in zip(fills, fills[1:]))  # one name down a chain: still told apart
    assert icicle_chart(scopes[:1], measured=True) == ""  # nothing below the root: no chart


def test_json_schema_doc_scopes_section_is_generated():
    from conftest import REPO
    from xladiag.analyzer.scopes import scopes_doc_markdown

    doc = (REPO / "docs" / "json_schema.md").read_text(encoding="utf-8")
    assert scopes_doc_markdown() in doc, "docs/json_schema.md scopes fields: python -m xladiag.analyzer.scopes"


def test_listed_scopes_fold_chains_and_leave_small_ones_out():
    def scope(path, t, ops):
        parts = path.split("/") if path else []
        return {"scope": path, "name": parts[-1] if parts else "(step)", "parent": "/".join(parts[:-1]) if parts
                else None, "depth": len(parts), "ops": ops, "total_measured_s_per_step": t}
    scopes = [scope("", 100.0, 0), scope("jit(f)", 99.0, 1), scope("jit(f)/while", 90.0, 0),
              scope("jit(f)/while/body", 90.0, 3), scope("jit(f)/while/body/cell", 50.0, 2),
              scope("jit(f)/tiny", 0.5, 1), scope("jit(g)", 1.0, 0), scope("jit(g)/x", 1.0, 2)]
    shown = [(name, s["scope"]) for name, s in top_scopes(scopes, True)]
    assert shown == [("jit(f)", "jit(f)"), ("· while/body", "jit(f)/while/body"),
                     ("· · cell", "jit(f)/while/body/cell"), ("jit(g)/x", "jit(g)/x")]
    assert len(top_scopes(scopes, True, n_rows=2)) == 2 and top_scopes(scopes[:1], True) == []


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not found on PATH")
def test_a_click_zooms_the_icicle_in_a_browser(tmp_path):
    """The report's script, run by Chromium: a click on a scope spreads it over the width, hides its siblings
    and keeps its ancestors whole; a click on the root zooms back out."""
    from importlib import resources

    scopes = [{"scope": "", "name": "(step)", "parent": None, "depth": 0, "ops": 0, "total_ops": 3,
               "total_measured_s_per_step": 4.0, "self_measured_s_per_step": None, "finding_keys": [],
               "total_predicted_s_per_step": 1.0, "total_flops_per_step": 1.0, "total_bytes_per_step": 1.0}]
    for scope, parent, t in (("a", "", 3.0), ("a/b", "a", 2.0), ("a/c", "a", 1.0), ("d", "", 1.0)):
        scopes.append({**scopes[0], "scope": scope, "name": scope.split("/")[-1], "parent": parent,
                       "depth": scope.count("/") + 1, "total_measured_s_per_step": t})
    script = resources.files("xladiag.templates").joinpath("report.js").read_text(encoding="utf-8")
    clicks = {"b": "c[2].dispatchEvent(new MouseEvent('click'));",
              "out": "c[2].dispatchEvent(new MouseEvent('click')); c[0].dispatchEvent(new MouseEvent('click'));"}
    for name, click in clicks.items():
        page = tmp_path / f"{name}.html"
        page.write_text(f"<!doctype html><body>{icicle_chart(scopes, measured=True, width=400)}<script>{script}"
                        f"</script><script>var c = document.querySelectorAll('#scopes-icicle svg.sc'); {click}"
                        "</script></body>", encoding="utf-8")
        dom = subprocess.run([shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu",
                              f"--user-data-dir={tmp_path / name}", "--dump-dom", page.as_uri()],
                             capture_output=True, text=True, timeout=90).stdout
        cells = re.findall(r'<svg class="sc" x="([0-9.]+)" y="[0-9]+" width="([0-9.]+)"[^>]*?(display: none)?;?"?>',
                           dom)
        assert len(cells) == 5, dom[-2000:]
        if name == "b":  # root, a (ancestors) and b span the width; c and d are hidden
            assert [(float(x), float(w), bool(h)) for x, w, h in cells] == [
                (0, 400, False), (0, 400, False), (0, 400, False), (200, 100, True), (300, 100, True)]
        else:
            assert [(float(x), float(w), bool(h)) for x, w, h in cells] == [
                (0, 400, False), (0, 300, False), (0, 200, False), (200, 100, False), (300, 100, False)]


def test_markup_and_controls_in_a_name_path_stay_text():
    import dataclasses

    from xladiag.report.model import Report

    report = diagnosed(SAMPLES / "cpu_jax_train_step")
    ops = report.analysis.ops.copy()
    top = ops["measured_s_per_step"].idxmax()
    ops["tf_op"] = ops["tf_op"].astype(object)
    ops.at[top, "tf_op"] = "jit(f)/<img src=x onerror=alert(1)>/\x1b[31mred/dot_general"
    evil = Report(analysis=dataclasses.replace(report.analysis, ops=ops), findings=(), headline="h")
    html, md, text = evil.to_html(), evil.to_markdown(), evil.to_text()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html.split('id="scopes-icicle"')[1]
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;" in md.split("## Where in the model")[1]
    assert "\x1b" not in text and "<img src=x onerror=alert(1)>" in text.split("Where in the model")[1]


def test_no_ops_leaves_the_root_alone_and_nothing_to_draw():
    from xladiag.analyzer.tables import OPS

    table = scope_table(OPS.empty())
    assert list(table["scope"]) == [""] and table.loc[0, "total_ops"] == 0
    assert math.isnan(table.loc[0, "total_measured_s_per_step"])
    assert top_scopes(records(table), True) == [] and icicle_chart(records(table), measured=True) == ""

"""A program no rule was tuned on: sample_profiles/jax_scan_rnn (make_jax_scan_rnn.py), a GSPMD-sharded GRU
whose time steps run in ``lax.scan`` while loops on 8 host devices.

On XLA:CPU a while op's event holds its body's op events; the step breakdown used to count both, so the
loop took its collectives' time into "other" and scaled every class down (collective 69 % of what the
collective ops measured in the first recording). These pin the breakdown to the op times it is made of.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

import xladiag
from conftest import SAMPLES, diagnosed

RNN = SAMPLES / "jax_scan_rnn"


@cache
def report():
    return diagnosed(RNN)


def test_the_sample_is_a_sharded_scan():
    answers = json.loads((RNN / "known_answers.json").read_text())
    assert answers["ops_in_hlo"]["while"] == 2 and answers["n_devices"] == 8
    d = report().to_dict()
    loops = [o for o in d["ops"] if o["opcode"] == "while"]
    assert len(loops) == 2 and all(o["measured_s_per_step"] > 0 for o in loops)
    # The collectives of the loop bodies run once per time step (hoisted ops keep their /while/body/ name).
    in_loop = [o for o in d["ops"] if "/while/body/" in (o["tf_op"] or "") and o["collective_kind"]]
    assert len(in_loop) >= 8
    assert all(o["occurrences_per_step"] == pytest.approx(answers["shapes"]["seq"]) for o in in_loop)


def test_breakdown_counts_loop_bodies_once():
    d = report().to_dict()
    ops = [o for o in d["ops"] if o["in_step"] and o["opcode"] != "while"]
    by_class = {}
    for o in ops:
        by_class[o["time_class"]] = by_class.get(o["time_class"], 0.0) + (o["measured_s_per_step"] or 0.0)
    b = d["breakdown"]
    assert b["collective"] == pytest.approx(by_class["collective"], rel=1e-9)
    assert b["memory"] == pytest.approx(by_class["memory"], rel=1e-9)
    assert b["other"] < 0.01 * d["step_s"]  # the loops' own time is not an "other" op any more
    busy = sum(v for k, v in b.items() if k != "idle")
    assert busy == pytest.approx(d["steps"]["busy_s"], rel=0.02)
    (lb,) = [f for f in d["findings"] if f["rule"] == "latency-bound-collective"]
    assert lb["time_s_per_step"] == pytest.approx(b["collective"], rel=0.01)  # every collective here is small


def test_every_format_renders_and_compare_against_itself_is_unchanged():
    r = report()
    assert r.to_markdown().count("latency-bound") >= 1 and "<html" in r.to_html().lower()
    c = xladiag.compare(RNN, RNN).to_dict()
    assert c["step"]["verdict"] == "unchanged" and c["step"]["delta_s"] == 0
    assert {f["status"] for f in c["findings"]} == {"unchanged"}
    assert c["ops_summary"]["counts"]["unchanged"] == len([o for o in r.to_dict()["ops"] if o["in_step"]])

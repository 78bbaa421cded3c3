"""The render's fast paths give what the slower code they replace gave: the JSON writer (report/json_text.py) and
the column-wise op records (report/ops_json.py) byte for byte, the control-character and CI-command guards, and
the timeline's choice of events."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from xladiag.report import json_text
from xladiag.report.json_out import clean
from xladiag.report.ops_json import column_values
from xladiag.text_safety import visible_controls


def _std(data) -> str:
    return json.dumps(data, indent=2, allow_nan=False, ensure_ascii=False)


CASES = [
    {},
    [],
    {"a": [], "b": {}, "c": [[], {}], "d": [1, 2.5, None, True, False, "x"]},
    {"ops": [{"name": "fusion.1", "flops": 1e300, "n": -3, "t": 0.1 + 0.2, "kernels": ["k", None]},
             {"name": "é\u2028\"\\\n\t", "flops": None, "n": 2**70, "t": -0.0}]},
    [[1, [2, [3, {"deep": [4.0]}]]]],
    "plain",
    3.25,
    None,
]


@pytest.mark.parametrize("data", CASES)
@pytest.mark.parametrize("indent", [1, 2, 4])
def test_same_text_as_json_dumps(data, indent):
    assert json_text.dumps(data, indent) == json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=False)


@pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": [1.0, math.inf]}, [{"y": -math.inf}]])
def test_nan_refused_like_json(bad):
    with pytest.raises(ValueError):
        json_text.dumps(bad)
    with pytest.raises(ValueError):
        _std(bad)


def test_data_json_converts_goes_through_json():
    """Keys that are not strings and float/int subclasses: json.dumps' own conversion, not an error."""
    for data in ({1: "a", "b": [np.float64(2.5)]}, {"k": {2.5: True}}, [True, 1, np.float64(0.5)]):
        assert json_text.dumps(data) == _std(data)
    with pytest.raises(TypeError):  # what json cannot write, json refuses
        json_text.dumps({"x": np.float32(0.5)})


def test_column_values_match_cell_by_cell_clean():
    frame = pd.DataFrame({
        "f": [1.5, np.nan, np.inf, -0.0],
        "i": np.array([1, -2, 3, 2**40], dtype=np.int64),
        "b": [True, False, True, False],
        "o": ["a", None, np.nan, 3],
        "c": pd.Categorical(["x", None, "y", "x"]),
        "n": pd.array([1, None, 3, 4], dtype="Int64"),
        "u": np.array([1, 2, 3, 4], dtype=np.uint8),
        "s": pd.Series(["a", None, "", "b"], dtype="str"),
        "B": pd.array([True, None, False, True], dtype="boolean"),
    })
    for col in frame:
        expected = [clean(v) for row in frame[[col]].itertuples(index=False, name=None) for v in row]
        got = column_values(frame[col], clean)
        assert got == expected, col
        assert [type(v) for v in got] == [type(v) for v in expected], col


def test_visible_controls_keep_same_as_lookahead():
    import re

    text = "".join(map(chr, range(0x2100)))
    controls = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
    for keep in ("", "\n\t", "\x1b"):
        kept = "".join(re.escape(c) for c in keep)
        old = re.compile(f"(?![{kept}])[{controls}]" if kept else f"[{controls}]")
        assert visible_controls(text, keep) == old.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def test_ci_inert_same_as_one_regex():
    import re

    from xladiag.text_safety import ci_inert

    old = re.compile(r"##\[|^([ \t]*):(?=:)", re.MULTILINE)
    for text in ("", "plain", "##[error]x", "a ##[ b\n  ::warning::x\n:: \n\t::c ##[##[", ":::\n##[::", "x::y\n::"):
        expected = old.sub(lambda m: "#\u200b#[" if m.group(1) is None else f"{m.group(1)}:\u200b", text)
        assert ci_inert(text) == expected


def test_device_step_lookup_matches_isin():
    from xladiag.analyzer.steps.occurrences import in_device_steps as _in_device_steps

    rng = np.random.default_rng(5)
    so = pd.DataFrame({"device": rng.integers(0, 6, 5000), "step": rng.integers(0, 300, 5000)})
    chosen = pd.DataFrame({"device": [0, 3, 5, 5], "step": [7, 299, 0, 150]})
    width = 300
    expected = np.isin(so["device"] * width + so["step"], chosen["device"] * width + chosen["step"])
    assert np.array_equal(_in_device_steps(so, chosen), expected)
    sparse = so.assign(step=so["step"] * 10**9)  # keys too spread for a table: np.isin, same answer
    chosen_sparse = chosen.assign(step=chosen["step"] * 10**9)
    width = 299 * 10**9 + 1
    wanted = chosen_sparse["device"] * width + chosen_sparse["step"]
    expected = np.isin(sparse["device"] * width + sparse["step"], wanted)
    assert np.array_equal(_in_device_steps(sparse, chosen_sparse), expected)
    one_each = pd.DataFrame({"device": [0, 2, 5], "step": [7, 0, 150]})  # the representative steps: the gather
    expected = np.isin(so["device"] * 300 + so["step"], one_each["device"] * 300 + one_each["step"])
    assert expected.any() and np.array_equal(_in_device_steps(so.astype(np.int32), one_each), expected)


@pytest.mark.parametrize("batch", [1, 3, 7, 1 << 16])
def test_pieces_are_the_rendered_text_whatever_the_cuts(monkeypatch, batch):
    from xladiag.report import render as render_mod

    # Guarded things astride every cut: '##[' split, '::' at a line start split from its line break, controls.
    text = ("<p>##[error]</p>\n  ::warning::x\n\u202eabc\x07\n::\n##" + "[" + "x" * 40 + "\n\t::c ##[##[\n:") * 3
    cuts = [text[i:i + 5] for i in range(0, len(text), 5)] + ["", ":", ":\n", "##", "[", "tail"]
    whole = "".join(cuts)
    formats = {"page": render_mod.Format(lambda report: whole, "html", "a page", pieces=lambda report: iter(cuts)),
               "data": render_mod.Format(lambda report: whole, "json", "data", pieces=lambda report: iter(cuts))}
    monkeypatch.setattr(render_mod, "_BATCH", batch)
    for fmt in formats:
        pieces = list(render_mod.render_pieces(None, fmt, formats))
        assert "".join(pieces) == render_mod.render(None, fmt, formats), (fmt, batch)
        assert batch > len(whole) or len(pieces) > 1  # written as it comes, not whole

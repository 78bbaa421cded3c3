"""Every flag, MaxText key and JAX API a fix names is a verified lever, and the advice fits the chip.

Fix texts are collected from every rule over every bundled sample (captures as recorded; HLO-only dumps
once per chip family: NVIDIA, AMD, TPU v5e / v6e / TPU7x) and over the synthetic capture scenarios, plus the
rules' documented Fix sections.
"""

from __future__ import annotations

import re

import pytest

from builders import scenarios as xb
from conftest import HLO_PROGRAM, HLO_SAMPLE, SAMPLES, diagnosed
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.chips.catalog import load_catalog
from xladiag.rules import catalog, levers
from xladiag.rules.collective_levers import gpu_overlap, tpu_overlap
from xladiag.rules.registry import run_rules

CHIPS = ("a100", "mi300x", "v5e", "v6e", "tpu7x")
SCENARIOS = (xb.exposed_all_gather, xb.hidden_all_gather, xb.tiny_all_gathers, xb.remat_fusions,
             xb.layout_copies, xb.host_offload_exposed)

FLAG = re.compile(r"-*\b(xla_[a-z0-9_]+)")
JAX_API = re.compile(r"\bjax(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
UPPER_SNAKE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
KEYWORD = re.compile(r"\b([a-z][a-z0-9_]*)=")
CONTINUATION_ON = re.compile(r"xla_tpu_enable_async_collective_fusion[a-z_]*=true")


def _has_capture(sample) -> bool:
    return any(sample.glob("plugins/profile/*/*.xplane.pb"))


@pytest.fixture(scope="module")
def fixes(tmp_path_factory) -> dict[tuple[str, str], list[str]]:
    """(source, chip) -> fix texts of every finding there."""
    out: dict[tuple[str, str], list[str]] = {}
    folders = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    # A before/after pair is two captures (each side's own fixes), not one dump of two programs.
    sides = [side for p in folders for side in (p / "before", p / "after") if side.is_dir()]
    for sample in [p for p in folders if not (p / "before").is_dir()] + sides:
        name = sample.name if sample.parent == SAMPLES else f"{sample.parent.name}/{sample.name}"
        if _has_capture(sample):
            out[(name, "capture")] = [f.fix for f in run_rules(diagnosed(sample).analysis)]
        elif any(sample.rglob("*.txt")):
            for chip in CHIPS:
                out[(sample.name, chip)] = [f.fix for f in run_rules(diagnosed(
                    hlo_dir=sample, chip=chip, program=HLO_PROGRAM if sample == HLO_SAMPLE else None).analysis)]
    for scenario in SCENARIOS:
        path = tmp_path_factory.mktemp(scenario.__name__)
        builder, _ = scenario()
        builder.write(path)
        out[(scenario.__name__, "scenario")] = [f.fix for f in run_rules(analyze(path))]
    out[("docstrings", "all")] = [rule["fix"] for rule in catalog.rule_catalog()]
    return out


def _names(text: str) -> set[str]:
    apis = set(JAX_API.findall(text))
    rest = JAX_API.sub(" ", FLAG.sub(" ", text))
    return ({m for m in FLAG.findall(text)} | apis | set(SNAKE.findall(rest)) | set(UPPER_SNAKE.findall(rest))
            | set(KEYWORD.findall(rest)))


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
def test_every_name_in_every_fix_is_a_verified_lever(fixes):
    assert sum(len(v) for v in fixes.values()) >= 20  # the collection itself ran
    unknown = {(src, n) for src, texts in fixes.items() for t in texts for n in _names(t) if n not in levers.LEVERS}
    assert not unknown, sorted(unknown)


def test_the_extractor_sees_the_names_it_must_check():
    text = ("LIBTPU_INIT_ARGS: --xla_tpu_made_up=true; jax.checkpoint_policies.not_real(...); "
            "MaxText remat_policy='custom' with made_up_key set, policy=x")
    names = _names(text)
    assert {"LIBTPU_INIT_ARGS", "xla_tpu_made_up", "jax.checkpoint_policies.not_real", "remat_policy",
            "made_up_key", "policy"} <= names
    assert "checkpoint_policies" not in names and "not_real" not in names  # part of the dotted API


def test_each_lever_says_where_it_was_checked_and_where_it_applies():
    for lv in levers.LEVERS.values():
        assert lv.kind in ("xla_flag", "libtpu_flag", "env", "maxtext", "jax", "torch_xla", "te", "tf"), lv
        assert ("/" in lv.source) and lv.applies_to and lv.meaning, lv
        if lv.kind in levers.FLAG_KINDS:
            assert lv.name.startswith("xla_"), lv


def test_flag_and_name_refuse_what_is_not_verified():
    assert levers.flag("xla_tpu_scoped_vmem_limit_kib", 98304) == "--xla_tpu_scoped_vmem_limit_kib=98304"
    assert levers.flag("xla_gpu_enable_latency_hiding_scheduler", True) == \
        "--xla_gpu_enable_latency_hiding_scheduler=true"
    with pytest.raises(KeyError):
        levers.flag("xla_tpu_enable_async_reduce_scatter_fusion", True)
    with pytest.raises(KeyError):
        levers.flag("remat_policy", "full")  # a MaxText key, not a flag
    with pytest.raises(KeyError):
        levers.name("save_dot_except_everything")


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
def test_continuation_fusion_and_sparse_core_offload_are_never_printed_together(fixes):
    both = [(src, t) for src, texts in fixes.items() for t in texts
            if "sparse_core_collective_offload" in t and CONTINUATION_ON.search(t)]
    assert not both, both


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
@pytest.mark.parametrize("chip", ["a100", "mi300x"])
def test_gpu_chips_get_gpu_flags_and_no_tpu_numbers(fixes, chip):
    texts = fixes[(HLO_SAMPLE.name, chip)]
    assert any("--xla_gpu_enable_latency_hiding_scheduler=true" in t for t in texts)
    joined = " ".join(texts)
    for tpu_only in ("LIBTPU_INIT_ARGS", "xla_tpu_", "v6e", "TPU7x", "MXU", "SparseCore"):
        assert tpu_only not in joined, tpu_only
    vendor = {"a100": "NVIDIA", "mi300x": "AMD"}[chip]
    assert f"On {vendor} GPUs" in joined


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
@pytest.mark.parametrize("chip, mxu", [("v5e", 128), ("v6e", 256)])
def test_v5e_and_v6e_get_continuation_fusion_and_their_own_mxu(fixes, chip, mxu):
    joined = " ".join(fixes[(HLO_SAMPLE.name, chip)])
    assert "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true" in joined
    assert "sparse_core_collective_offload" not in joined and "xla_gpu_" not in joined
    assert f"pad dimensions to multiples of {mxu} " in joined


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
def test_tpu7x_keeps_sparse_core_offload_with_its_fusion_off(fixes):
    joined = " ".join(fixes[(HLO_SAMPLE.name, "tpu7x")])
    assert "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true" in joined
    assert "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=false" in joined
    assert not CONTINUATION_ON.search(joined) and "xla_gpu_" not in joined


# What each MaxText preset saves (src/MaxText/layers/decoders.py, save_only_these_names arguments; `full`
# saves nothing; `minimal` saves every dot without batch dimensions, a superset of the named projections).
_SAVED = {"full": set(),
          "save_qkv_proj": {"query_proj", "key_proj", "value_proj", "qkv_proj"},
          "save_dot_except_mlp": {"query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj"},
          "save_dot_with_context_except_mlp": {"query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj",
                                               "context"},
          "minimal": {"query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj", "context", "mlpwi", "mlpwo"}}


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
def test_the_remat_ladder_is_printed_from_least_kept_to_most(fixes):
    ladders = [m.group(1) for texts in fixes.values() for t in texts
               for m in [re.search(r"remat_policy ((?:\w+ -> )+\w+)", t)] if m]
    assert ladders
    for ladder in ladders:
        steps = ladder.split(" -> ")
        assert steps[0] == "full" and len(steps) >= 4, ladder
        for lighter, heavier in zip(steps, steps[1:]):
            assert _SAVED[lighter] < _SAVED[heavier], (lighter, heavier)


@pytest.mark.parametrize("kind", ["all-gather", "reduce-scatter", "all-reduce"])
def test_each_tpu_chip_gets_one_overlap_set_per_kind_with_the_reduce_scatter_fuse_flag(kind):
    catalog_ = load_catalog()
    snake = kind.replace("-", "_")
    for key in ("v4", "v5e", "v5p", "v6e"):
        text = tpu_overlap(kind, catalog_[key])
        assert f"--xla_tpu_enable_async_collective_fusion_fuse_{snake}=true" in text, (key, text)
        assert "sparse_core_collective_offload" not in text and catalog_[key].name in text
    text = tpu_overlap(kind, catalog_["tpu7x"])
    assert f"--xla_tpu_enable_sparse_core_collective_offload_{snake}=true" in text
    assert f"--xla_tpu_enable_async_collective_fusion_fuse_{snake}=false" in text and not CONTINUATION_ON.search(text)


def test_all_to_all_and_permute_overlap_on_any_tpu_and_gpus_by_vendor():
    catalog_ = load_catalog()
    assert "--xla_tpu_enable_async_all_to_all=true" in tpu_overlap("all-to-all", catalog_["tpu7x"])
    assert "--xla_enable_async_collective_permute=true" in tpu_overlap("collective-permute", catalog_["v5e"])
    assert gpu_overlap("reduce-scatter", catalog_["h100"]).startswith("On NVIDIA GPUs")
    assert "--xla_gpu_enable_pipelined_reduce_scatter=true" in gpu_overlap("reduce-scatter", catalog_["mi300x"])
    assert "ROCm" in gpu_overlap("all-to-all", catalog_["mi300x"])


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
@pytest.mark.parametrize("chip, kib", [("v6e", 98304), ("v5e", 98304), ("tpu7x", 65536), ("v4", 16384)])
def test_scoped_vmem_by_chip_never_exceeds_its_vmem_and_reaches_the_attention_fix(fixes, chip, kib):
    spec = load_catalog()[chip]
    assert f"--xla_tpu_scoped_vmem_limit_kib={kib} " in levers.scoped_vmem(spec)
    assert kib * 1024 <= spec.vmem_bytes
    if chip in CHIPS:  # the naive-attention fixture's flash-kernel fix carries it on TPUs
        joined = " ".join(fixes[("hlo_rules_attention_naive", chip)])
        assert f"--xla_tpu_scoped_vmem_limit_kib={kib} " in joined


@pytest.mark.slow  # the fixes fixture diagnoses every sample on every chip
@pytest.mark.parametrize("chip", ["a100", "mi300x"])
def test_gpus_get_no_scoped_vmem(fixes, chip):
    assert levers.scoped_vmem(load_catalog()[chip]) == ""
    assert "scoped_vmem" not in " ".join(fixes[("hlo_rules_attention_naive", chip)])

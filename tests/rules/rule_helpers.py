"""What the per-rule tests share: analysing a scenario, picking one finding, the v6e ring arithmetic,
seconds per device-step straight from the events, and the real samples analysed once per module.

Expected numbers come from what a scenario injected and the chip's published figures, never from a
rule's own output.
"""

from __future__ import annotations

import pytest

from conftest import CPU_SAMPLE, GPU_SAMPLE, TPU_SAMPLE
from xladiag.analyzer.analysis import analyze

REL = 0.05  # the tolerance: numbers within 5 %
V6E_LINK_ONEWAY_B_PER_S = 9.0e10  # TPU v6e ICI, one way per link (hardware.md)
V6E_HOP_LATENCY_S = 1e-6


def analyze_scenario(tmp_path, scenario, *args, **kwargs):
    builder, expected = scenario(*args, **kwargs)
    builder.write(tmp_path)
    return analyze(tmp_path), expected


def only(findings, rule, **detail):
    hits = [f for f in findings if f.rule == rule and all(f.details.get(k) == v for k, v in detail.items())]
    assert len(hits) == 1, [(f.rule, f.title) for f in findings]
    return hits[0]


def ring_all_gather_s(gathered_bytes: float, n: int) -> float:
    """All-gather over the 4 chips of a v6e-4, a 2x2 torus without wraparound: a chip takes the (N-1)/N V it
    lacks over its two inbound links (one per axis), in one hop per axis."""
    assert n == 4
    return max((n - 1) * gathered_bytes / n / (2 * V6E_LINK_ONEWAY_B_PER_S), 2 * V6E_HOP_LATENCY_S)


def per_device_step(analysis, name_pattern: str) -> float:
    """Seconds per device-step of the step events whose op name matches (straight from step_ops)."""
    ev = analysis.step_ops
    hits = ev[ev["op_name"].astype(str).str.match(name_pattern)]
    return float(hits["duration_ps"].sum()) / 1e12 / len(analysis.steps.after_warmup)


@pytest.fixture(scope="module")
def tpu():
    return analyze(TPU_SAMPLE)


@pytest.fixture(scope="module")
def gpu():
    return analyze(GPU_SAMPLE)


@pytest.fixture(scope="module")
def cpu():
    return analyze(CPU_SAMPLE)

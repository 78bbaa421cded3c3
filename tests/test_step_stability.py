"""Unsteady steps: a warning, and every finding's confidence low (a saving measured on them may not repeat)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from conftest import CPU_SAMPLE
from xladiag.analyzer.analysis import analyze
from xladiag.analyzer.steps.stability import step_spread, unstable_note
from xladiag.rules.registry import run_rules


def _steps(durations: list[float], devices: int = 2) -> pd.DataFrame:
    rows = [(d, s, t, t, 0.0) for s, t in enumerate(durations) for d in range(devices)]
    return pd.DataFrame(rows, columns=["device", "step", "duration_s", "busy_s", "idle_s"])


def test_spread_is_read_per_step_over_devices():
    ratio, cv, n = step_spread(_steps([0.010, 0.011, 0.010, 0.030]))
    assert n == 4 and ratio == pytest.approx(3.0) and cv > 0.5
    assert "3.00x the fastest" in unstable_note(_steps([0.010, 0.011, 0.010, 0.030]))


@pytest.mark.parametrize("durations", [[0.010, 0.0105, 0.0099, 0.0101], [0.010], []])
def test_steady_or_too_few_steps_say_nothing(durations):
    assert unstable_note(_steps(durations)) is None


def test_bundled_recordings_are_steady_and_an_unsteady_capture_lowers_every_confidence():
    analysis = analyze(CPU_SAMPLE)
    assert not analysis.unstable_steps and not any("measured steps vary" in w for w in analysis.warnings)
    steady = run_rules(analysis)
    assert any(f.confidence != "low" for f in steady)
    shaky = run_rules(dataclasses.replace(analysis, unstable_steps=True))
    assert [f.key for f in shaky] == [f.key for f in steady] and {f.confidence for f in shaky} == {"low"}

"""Paths to the real captures every test may use, and their diagnoses shared by the whole session."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_profiles"
TPU_SAMPLE = SAMPLES / "tpu_v6e_host_offload"
GPU_SAMPLE = SAMPLES / "gpu_mi300_jax_conv"
CPU_SAMPLE = SAMPLES / "cpu_jax_train_step"
HLO_SAMPLE = SAMPLES / "hlo_maxtext_llama3_8b_v6e4"
HLO_PROGRAM = "jit_train_step"  # HLO_SAMPLE is cut before its ENTRY: analysed only when named


def only_xplane(sample: Path) -> Path:
    files = sorted(sample.glob("plugins/profile/*/*.xplane.pb"))
    assert len(files) == 1, files
    return files[0]


@pytest.fixture(scope="session")
def tpu_xplane() -> Path:
    return only_xplane(TPU_SAMPLE)


@pytest.fixture(scope="session")
def gpu_xplane() -> Path:
    return only_xplane(GPU_SAMPLE)


@pytest.fixture(scope="session")
def cpu_xplane() -> Path:
    return only_xplane(CPU_SAMPLE)


@pytest.fixture(autouse=True)
def _piped(monkeypatch):
    """Every test lays text reports out as when piped: the runner's own COLUMNS (a terminal, a pytest-xdist
    worker) would change the width, and a narrow one cuts the lines tests look for."""
    monkeypatch.delenv("COLUMNS", raising=False)


# Diagnosing a recorded sample takes seconds; many tests read the same one. Each (path, options) is diagnosed
# once per session and the one result shared: a Report is frozen, and what a test changes must be a copy
# (report_data hands out a fresh JSON dict each call; an Analysis's tables are not to be written to).
@functools.cache
def _diagnosed(path, options: tuple):
    import xladiag

    return xladiag.diagnose(path, **dict(options))


def diagnosed(path=None, **options):
    """``xladiag.diagnose(path, **options)``, once per session (options left None are the defaults)."""
    return _diagnosed(path, tuple(sorted((k, v) for k, v in options.items() if v is not None)))


def report_data(path=None, **options) -> dict:
    """The JSON dict of :func:`diagnosed`: a new dict each call, the test's own to change."""
    return diagnosed(path, **options).to_dict()


@functools.cache
def _compared(base, new, options: tuple):
    import xladiag

    return xladiag.compare(base, new, **dict(options))


def compared(base, new, **options):
    """``xladiag.compare(base, new, **options)``, once per session: a shared Comparison, not to be changed."""
    return _compared(base, new, tuple(sorted((k, v) for k, v in options.items() if v is not None)))

"""Paths to the real captures every test may use."""

from __future__ import annotations

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

"""Which platform an XLA dump was compiled for, from what the dump says about itself (HLO-only mode).

Evidence, strongest first: the file name's compile target (XLA names GPU dumps
``module_0001.jit_f.sm_8.0_gpu_after_optimizations.txt``, ROCm ones ``...gfx942_gpu_after...``, CPU ones
``...cpu_after_optimizations...``), then the custom-call targets (``__cublas$gemm`` / ``__cudnn$...`` are
CUDA's, ``__hipblas`` / ``__miopen`` ROCm's, ``tpu_custom_call`` TPU's) and TPU-only backend configs
(``scoped_memory_configs``). The default chip of a GPU dump is the catalog's chip of its compute
capability (sm_8.0 -> A100 80 GB, sm_9.0 -> H100 SXM, gfx942 -> MI300X; an H100 / MI300X when it says
none); a TPU dump does not say its generation, so it is priced as a TPU v6e. Each default comes with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .catalog import Chip
from .names import normalize_name

_SM = re.compile(r"(?<![a-z0-9])sm_(\d+)\.(\d+)[a-z]?_gpu", re.IGNORECASE)
_GFX = re.compile(r"(?<![a-z0-9])gfx(\d)([0-9a-f])[0-9a-f]", re.IGNORECASE)
_CPU = re.compile(r"(?<![a-z0-9])cpu_after_optimizations", re.IGNORECASE)
_TARGETS = (  # (pattern in a custom-call target or backend config, platform, vendor)
    (re.compile(r"__nvshmem|mosaic_gpu|__cusolver|cufft"), "gpu", "nvidia"),
    (re.compile(r"__hipblas|__miopen|hipsolver|rocfft|rocblas"), "gpu", "amd"),
    # XLA's ROCm backend keeps the CUDA-named GEMM / convolution targets: a GPU, vendor not said.
    (re.compile(r"__cublas|__cudnn|__gpu\$xla\.gpu\.triton"), "gpu", "gpu"),
    (re.compile(r"tpu_custom_call|scoped_memory_configs|sparse_core|SparseCore"), "tpu", "google"),
)
DEFAULT_TPU = "v6e"
DEFAULT_GPU = {"nvidia": "h100", "amd": "mi300x", "gpu": "h100"}  # a GPU dump that names no compute capability


@dataclass(frozen=True)
class DumpPlatform:
    platform: str  # 'gpu' | 'tpu' | 'cpu'
    vendor: str  # 'nvidia' | 'amd' | 'google' | 'cpu' | 'gpu' (vendor not said)
    evidence: str  # what said so, for the warning
    compute_capability: str | None = None  # GPU: 'major.minor' (AMD: gfx9.4.2 -> '9.4', as the catalog spells it)


def dump_platform(hints: Iterable[str]) -> DumpPlatform | None:
    """The platform the dump's file names and custom-call targets / backend configs point to, or None."""
    hints = [str(h) for h in hints]
    for hint in hints:
        if (m := _SM.search(hint)):
            return DumpPlatform("gpu", "nvidia", f"file name {hint!r}", f"{int(m.group(1))}.{int(m.group(2))}")
        if (m := _GFX.search(hint)):
            return DumpPlatform("gpu", "amd", f"{hint!r}", f"{int(m.group(1))}.{int(m.group(2), 16)}")
    for pattern, platform, vendor in _TARGETS:
        found = next((h for h in hints if pattern.search(h)), None)
        if found is not None:
            return DumpPlatform(platform, vendor, f"{pattern.search(found).group(0)!r} in the HLO")
    found = next((h for h in hints if _CPU.search(h)), None)
    return DumpPlatform("cpu", "cpu", f"file name {found!r}") if found else None


def platform_of_chip(chip: Chip) -> str:
    return {"google": "tpu", "cpu": "cpu"}.get(chip.vendor, "gpu")


def default_chip(dump: DumpPlatform, catalog: Mapping[str, Chip]) -> Chip | None:
    """The catalog chip a dump of this platform is priced on without --chip: a GPU by its compute
    capability (the entry whose alias is its bare model name when several share it: 'a100', not 'a100-40'),
    a TPU as a v6e; None for a CPU dump or a compute capability the catalog lacks."""
    if dump.platform == "tpu":
        return catalog.get(DEFAULT_TPU)
    if dump.platform != "gpu":
        return None
    if dump.compute_capability is None:
        return catalog.get(DEFAULT_GPU[dump.vendor])
    same = [c for c in catalog.values() if c.compute_capability == dump.compute_capability
            and (dump.vendor == "gpu" or c.vendor == dump.vendor)]
    bare = [c for c in same if {normalize_name(h) for h in c.model_hints} & {normalize_name(a) for a in c.aliases}]
    return (bare or same or [None])[0]


def mismatch_warning(dump: DumpPlatform, chip: Chip) -> str | None:
    """A warning when ``--chip`` names another platform (or GPU vendor) than the dump was compiled for."""
    platform = platform_of_chip(chip)
    other_vendor = platform == "gpu" and dump.vendor in ("nvidia", "amd") and chip.vendor != dump.vendor
    if platform == dump.platform and not other_vendor:
        return None
    target = {"gpu": f"{ {'nvidia': 'an NVIDIA ', 'amd': 'an AMD '}.get(dump.vendor, 'a ')}GPU", "tpu": "a TPU",
              "cpu": "the CPU"}[dump.platform]
    if dump.compute_capability and dump.platform == "gpu":
        target += f" (compute capability {dump.compute_capability})"
    return (f"the dump was compiled for {target} ({dump.evidence}) but --chip names the {chip.name}: its fusions, "
            f"layouts and custom calls are that compiler's, so the predictions and any {chip.name}-specific "
            "advice may not hold; dump the program on the target platform for a faithful diagnosis")

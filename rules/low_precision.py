"""Compute-bound bf16 / f32 matmuls on a chip whose matrix units run an 8-bit type at twice the rate.

What it finds:
    In-step dots and convolutions (alone or fused) in bf16, f16 or f32 whose roofline is compute-bound, on a
    chip with a faster 8-bit peak in the chip table: FP8 on TPU7x (4614 vs 2307 TFLOP/s per chip), int8 on
    TPU v5e / v5p / v6e, FP8 on NVIDIA H100 / H200 / B200 and AMD MI300X. One finding when they take at
    least 5 % of the step. A throughput lever and an estimate: quantization changes the numerics.
Why it costs time:
    A compute-bound matmul runs at the peak of its operand type. The same MXU or tensor cores do twice the
    FLOPs per second on 8-bit operands, so a bf16 matmul that is compute-bound spends up to half its time
    on precision that training recipes (per-tensor scaling, E4M3 forward / E5M2 gradients) show it does
    not need.
How the cost is estimated:
    Cost = the compute-bound dots' time per step (measured with a trace, else their roofline). Savings, an
    upper bound = per dot, time x (1 - dtype peak / 8-bit peak) (x 1/2 for bf16); memory-bound dots are left
    out (lower precision does not speed them up at the peak ratio). Peaks from the chip table, with its
    sources; where a guide measured the end-to-end gain it is quoted beside the bound (TPU7x FP8: about
    1.3x over bf16 for dense models), since quantize / dequantize work and the rest of the step remain.
Fix:
    MaxText: `use_qwix_quantization=true` with the `quantization` recipe of the chip: `int8` on v6e and
    earlier TPUs, `fp8_full` on TPU7x, `fp8_gpu` on NVIDIA, `nanoo_fp8` on AMD (MaxText's benchmarking
    guide and configs/types.py). In other JAX code, Qwix quantizes a model's matmuls the same way. Check the
    loss curve against the bf16 run: the gain is throughput at equal quality, not free.
Details:
    precision (text): the faster type: `fp8` or `int8`
    recipe (text): the MaxText `quantization` value for this chip
    low_precision_peak_flops_per_s (flops): the chip's peak in that type, per device
    peak_source (text): where that peak comes from (chip table and its source, or a user file)
    peak_ratio (count): that peak over the bf16 peak
    compute_bound_dot_s_per_step (s): seconds per step of the compute-bound dots (the finding's cost)
    dot_count (count): those dots
    dots (list): per dot: op, dtype, flops, s_per_step, peak_ratio, savings_s_per_step (largest 50)
    measured_end_to_end_speedup (count or null): a guide's measured end-to-end speed-up for this chip and type
    end_to_end_source (text or null): where that figure comes from
    times_are (text): `measured` or `predicted`
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import (
    OpEvidence,
    Priced,
    Target,
    compose,
    float_or_none,
    format_percent,
    format_seconds,
    op_claims,
    seconds_per_step,
    times_are,
)
from .levers import IRONWOOD, name

RULE_ID = "low-precision"
PRECEDENCE = 9  # any compute-bound matmul: only the dots no finding above explains
MIN_SHARE = 0.05  # compute-bound dots under 5 % of the step: quantizing them is not worth the numerics risk
MIN_RATIO = 1.2  # an 8-bit peak that is not clearly faster than bf16 (v4 int8, v5p fp8) is no lever
HIGH_PRECISION = ("bf16", "f16", "f32")
# The guide's measured end-to-end gain, where one exists: (chip key, precision) -> (speed-up, source).
END_TO_END = {("tpu7x", "fp8"): (1.3, "TPU7x guide: FP8 about 1.3x over bf16 end to end for dense models "
                                      f"(4614 vs 2307 TFLOP/s peak); {IRONWOOD}")}


@dataclass(frozen=True)
class Numbers:
    precision: str
    recipe: str
    low_precision_peak_flops_per_s: float  # flops
    peak_source: str
    peak_ratio: float  # count
    compute_bound_dot_s_per_step: float  # s
    dot_count: int  # count
    dots: list  # per dot, slowest first (the first 50)
    measured_end_to_end_speedup: float | None  # count
    end_to_end_source: str | None
    times_are: str
    priced: Priced
    dtypes: tuple = field(metadata={"detail": False})  # the dots' types, sorted
    max_dot_ratio: float = field(metadata={"detail": False})  # the largest per-dot peak ratio
    saves_s_per_step: float = field(metadata={"detail": False})  # the upper bound, all dots together
    chip_name: str = field(metadata={"detail": False})


def check(analysis) -> list:
    return compose(RULE_ID, measure, title, evidence, fix, analysis)


def _low_precision(chip) -> tuple[str, float] | None:
    """The faster 8-bit type of the chip and its peak: FP8 first (TPU7x, GPUs), else int8 (TPU v5e/v5p/v6e).
    GPUs get FP8 only: int8 is an inference type there, not a training recipe."""
    bf16 = chip.peak_bf16_flops_per_s
    candidates = ("fp8", "int8") if chip.vendor == "google" else ("fp8",)
    for kind in candidates:
        peak = getattr(chip, f"peak_{kind}_flops_per_s")
        if peak and bf16 and peak >= MIN_RATIO * bf16:
            return kind, float(peak)
    return None


def _recipe(chip, precision: str) -> str:
    if chip.vendor == "google":
        return name("fp8_full") if precision == "fp8" else name("int8")
    return name("nanoo_fp8") if chip.vendor == "amd" else name("fp8_gpu")


def _compute_bound_dots(analysis):
    """In-step compute-bound matmuls in a high-precision type with their seconds per step (``time_s``) > 0."""
    ops = analysis.ops
    matmul = ops["is_matmul"] | ops["category"].astype(str).str.contains("convolution|dot")  # TPU: "convolution fusion"
    dots = ops[ops["in_step"] & matmul & (ops["flops"] > 0) & (ops["bound_by"] == "compute")
               & ops["dtype"].astype(str).isin(HIGH_PRECISION)].copy()
    dots["time_s"] = seconds_per_step(dots, analysis)
    return dots[dots["time_s"] > 0]


def measure(analysis) -> Numbers | None:
    chip = analysis.chip
    found = _low_precision(chip)
    if analysis.ops.empty or found is None:
        return None
    precision, lp_peak = found
    dots = _compute_bound_dots(analysis)
    step_s = analysis.step_s
    cost = float(dots["time_s"].sum())
    if dots.empty or not (step_s and step_s > 0) or cost < MIN_SHARE * step_s:
        return None
    dots["ratio"] = lp_peak / dots["dtype"].astype(str).map(chip.peak_flops_per_s).astype(float)
    dots["savings_s"] = dots["time_s"] * (1.0 - 1.0 / dots["ratio"])
    dots = dots.sort_values("time_s", ascending=False)
    savings = float(dots["savings_s"].sum())
    ratio = lp_peak / chip.peak_bf16_flops_per_s
    e2e, e2e_source = END_TO_END.get((chip.key, precision), (None, None))
    label = _label(precision)
    priced = Priced(
        time_s_per_step=cost, est_savings_s_per_step=savings, step_s=step_s,
        confidence="medium" if analysis.measured else "low",
        ops=tuple(OpEvidence(str(r.op_name), float(r.time_s), float_or_none(r.predicted_s_per_step),
                             f"{r.dtype}, {ratio:.0f}x in {label}")
                  for r in dots.head(10).itertuples()),
        claims=op_claims(dots, dots["time_s"]), benefit="throughput",
        lever=f"{label} matmuls (an upper bound from the peak ratio)")
    return Numbers(
        precision=precision, recipe=_recipe(chip, precision), low_precision_peak_flops_per_s=lp_peak,
        peak_source=chip.number_sources.get(f"peak_{precision}_flops_per_s", "chip table"), peak_ratio=ratio,
        compute_bound_dot_s_per_step=cost, dot_count=int(len(dots)),
        dots=[{"op": str(r.op_name), "dtype": str(r.dtype), "flops": float(r.flops),
               "s_per_step": float(r.time_s), "peak_ratio": float(r.ratio),
               "savings_s_per_step": float(r.savings_s)} for r in dots.head(50).itertuples()],
        measured_end_to_end_speedup=e2e, end_to_end_source=e2e_source, times_are=times_are(analysis),
        priced=priced, dtypes=tuple(sorted(set(dots["dtype"].astype(str)))), max_dot_ratio=dots["ratio"].max(),
        saves_s_per_step=savings, chip_name=chip.name)


def _label(precision: str) -> str:
    return precision.upper() if precision == "fp8" else precision


def _matmuls(count: int) -> str:
    return "matmul" if count == 1 else "matmuls"


def title(n: Numbers) -> str:
    return (f"{n.dot_count} compute-bound {_matmuls(n.dot_count)} could run up to {n.max_dot_ratio:.0f}x faster in "
            f"{_label(n.precision)}: ~{format_seconds(n.saves_s_per_step)} per step (throughput lever, an estimate)")


def evidence(n: Numbers) -> str:
    e2e = n.measured_end_to_end_speedup
    e2e_text = (f" The guide measured about {e2e:.1f}x end to end (a {format_percent(1 - 1 / e2e)} shorter step), "
                "less than the bound: quantization adds work and the rest of the step stays." if e2e else "")
    cost = n.compute_bound_dot_s_per_step
    return (f"{n.dot_count} compute-bound {_matmuls(n.dot_count)} in {', '.join(n.dtypes)} take "
            f"{format_seconds(cost)} per step ({format_percent(cost / n.priced.step_s)} of the step; "
            + ("measured" if n.times_are == "measured" else "roofline prediction, no trace")
            + f"). {n.chip_name} runs {_label(n.precision)} at {n.low_precision_peak_flops_per_s:.3g} FLOP/s per "
            f"device, {n.peak_ratio:.1f}x its bf16 peak ({n.peak_source}): at that rate they would take up to "
            f"{format_seconds(n.saves_s_per_step)} less per step, an upper bound.{e2e_text}")


def fix(n: Numbers, target: Target) -> str:
    return (f"Train the matmuls in {_label(n.precision)} (a throughput lever; check the loss against the bf16 run): "
            f"MaxText {name('use_qwix_quantization')}=true {name('quantization')}={n.recipe} (the recipe for "
            f"{target.chip.name}); in other JAX code, quantize the same matmuls with Qwix.")

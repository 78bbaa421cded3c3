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
    Only matmuls that run near their current peak gain from a faster one: measured, a dot counts when it
    reaches at least 60 % of the bf16 peak (its FLOPs over its measured time); the ones below it (25-42 % on
    real captures) are named in a finding that saves nothing itself and says to tune them first (shapes,
    layouts, fusion, the kernel chosen) before any 8-bit recipe.
Fix:
    MaxText: `use_qwix_quantization=true` with the `quantization` recipe of the chip: `int8` on v6e and
    earlier TPUs, `fp8_full` on TPU7x, `fp8_gpu` on NVIDIA, `nanoo_fp8` on AMD (MaxText's benchmarking
    guide and configs/types.py). In other JAX code, Qwix quantizes a model's matmuls the same way. Check the
    loss curve against the bf16 run: the gain is throughput at equal quality, not free. A TransformerEngine
    program: `fp8_autocast` with an FP8 recipe (`DelayedScaling`); PyTorch/XLA and TensorFlow: in words.
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
    achieved_fraction (fraction or null): the dots' FLOPs per step over their time, as a share of the bf16
        peak (null without a trace)
    tune_first (bool): the dots run under 60 % of the bf16 peak: tune them before lowering the precision
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..units import format_si
from . import framework_levers as fwl
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
# A dot under this share of the bf16 peak (measured) is not limited by the peak: an 8-bit rate does not make it
# faster until it is tuned (real captures: 25-42 % of the bf16 peak, told to use FP8).
NEAR_PEAK = 0.6
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
    achieved_fraction: float | None  # fraction
    tune_first: bool
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


def _achieved(dots, analysis) -> None:
    """Each dot's measured FLOP rate as a share of the bf16 peak (``achieved``; NaN without a trace)."""
    rate = dots["flops"] / dots["mean_s"].where(dots["mean_s"] > 0) if analysis.measured else float("nan")
    dots["achieved"] = rate / analysis.chip.peak_bf16_flops_per_s


def _share(dots) -> float | None:
    """The dots' FLOPs per step over their time, as a share of the bf16 peak; None when not measured."""
    known = dots["achieved"].notna()
    if not known.any():
        return None
    per_step = (dots["achieved"] * dots["time_s"])[known].sum()
    return float(per_step / dots.loc[known, "time_s"].sum())


def measure(analysis) -> Numbers | None:
    chip = analysis.chip
    found = _low_precision(chip)
    if analysis.ops.empty or found is None:
        return None
    dots = _compute_bound_dots(analysis)
    step_s = analysis.step_s
    if dots.empty or not (step_s and step_s > 0):
        return None
    _achieved(dots, analysis)
    near = dots[~(dots["achieved"] < NEAR_PEAK)]  # not measured: priced at the roofline, so at the peak
    if float(near["time_s"].sum()) >= MIN_SHARE * step_s:
        return _numbers(analysis, near, found, tune_first=False)
    far = dots[dots["achieved"] < NEAR_PEAK]
    if float(far["time_s"].sum()) >= MIN_SHARE * step_s:
        return _numbers(analysis, far, found, tune_first=True)
    return None


def _numbers(analysis, dots, found: tuple[str, float], *, tune_first: bool) -> Numbers:
    chip, step_s = analysis.chip, analysis.step_s
    precision, lp_peak = found
    cost = float(dots["time_s"].sum())
    dots = dots.assign(ratio=lp_peak / dots["dtype"].astype(str).map(chip.peak_flops_per_s).astype(float))
    # Far from the peak, a faster peak saves nothing measurable: the finding points at tuning, and saves 0.
    dots["savings_s"] = 0.0 if tune_first else dots["time_s"] * (1.0 - 1.0 / dots["ratio"])
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
        lever="tune the matmuls before lowering precision" if tune_first
        else f"{label} matmuls (an upper bound from the peak ratio)")
    return Numbers(
        precision=precision, recipe=_recipe(chip, precision), low_precision_peak_flops_per_s=lp_peak,
        peak_source=chip.number_sources.get(f"peak_{precision}_flops_per_s", "chip table"), peak_ratio=ratio,
        compute_bound_dot_s_per_step=cost, dot_count=int(len(dots)),
        dots=[{"op": str(r.op_name), "dtype": str(r.dtype), "flops": float(r.flops),
               "s_per_step": float(r.time_s), "peak_ratio": float(r.ratio),
               "savings_s_per_step": float(r.savings_s)} for r in dots.head(50).itertuples()],
        measured_end_to_end_speedup=e2e, end_to_end_source=e2e_source, times_are=times_are(analysis),
        achieved_fraction=_share(dots), tune_first=tune_first,
        priced=priced, dtypes=tuple(sorted(set(dots["dtype"].astype(str)))), max_dot_ratio=dots["ratio"].max(),
        saves_s_per_step=savings, chip_name=chip.name)


def _label(precision: str) -> str:
    return precision.upper() if precision == "fp8" else precision


def _matmuls(count: int) -> str:
    return "matmul" if count == 1 else "matmuls"


def title(n: Numbers) -> str:
    if n.tune_first:
        return (f"{n.dot_count} compute-bound {_matmuls(n.dot_count)} run at {format_percent(n.achieved_fraction)} "
                f"of the bf16 peak: tune them before {_label(n.precision)} (a faster peak does not help them yet)")
    return (f"{n.dot_count} compute-bound {_matmuls(n.dot_count)} could run up to {n.max_dot_ratio:.0f}x faster in "
            f"{_label(n.precision)}: ~{format_seconds(n.saves_s_per_step)} per step (throughput lever, an estimate)")


def evidence(n: Numbers) -> str:
    if n.tune_first:
        return (f"{n.dot_count} compute-bound {_matmuls(n.dot_count)} in {', '.join(n.dtypes)} take "
                f"{format_seconds(n.compute_bound_dot_s_per_step)} per step (measured) at "
                f"{format_percent(n.achieved_fraction)} of {n.chip_name}'s bf16 peak, under the "
                f"{format_percent(NEAR_PEAK)} at which the peak limits them: {_label(n.precision)}'s "
                f"{n.peak_ratio:.1f}x peak would not make them faster until they run near the one they have.")
    e2e = n.measured_end_to_end_speedup
    e2e_text = (f" The guide measured about {e2e:.1f}x end to end (a {format_percent(1 - 1 / e2e)} shorter step), "
                "less than the bound: quantization adds work and the rest of the step stays." if e2e else "")
    cost = n.compute_bound_dot_s_per_step
    return (f"{n.dot_count} compute-bound {_matmuls(n.dot_count)} in {', '.join(n.dtypes)} take "
            f"{format_seconds(cost)} per step ({format_percent(cost / n.priced.step_s)} of the step; "
            + ("measured" if n.times_are == "measured" else "roofline prediction, no trace")
            + f"). {n.chip_name} runs {_label(n.precision)} at "
            f"{format_si(n.low_precision_peak_flops_per_s, 'FLOP/s')} per device, {n.peak_ratio:.1f}x its bf16 peak "
            f"({n.peak_source}): at that rate they would take up to "
            f"{format_seconds(n.saves_s_per_step)} less per step, an upper bound.{e2e_text}")


def fix(n: Numbers, target: Target) -> str:
    if n.tune_first:
        return ("Tune these matmuls first: make their dimensions multiples of the matrix unit's tile, keep their "
                "operands in the layouts the kernel wants (no transposes or copies around them), fuse the ops "
                "around them, and check which kernel runs them; consider an 8-bit recipe only once they reach "
                f"{format_percent(NEAR_PEAK)} of the bf16 peak.")
    lever = fwl.low_precision(target, _label(n.precision))
    if lever:  # TransformerEngine's FP8, or words for a framework without a verified recipe: no MaxText Qwix
        return (f"Train the matmuls in {_label(n.precision)} (a throughput lever; check the loss against the bf16 "
                f"run): {lever}.")
    return (f"Train the matmuls in {_label(n.precision)} (a throughput lever; check the loss against the bf16 run): "
            f"MaxText {name('use_qwix_quantization')}=true {name('quantization')}={n.recipe} (the recipe for "
            f"{target.chip.name}); in other JAX code, quantize the same matmuls with Qwix.")

"""Is a change of mean step time real or step-to-step noise? Welch's t-test in numpy (scipy is not a core
dependency), plus a spread floor, for ``diagnose compare``.

A change is *beyond noise* only when both hold:
- Welch's two-sided t-test on the per-step times (unequal variances) gives p < ``ALPHA``, and
- the change of the mean is larger than the step-to-step spread (the larger of the two sample standard
  deviations): with hundreds of steps the test alone calls a change far below the jitter of a single step
  real, which no one can act on.
With fewer than two steps on a side there is no spread to test against: the verdict says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
TEST_NAME = "Welch's t-test (two-sided)"
RULE = (f"beyond noise when {TEST_NAME} gives p < {ALPHA:g} and the change of the mean exceeds the "
        "step-to-step spread (the larger sample standard deviation)")


@dataclass(frozen=True)
class NoiseTest:
    base_n: int
    new_n: int
    diff_s: float  # mean(new) - mean(base)
    spread_s: float | None  # larger sample standard deviation; None with fewer than 2 steps on a side
    t: float | None
    df: float | None
    p_value: float | None
    ci_low_s: float | None  # 1 - ALPHA confidence interval of diff_s (Welch)
    ci_high_s: float | None
    beyond_noise: bool | None  # None: not testable (fewer than 2 steps on a side)
    reason: str  # one sentence: the numbers that decided it

    def as_dict(self) -> dict:
        return {"name": TEST_NAME, "alpha": ALPHA, "rule": RULE, "base_steps": self.base_n, "new_steps": self.new_n,
                "t": self.t, "df": self.df, "p_value": self.p_value, "ci_low_s": self.ci_low_s,
                "ci_high_s": self.ci_high_s, "spread_s": self.spread_s, "beyond_noise": self.beyond_noise,
                "reason": self.reason}


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return _betai(df / 2.0, 0.5, df / (df + t * t))


def t_critical(df: float, alpha: float = ALPHA) -> float:
    """The |t| whose two-sided p is ``alpha`` (bisection: p falls as |t| grows)."""
    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_two_sided_p(mid, df) > alpha:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _p_text(p: float) -> str:
    """'p = 0.0312', and 'p < 0.0001' rather than scientific notation for a very small p."""
    return "p < 0.0001" if p < 1e-4 else f"p = {p:.2g}" if p < 0.001 else f"p = {p:.3g}"


def _fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g} ms" if abs(ms) < 999.5 else f"{ms:,.0f} ms"  # 12,345 ms, not 1.23e+04 ms


def welch(base: np.ndarray, new: np.ndarray) -> NoiseTest:
    """Welch's t-test of mean(new) against mean(base) on per-step times (seconds)."""
    a = np.asarray(base, np.float64)
    b = np.asarray(new, np.float64)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    na, nb = len(a), len(b)
    if na == 0 or nb == 0:
        return NoiseTest(na, nb, math.nan, None, None, None, None, None, None, None,
                         "no per-step times on one side: noise not testable")
    diff = float(b.mean() - a.mean())
    if na < 2 or nb < 2:
        return NoiseTest(na, nb, diff, None, None, None, None, None, None, None,
                         f"{min(na, nb)} step on one side: no step-to-step spread to test against")
    va, vb = float(a.var(ddof=1)) / na, float(b.var(ddof=1)) / nb
    spread = float(max(a.std(ddof=1), b.std(ddof=1)))
    se = math.sqrt(va + vb)
    if se == 0.0:  # both sides perfectly steady: any difference is real, none is nothing
        beyond = diff != 0.0
        return NoiseTest(na, nb, diff, spread, math.inf if beyond else 0.0, None, 0.0 if beyond else 1.0, diff, diff,
                         beyond, "no step-to-step variation on either side: "
                         + ("the means differ" if beyond else "the means are equal"))
    t = diff / se
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    p = t_two_sided_p(t, df)
    half = t_critical(df) * se
    significant, above_spread = p < ALPHA, abs(diff) > spread
    beyond = significant and above_spread
    if beyond:
        reason = f"{_p_text(p)} < {ALPHA:g} and |change| {_fmt_ms(abs(diff))} > spread {_fmt_ms(spread)}"
    elif not significant:
        reason = f"{_p_text(p)} >= {ALPHA:g} ({TEST_NAME}, {na} vs {nb} steps)"
    else:
        reason = f"|change| {_fmt_ms(abs(diff))} <= step-to-step spread {_fmt_ms(spread)} ({_p_text(p)})"
    return NoiseTest(na, nb, diff, spread, float(t), float(df), float(p), diff - half, diff + half, beyond, reason)

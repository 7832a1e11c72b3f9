"""How far apart are two medians, given what this cell's noise looks like? (pure, no scipy)

A rank test cannot say anything with 3 trials against 3: its smallest two-sided p is 0.1
(0.081 with the normal approximation), so ``compare`` could never report a change. Here the
noise comes from the cell's **history** instead of from the 6 trials alone:

- ``within``: the relative spread of single trials around their run's mean, pooled over the
  history runs (pooled variance of ``x / run mean - 1`` with ``sum(n - 1)`` degrees of freedom);
- ``between``: the run-to-run spread that remains in the history's run medians beyond what the
  trial noise explains (a different night, node or thermal state moves every trial at once).

The median of ``n`` trials then has the relative variance ``between^2 + (pi/2) within^2 / n``;
the difference of two run medians has the sum of two such variances. The interval of the
relative difference ``B/A - 1`` is ``delta +- q * se`` with ``q`` the two-sided normal
quantile, or Student's ``t`` with the pooled degrees of freedom when the noise had to be
estimated from the two runs alone (no history: few degrees of freedom, wide interval).

``mde`` (minimum detectable effect) is the change the trial counts can detect with 80 % power
at this ``alpha``: ``(q + z_power) * se``. Verdicts:

- ``faster`` / ``slower``: the interval excludes 0;
- ``same``: the interval lies within ``+- tolerance`` (the change, if any, is below it);
- ``undecided``: the interval holds 0 but reaches beyond ``tolerance``: the data cannot decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterable, Sequence

from dlperf_tasks.history.robust import mad, median

MEDIAN_EFF = math.pi / 2.0  # var(median) / var(mean) for normal data, large n
MIN_HISTORY_RUNS = 3


@dataclass(frozen=True)
class Noise:
    """Relative noise of one cell: trial-to-trial (``within``) and run-to-run (``between``)."""

    within: float
    between: float
    df: int  # degrees of freedom of the estimate
    source: str  # "history (N runs)" or "these two runs"

    def var_median(self, n: int) -> float:
        return self.between ** 2 + MEDIAN_EFF * self.within ** 2 / max(1, n)


@dataclass(frozen=True)
class Interval:
    delta: float  # relative difference B/A - 1 of the medians
    lo: float
    hi: float
    se: float
    mde: float  # smallest change detectable with 80 % power (relative)
    verdict: str  # faster | slower | same | undecided
    noise: Noise

    def to_dict(self) -> dict:
        pct = lambda x: round(100.0 * x, 3)  # noqa: E731
        return {"delta_pct": pct(self.delta), "ci_pct": [pct(self.lo), pct(self.hi)], "se_pct": pct(self.se),
                "mde_pct": pct(self.mde), "verdict": self.verdict, "noise_source": self.noise.source,
                "noise_within_pct": pct(self.noise.within), "noise_between_pct": pct(self.noise.between)}


# ----------------------------------------------------------------------------- Student's t
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lnfront = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lnfront) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lnfront) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_sf`)."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    if df > 1000:
        return NormalDist().inv_cdf(p)
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 1.0 - t_sf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


# ----------------------------------------------------------------------------- noise models
def noise_from_history(runs: Iterable[Sequence[float]]) -> Noise | None:
    """Noise of one cell from its earlier runs' trial values (``None``: too little history)."""
    runs = [list(v) for v in runs if len(v) >= 2 and median(v) > 0]
    if len(runs) < MIN_HISTORY_RUNS:
        return None
    ss, meds, ns = 0.0, [], []
    for vals in runs:
        mean = sum(vals) / len(vals)
        ss += sum((x / mean - 1.0) ** 2 for x in vals)  # pooled variance: unbiased for small n
        meds.append(median(vals))
        ns.append(len(vals))
    df = sum(n - 1 for n in ns)
    within = math.sqrt(ss / df)
    m = median(meds)
    rel_meds = [x / m - 1.0 for x in meds]
    spread = mad(rel_meds) ** 2 if len(rel_meds) >= 3 else 0.0
    between2 = max(0.0, spread - MEDIAN_EFF * within ** 2 / median(ns))
    return Noise(within=within, between=math.sqrt(between2), df=df, source=f"history ({len(runs)} runs)")


def noise_from_pair(a: Sequence[float], b: Sequence[float]) -> Noise | None:
    """Noise estimated from the two compared runs alone (pooled relative SD; run-to-run noise
    unknown, so it is left out and the interval says where it came from)."""
    groups = [list(v) for v in (a, b) if len(v) >= 2 and median(v) > 0]
    df = sum(len(g) - 1 for g in groups)
    if df < 2:
        return None
    ss = 0.0
    for g in groups:
        mean = sum(g) / len(g)
        ss += sum((x / mean - 1.0) ** 2 for x in g)
    return Noise(within=math.sqrt(ss / df), between=0.0, df=df, source="these two runs (no history)")


# ----------------------------------------------------------------------------- the interval
def median_diff_interval(a: Sequence[float], b: Sequence[float], noise: Noise | None, *,
                         alpha: float = 0.05, tolerance: float = 0.03, power: float = 0.8,
                         higher_is_better: bool = True) -> Interval | None:
    """Interval of ``median(b) / median(a) - 1``; None when there is no noise estimate at all."""
    if not a or not b or noise is None:
        return None
    ma, mb = median(a), median(b)
    if not ma:
        return None
    delta = mb / ma - 1.0
    ratio = mb / ma
    se = math.sqrt(noise.var_median(len(a)) + noise.var_median(len(b)) * ratio * ratio)
    q = t_quantile(1 - alpha / 2, noise.df) if noise.df < 1000 else NormalDist().inv_cdf(1 - alpha / 2)
    zp = NormalDist().inv_cdf(power)
    lo, hi = delta - q * se, delta + q * se
    if lo > 0 or hi < 0:
        better = (delta > 0) == higher_is_better
        verdict = "faster" if better else "slower"
    elif -tolerance <= lo and hi <= tolerance:
        verdict = "same"
    else:
        verdict = "undecided"
    return Interval(delta=delta, lo=lo, hi=hi, se=se, mde=(q + zp) * se, verdict=verdict, noise=noise)


def detectable_change(n_a: int, n_b: int, noise: Noise, alpha: float = 0.05, power: float = 0.8) -> float:
    """Relative change ``n_a`` vs ``n_b`` trials can detect under ``noise`` (80 % power)."""
    se = math.sqrt(noise.var_median(n_a) + noise.var_median(n_b))
    q = t_quantile(1 - alpha / 2, noise.df) if noise.df < 1000 else NormalDist().inv_cdf(1 - alpha / 2)
    return (q + NormalDist().inv_cdf(power)) * se

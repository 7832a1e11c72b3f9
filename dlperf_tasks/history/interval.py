"""How far apart are two medians, given what this cell's noise looks like?

A rank test cannot say anything with 3 trials against 3: its smallest two-sided p is 0.1
(0.081 with the normal approximation), so ``compare`` could never report a change. Here the
noise comes from the cell's **history** instead of from the 6 trials alone:

- ``within``: the relative spread of single trials around their run's mean, pooled over the
  history runs (pooled variance of ``x / run mean - 1`` with ``sum(n - 1)`` degrees of freedom);
- ``between``: the run-to-run spread that remains in the history's run medians beyond what the
  trial noise explains (a different night, load, node or thermal state moves every trial at
  once), from the sample variance of the log run medians (``runs - 1`` degrees of freedom; a
  MAD of 3 medians is the smaller of two deviations and said "no run-to-run noise" on a busy host).

Everything is on the **log scale** (the log of the ratio B/A): the interval of ``B/A - 1`` is
``exp(log(B/A) +- q * se) - 1``, so it never reaches below -100 %. ``q`` is Student's ``t``
with Welch-Satterthwaite degrees of freedom (few history runs, wide interval).

The **noise floor** of a cell is the change two runs of the *same* code show on this machine:
the prediction bound ``t(1 - FLOOR_ALPHA/2, runs - 1) * sqrt(2) * sd(log run medians)`` of the
history (99 %) (at least 3 runs; none: no floor, and no faster/slower verdict). Verdicts:

- ``faster`` / ``slower``: the interval excludes 0 AND the change is beyond the noise floor;
- ``within_noise``: the interval excludes 0 but the history's runs move this much on their own;
- ``same``: the interval lies within ``+- tolerance``;
- ``undecided``: the data cannot decide (the interval holds 0 and reaches past the tolerance,
  or there is no history to set a noise floor); ``reason`` says which.

``mde`` (minimum detectable effect) is the change the trial counts can detect with 80 % power
at this ``alpha``, and never below the noise floor. Student's t and its quantiles come from
``scipy.stats``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterable, Sequence

from dlperf_tasks.history.robust import median, safe_expm1, typical

MEDIAN_EFF = math.pi / 2.0  # var(median) / var(mean) for normal data, large n
MIN_HISTORY_RUNS = 3
#: the noise floor is a (1 - FLOOR_ALPHA) prediction bound: 99 % of same-code pairs stay inside
#: (bench/bench_compare_false_alarms.py: a 95 % bound gave 2 false alarms in 30 pairs on a busy host)
FLOOR_ALPHA = 0.01


@dataclass(frozen=True)
class Noise:
    """Relative noise of one cell: trial-to-trial (``within``) and run-to-run (``between``)."""

    within: float
    between: float
    df: int  # degrees of freedom of the within estimate
    source: str  # "history (N runs)" or "these two runs"
    run_sd: float | None = None  # sd of the history's log run medians (None: no history)
    runs: int = 0  # history runs behind run_sd

    def var_median(self, n: int) -> float:
        return self.between ** 2 + MEDIAN_EFF * self.within ** 2 / max(1, n)

    def df_for(self, n_a: int, n_b: int) -> float:
        """Welch-Satterthwaite degrees of freedom of the variance of a difference of two run
        medians (between part: ``runs - 1``, within part: ``df``)."""
        vb = 2.0 * self.between ** 2
        vw = MEDIAN_EFF * self.within ** 2 * (1.0 / max(1, n_a) + 1.0 / max(1, n_b))
        den = (vb * vb / (self.runs - 1) if self.runs > 1 and vb else 0.0) + (vw * vw / self.df if self.df else 0.0)
        return max(1.0, (vb + vw) ** 2 / den) if den > 0 else float(max(1, self.df))

    def floor(self, alpha: float = FLOOR_ALPHA) -> float | None:
        """The noise floor on the log scale (see the module docstring); None without 3 history runs."""
        if self.run_sd is None or self.runs < MIN_HISTORY_RUNS:
            return None
        return t_quantile(1 - alpha / 2, self.runs - 1) * math.sqrt(2.0) * self.run_sd


@dataclass(frozen=True)
class Interval:
    delta: float  # relative difference B/A - 1 of the medians
    lo: float
    hi: float
    se: float  # on the log scale
    mde: float  # smallest change detectable with 80 % power (relative)
    verdict: str  # faster | slower | within_noise | same | undecided
    noise: Noise
    floor: float | None = None  # relative noise floor (exp(log floor) - 1); None: unknown
    reason: str = ""

    def to_dict(self) -> dict:
        pct = lambda x: None if x is None else round(100.0 * x, 3)  # noqa: E731
        return {"delta_pct": pct(self.delta), "ci_pct": [pct(self.lo), pct(self.hi)], "se_pct": pct(self.se),
                "mde_pct": pct(self.mde), "verdict": self.verdict, "noise_source": self.noise.source,
                "noise_within_pct": pct(self.noise.within), "noise_between_pct": pct(self.noise.between),
                "floor_pct": pct(self.floor), "reason": self.reason}


# ----------------------------------------------------------------------------- Student's t
def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t as student_t

    return float(student_t.sf(t, df))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    from scipy.stats import t as student_t

    return float(student_t.ppf(p, df))


# ----------------------------------------------------------------------------- noise models
def noise_from_history(runs: Iterable[Sequence[float]]) -> Noise | None:
    """Noise of one cell from its earlier runs' trial values (``None``: too little history)."""
    runs = _typical_runs(runs)
    if len(runs) < MIN_HISTORY_RUNS:
        return None
    ss, meds, ns = 0.0, [], []
    for vals in runs:
        med = median(vals)
        mean = med * sum(x / med for x in vals) / len(vals)  # scaled first: no overflow near 1e308
        ss += sum((x / mean - 1.0) ** 2 for x in vals)  # pooled variance: unbiased for small n
        meds.append(med)
        ns.append(len(vals))
    df = sum(n - 1 for n in ns)
    within = math.sqrt(ss / df)
    logs = [math.log(x) for x in meds]
    run_var = statistics.variance(logs)  # len(runs) - 1 degrees of freedom
    between2 = max(0.0, run_var - MEDIAN_EFF * within ** 2 / median(ns))
    return Noise(within=within, between=math.sqrt(between2), df=df, source=f"history ({len(runs)} runs)",
                 run_sd=math.sqrt(run_var), runs=len(runs))


def _typical_runs(runs: Iterable[Sequence[float]]) -> list[list[float]]:
    """The history runs the noise estimate may use: glitch trials (1000x, 1e300, 1e-300, not
    finite) dropped from their run, then runs whose median is a glitch against the others'
    dropped (robust.typical); a glitch is no noise, and kept in it would make every interval absurd."""
    cleaned = []
    for v in runs:
        vals = [float(x) for x, ok in zip(v, typical(list(v))) if ok]
        if len(vals) >= 2:
            cleaned.append(vals)
    if not cleaned:
        return []
    return [vals for vals, ok in zip(cleaned, typical([median(v) for v in cleaned])) if ok]


def noise_from_pair(a: Sequence[float], b: Sequence[float]) -> Noise | None:
    """Noise estimated from the two compared runs alone (pooled relative SD; run-to-run noise
    unknown, so it is left out and the interval says where it came from)."""
    groups = [g for g in ([float(x) for x, ok in zip(v, typical(list(v))) if ok] for v in (a, b)) if len(g) >= 2]
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
    """Interval of ``median(b) / median(a) - 1`` (log scale); None when there is no noise estimate at all."""
    if not a or not b or noise is None:
        return None
    ma, mb = median(a), median(b)
    if not ma or ma <= 0 or mb <= 0 or not math.isfinite(ma) or not math.isfinite(mb):
        return None
    d = math.log(mb) - math.log(ma)  # never overflows, whatever the ratio
    se = math.sqrt(noise.var_median(len(a)) + noise.var_median(len(b)))
    q = t_quantile(1 - alpha / 2, noise.df_for(len(a), len(b)))
    zp = NormalDist().inv_cdf(power)
    lo, hi = safe_expm1(d - q * se), safe_expm1(d + q * se)
    floor = noise.floor()
    significant = lo > 0 or hi < 0
    reason = ""
    if significant and floor is not None and abs(d) > floor:
        verdict = "faster" if (d > 0) == higher_is_better else "slower"
    elif significant and floor is not None:
        verdict = "within_noise"
        reason = (f"beyond the trial noise, but two runs of the same code on this machine differ by up to "
                  f"{100 * safe_expm1(floor):.2f}% (noise floor of {noise.runs} history runs)")
    elif significant:
        verdict = "undecided"
        reason = (f"no noise floor: {noise.runs} earlier run(s) of this cell on this machine, "
                  f"need {MIN_HISTORY_RUNS}")
    elif -tolerance <= lo and hi <= tolerance:
        verdict = "same"
    else:
        verdict = "undecided"
        reason = "the interval holds 0 and reaches past the tolerance: run more trials"
    mde = max((q + zp) * se, floor or 0.0)
    return Interval(delta=safe_expm1(d), lo=lo, hi=hi, se=se, mde=safe_expm1(mde), verdict=verdict, noise=noise,
                    floor=None if floor is None else safe_expm1(floor), reason=reason)


def detectable_change(n_a: int, n_b: int, noise: Noise, alpha: float = 0.05, power: float = 0.8) -> float:
    """Relative change ``n_a`` vs ``n_b`` trials can detect under ``noise`` (80 % power),
    never below the noise floor."""
    se = math.sqrt(noise.var_median(n_a) + noise.var_median(n_b))
    q = t_quantile(1 - alpha / 2, noise.df_for(n_a, n_b))
    return safe_expm1(max((q + NormalDist().inv_cdf(power)) * se, noise.floor() or 0.0))

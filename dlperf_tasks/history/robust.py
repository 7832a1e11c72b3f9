"""Robust statistics for noisy benchmark numbers.

- :func:`median`, :func:`mad` (median absolute deviation, scaled by 1.4826 so it estimates
  the standard deviation of normal data),
- :func:`mann_whitney_u`: the rank-sum test with tie correction, normal approximation and
  continuity correction (``scipy.stats.mannwhitneyu(..., method="asymptotic")``).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

MAD_SCALE = 1.4826


def median(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("median of an empty sequence")
    return float(statistics.median(xs))


def mad(xs: Sequence[float], scale: float = MAD_SCALE) -> float:
    """Scaled median absolute deviation (0.0 for fewer than 2 values)."""
    if len(xs) < 2:
        return 0.0
    m = median(xs)
    return scale * median([abs(x - m) for x in xs])


#: a value is an outlier (a glitch, not noise) when it lies more than OUTLIER_K scaled MADs and at
#: least a factor OUTLIER_MIN_RATIO from the median, on the log scale
OUTLIER_K = 6.0
OUTLIER_MIN_RATIO = 2.0


def typical(xs: Sequence[float]) -> list[bool]:
    """For each of ``xs`` (positive numbers), whether it is typical: within ``OUTLIER_K`` scaled MADs
    and a factor ``OUTLIER_MIN_RATIO`` of the median on the log scale. A value that is not finite or
    not positive is never typical. Robust: one glitch of any size (1000x, 1e300, 1e-300) among
    three values moves neither the median nor the MAD."""
    ok = [isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in xs]
    logs = [math.log(x) for x, good in zip(xs, ok) if good]
    if not logs:
        return ok
    m = median(logs)
    bound = max(OUTLIER_K * mad(logs), math.log(OUTLIER_MIN_RATIO))
    it = iter(logs)
    return [good and abs(next(it) - m) <= bound for good in ok]


def safe_expm1(x: float) -> float:
    """``exp(x) - 1`` that never overflows (beyond about 1e300 it is infinity)."""
    return math.expm1(x) if x < 690.0 else math.inf


def cv(xs: Sequence[float]) -> float | None:
    """Coefficient of variation (stdev / mean), None for fewer than 2 values or a zero mean."""
    if len(xs) < 2:
        return None
    mean = statistics.fmean(xs)
    return statistics.stdev(xs) / abs(mean) if mean else None


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: str = "two-sided") -> tuple[float, float]:
    """Mann-Whitney U of ``x`` against ``y``: returns ``(U_x, p_value)``
    (``scipy.stats.mannwhitneyu``, asymptotic with tie and continuity correction).

    ``alternative``: ``"less"`` (x tends to be smaller than y), ``"greater"`` or ``"two-sided"``.
    Raises ValueError on empty input or an unknown alternative.
    """
    if alternative not in ("less", "greater", "two-sided"):
        raise ValueError(f"alternative must be less, greater or two-sided, not {alternative!r}")
    if not x or not y:
        raise ValueError("mann_whitney_u needs two non-empty samples")
    if len(set(x) | set(y)) == 1:  # every value identical: nothing to rank
        return len(x) * len(y) / 2.0, 1.0
    from scipy.stats import mannwhitneyu

    r = mannwhitneyu(list(x), list(y), alternative=alternative, method="asymptotic", use_continuity=True)
    p = float(r.pvalue)
    return float(r.statistic), (1.0 if math.isnan(p) else min(1.0, max(0.0, p)))

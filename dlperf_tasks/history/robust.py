"""Robust statistics for noisy benchmark numbers (pure Python, no scipy).

- :func:`median`, :func:`mad` (median absolute deviation, scaled by 1.4826 so it estimates
  the standard deviation of normal data),
- :func:`mann_whitney_u`: the rank-sum test with tie correction, normal approximation and
  continuity correction (the same numbers as ``scipy.stats.mannwhitneyu(..., method="asymptotic")``).
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


def cv(xs: Sequence[float]) -> float | None:
    """Coefficient of variation (stdev / mean), None for fewer than 2 values or a zero mean."""
    if len(xs) < 2:
        return None
    mean = statistics.fmean(xs)
    return statistics.stdev(xs) / abs(mean) if mean else None


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of tie groups."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: str = "two-sided") -> tuple[float, float]:
    """Mann-Whitney U of ``x`` against ``y``: returns ``(U_x, p_value)``.

    ``alternative``: ``"less"`` (x tends to be smaller than y), ``"greater"`` or ``"two-sided"``.
    Raises ValueError on empty input or an unknown alternative.
    """
    if alternative not in ("less", "greater", "two-sided"):
        raise ValueError(f"alternative must be less, greater or two-sided, not {alternative!r}")
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("mann_whitney_u needs two non-empty samples")
    ranks, ties = _ranks(list(x) + list(y))
    r1 = sum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    n = n1 + n2
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:  # every value identical
        return u1, 1.0
    sd = math.sqrt(var)
    if alternative == "greater":
        p = _norm_sf((u1 - mu - 0.5) / sd)
    elif alternative == "less":
        p = _norm_sf((mu - u1 - 0.5) / sd)
    else:
        p = min(1.0, 2.0 * _norm_sf((abs(u1 - mu) - 0.5) / sd))
    return u1, min(1.0, max(0.0, p))

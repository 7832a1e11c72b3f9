"""One number format for what people read: speeds, speedups, efficiencies and
dispersion with 2 decimals, the coefficient of variation as a percentage with 2 decimals.
report.md's tables (except the seed tables, which keep the seeds' own format byte for byte),
the results page and ``make run``'s table use these."""

from __future__ import annotations

import math
from typing import Any


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def num2(v: Any, missing: str = "-") -> str:
    """``127.90``; ``missing`` for None (a non-finite or non-numeric value is shown as it is)."""
    f = _finite(v)
    if f is None:
        return missing if v is None else str(v)
    return f"{f:.2f}"


def pct(ratio: Any, missing: str = "-") -> str:
    """A ratio (CV 0.8334) as a percentage: ``83.34%``."""
    f = _finite(ratio)
    if f is None:
        return missing if ratio is None else str(ratio)
    return f"{f * 100:.2f}%"

"""Compare two runs cell by cell: both medians, delta %, and whether the difference is
beyond the cells' noise.

"Beyond noise" for one cell: a two-sided Mann-Whitney U test of the two runs' trial speeds
gives ``p < alpha`` AND the medians differ by more than ``k`` times the combined
standard error of the two medians (from each run's MAD of trials, so a single outlier trial
does not decide). Cells with fewer than 2 valid trials on a side cannot be judged (``None``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from dlperf_tasks.history.robust import mad, mann_whitney_u
from dlperf_tasks.history.runs import RunView, env_diff


@dataclass
class CellComparison:
    cell_id: str
    unit: str
    median_a: float | None
    median_b: float | None
    delta_pct: float | None  # (b - a) / a
    speedup_a: float | None
    speedup_b: float | None
    n_a: int
    n_b: int
    p_value: float | None
    beyond_noise: bool | None  # None: not enough trials to judge
    verdict: str  # faster | slower | same | only_in_a | only_in_b | n/a

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("delta_pct",):
            if d[k] is not None:
                d[k] = round(d[k], 3)
        if d["p_value"] is not None:
            d["p_value"] = float(f"{d['p_value']:.3g}")
        return d


def compare_cells(a: RunView, b: RunView, alpha: float = 0.05, k: float = 2.0) -> list[CellComparison]:
    out = []
    for cid in sorted(set(a.cells) | set(b.cells)):
        ca, cb = a.cells.get(cid), b.cells.get(cid)
        unit = (ca or cb).unit
        if ca is None or cb is None:
            out.append(CellComparison(cid, unit, ca and ca.median, cb and cb.median, None,
                                      ca and ca.speedup, cb and cb.speedup, len(ca.values) if ca else 0,
                                      len(cb.values) if cb else 0, None, None,
                                      "only_in_a" if cb is None else "only_in_b"))
            continue
        delta = None
        if ca.median and cb.median is not None:
            delta = 100.0 * (cb.median - ca.median) / ca.median
        p = beyond = None
        verdict = "n/a"
        if len(ca.values) >= 2 and len(cb.values) >= 2 and ca.median and cb.median:
            _, p = mann_whitney_u(list(cb.values), list(ca.values), "two-sided")
            se = math.hypot(mad(list(ca.values)) * 1.2533 / math.sqrt(len(ca.values)),
                            mad(list(cb.values)) * 1.2533 / math.sqrt(len(cb.values)))
            diff = abs(cb.median - ca.median)
            beyond = bool(p < alpha and diff > k * se)
            if not beyond:
                verdict = "same"
            else:
                better = (cb.median > ca.median) == ca.higher_is_better
                verdict = "faster" if better else "slower"
        out.append(CellComparison(cid, unit, ca.median, cb.median, delta, ca.speedup, cb.speedup,
                                  len(ca.values), len(cb.values), p, beyond, verdict))
    return out


def compare_runs(a: RunView, b: RunView, alpha: float = 0.05, k: float = 2.0) -> dict[str, Any]:
    """The whole comparison as a JSON-able dict (cells + environment diff)."""
    return {
        "run_a": a.run_id, "run_b": b.run_id,
        "cells": [c.to_dict() for c in compare_cells(a, b, alpha, k)],
        "env_diff": env_diff(a.env, b.env),
    }

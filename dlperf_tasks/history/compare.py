"""Compare two runs cell by cell: both medians, the change B vs A with its interval, the
smallest change the trial counts can detect, and a verdict that says when the data cannot decide.

The noise model of each cell is its history **on the same machine** (the suite's other runs
holding that cell whose captured machine, :func:`dlperf_tasks.history.runs.machine_of`, is
run B's; :func:`dlperf_tasks.history.interval.noise_from_history`), so 3 trials against 3 can
show a change a rank test never could; without enough history the two runs' own trials are used
(wider interval, noted in ``noise_source``). The interval is on the log scale (never below
-100 %). Verdicts per cell: ``faster`` / ``slower`` (the interval excludes 0 AND the change is
beyond the noise floor the cell's history shows between runs of the same code), ``within_noise``
(beyond the trial noise, not beyond that floor), ``same`` (the interval lies within +-
``tolerance``), ``undecided`` (the data cannot decide; ``reason`` says why, e.g. no history to
set a floor), ``only_in_a`` / ``only_in_b``, ``n/a`` (no noise estimate at all: one trial and no
history), ``same run`` (a run compared with itself). See bench/bench_compare_false_alarms.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

from dlperf_tasks.history.interval import median_diff_interval, noise_from_history, noise_from_pair
from dlperf_tasks.history.runs import RunView, env_diff, machine_of

SAME_RUN = "same run"


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
    ci_pct: list[float] | None  # interval of delta_pct at 1 - alpha
    mde_pct: float | None  # smallest change these trial counts detect (80 % power)
    noise_source: str | None
    beyond_noise: bool | None  # None: cannot be judged
    verdict: str  # faster | slower | within_noise | same | undecided | only_in_a | only_in_b | n/a | same run
    floor_pct: float | None = None  # the change two same-code runs show on this machine (None: unknown)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["delta_pct"] is not None:
            d["delta_pct"] = round(d["delta_pct"], 3)
        return d


def history_noise(history: Iterable[RunView], cell_id: str, exclude: set[str], machine: tuple | None = None):
    """The cell's noise from the valid history runs (not ``exclude``), on ``machine`` when given."""
    runs = [list(r.cells[cell_id].values) for r in history
            if r.valid and r.run_id not in exclude and cell_id in r.cells
            and (machine is None or machine_of(r.env) == machine)]
    return noise_from_history(runs)


def compare_cells(a: RunView, b: RunView, history: Iterable[RunView] = (), alpha: float = 0.05,
                  tolerance: float = 0.03) -> list[CellComparison]:
    history = list(history)
    out = []
    same = a.run_id == b.run_id
    machine = machine_of(b.env)
    for cid in sorted(set(a.cells) | set(b.cells)):
        ca, cb = a.cells.get(cid), b.cells.get(cid)
        unit = (ca or cb).unit
        if same:
            out.append(CellComparison(cid, unit, ca.median, cb.median, 0.0, ca.speedup, cb.speedup, len(ca.values),
                                      len(cb.values), None, None, None, False, SAME_RUN,
                                      reason="a run compared with itself"))
            continue
        if ca is None or cb is None:
            out.append(CellComparison(cid, unit, ca and ca.median, cb and cb.median, None,
                                      ca and ca.speedup, cb and cb.speedup, len(ca.values) if ca else 0,
                                      len(cb.values) if cb else 0, None, None, None, None,
                                      "only_in_a" if cb is None else "only_in_b"))
            continue
        delta = None
        if ca.median and cb.median is not None:
            delta = 100.0 * (cb.median - ca.median) / ca.median
        noise = (history_noise(history, cid, {a.run_id, b.run_id}, machine)
                 or noise_from_pair(ca.values, cb.values))
        iv = median_diff_interval(list(ca.values), list(cb.values), noise, alpha=alpha, tolerance=tolerance,
                                  higher_is_better=ca.higher_is_better)
        if iv is None:
            out.append(CellComparison(cid, unit, ca.median, cb.median, delta, ca.speedup, cb.speedup,
                                      len(ca.values), len(cb.values), None, None, None, None, "n/a"))
            continue
        d = iv.to_dict()
        out.append(CellComparison(cid, unit, ca.median, cb.median, delta, ca.speedup, cb.speedup,
                                  len(ca.values), len(cb.values), d["ci_pct"], d["mde_pct"], d["noise_source"],
                                  iv.verdict in ("faster", "slower"), iv.verdict, d["floor_pct"], d["reason"]))
    return out


def compare_runs(a: RunView, b: RunView, history: Iterable[RunView] = (), alpha: float = 0.05,
                 tolerance: float = 0.03) -> dict[str, Any]:
    """The whole comparison as a JSON-able dict (cells + environment diff + counts)."""
    cells = [c.to_dict() for c in compare_cells(a, b, history, alpha, tolerance)]
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    return {"run_a": a.run_id, "run_b": b.run_id, "alpha": alpha, "tolerance_pct": 100.0 * tolerance,
            "same_run": a.run_id == b.run_id, "same_machine": machine_of(a.env) == machine_of(b.env),
            "cells": cells, "verdicts": counts, "env_diff": env_diff(a.env, b.env)}

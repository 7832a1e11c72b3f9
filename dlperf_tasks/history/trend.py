"""History of one cell across runs (the data behind ``dlperf results trend``)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from dlperf_tasks.history.cellspec import match_cell
from dlperf_tasks.history.runs import RunView, sort_runs


@dataclass
class TrendPoint:
    run_id: str
    date: str
    status: str
    started_at: str | None
    median: float | None
    speedup: float | None
    n_valid: int
    min: float | None
    max: float | None
    trial_values: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Trend:
    suite: str
    cell_id: str
    unit: str
    points: list[TrendPoint]

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "cell_id": self.cell_id, "unit": self.unit,
                "points": [p.to_dict() for p in self.points]}

    @property
    def medians(self) -> list[float]:
        return [p.median for p in self.points if p.median is not None]

    def overall_median(self) -> float | None:
        m = self.medians
        return statistics.median(m) if m else None


def all_cell_ids(runs: Iterable[RunView]) -> set[str]:
    ids: set[str] = set()
    for r in runs:
        ids.update(r.cells)
    return ids


def cell_trend(runs: Iterable[RunView], spec: str, last: int | None = None) -> Trend:
    """Points of the cell named by ``spec`` (see :func:`match_cell`), oldest first, the ``last``
    N runs holding that cell. Runs that lack the cell are skipped."""
    runs = sort_runs(runs)
    cell_id = match_cell(spec, all_cell_ids(runs))
    pts = []
    unit = "samples/s"
    for r in runs:
        c = r.cells.get(cell_id)
        if c is None:
            continue
        unit = c.unit
        vals = list(c.values)
        pts.append(TrendPoint(run_id=r.run_id, date=r.date, status=r.status, started_at=r.started_at, median=c.median, speedup=c.speedup,
                              n_valid=c.n_valid, min=min(vals) if vals else None, max=max(vals) if vals else None,
                              trial_values=vals))
    if last is not None:
        pts = pts[-last:] if last > 0 else []
    suite = runs[-1].suite if runs else ""
    return Trend(suite=suite, cell_id=cell_id, unit=unit, points=pts)

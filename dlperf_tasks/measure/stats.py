"""Per-cell statistics over trial results, computed the way DLPerf's extractors did.

DLPerf rules (seeds 000, 003, 004):

* each trial's speed is printed rounded to 2 decimals, and the cell statistics are
  computed from those rounded values;
* ``median_speed = round(median(trial speeds), 2)``,
  ``average_speed = round(sum / n, 2)``;
* ``speedup = round(median_speed / median_speed of 1n1g, 2)`` where 1n1g is the cell
  with the same :attr:`~dlperf_tasks.core.model.Cell.baseline_key` (model, precision, XLA,
  batch size per device).

Differences from DLPerf, on purpose:

* invalid trials (see :mod:`dlperf_tasks.measure.validity`) are counted and kept, never averaged
  in (DLPerf's scripts crashed or counted them as 0);
* a cell without a valid 1n1g baseline gets ``speedup = None`` and
  ``speedup_state = "missing_baseline"``, never 1.0;
* dispersion is added: min, max, sample stdev, CV (= stdev / mean), scaling efficiency
  (= speedup / world size).

Latency workloads (Megatron, :attr:`MetricKind.LATENCY`) get latency in ms/iteration and
memory in MiB per case, and no speedup (``speedup_state = "not_applicable"``).

Pure logic, no I/O.
"""

from __future__ import annotations

import math
from statistics import median, stdev
from dataclasses import dataclass, field
from collections.abc import Iterable

from dlperf_tasks.core.model import Cell, MetricKind, TrialResult
from dlperf_tasks.core.topology import BASELINE
from dlperf_tasks import frameworks

#: speedup_state values
SPEEDUP_BASELINE = "baseline"  # this cell is the 1n1g baseline (speedup 1.0)
SPEEDUP_OK = "ok"
SPEEDUP_MISSING_BASELINE = "missing_baseline"  # no valid 1n1g cell with the same baseline_key
SPEEDUP_NO_VALID_TRIALS = "no_valid_trials"  # this cell itself has no valid trial
SPEEDUP_NOT_APPLICABLE = "not_applicable"  # latency workloads (Megatron)

UNITS = {MetricKind.THROUGHPUT: "samples/s", MetricKind.LATENCY: "ms/iter"}


def dlperf_round(x: float | None, ndigits: int = 2) -> float | None:
    """DLPerf's rounding: Python's ``round(x, 2)`` (None stays None)."""
    return None if x is None else round(float(x), ndigits)


def trial_value(result: TrialResult) -> float | None:
    """A trial's speed as DLPerf printed it (rounded to 2 decimals), or None without a metric."""
    if result.metric is None:
        return None
    v = result.metric.value
    if v is None or not math.isfinite(v):
        return None
    return dlperf_round(v)


@dataclass(slots=True)
class CellStats:
    """Statistics of one cell over its valid trials; ``trials`` keeps every trial (valid or not)."""

    cell: Cell
    trials: list[TrialResult] = field(default_factory=list)
    metric_kind: MetricKind = MetricKind.THROUGHPUT
    values: list[float] = field(default_factory=list)  # rounded speeds of the valid trials, in trial order
    median: float | None = None
    average: float | None = None
    min: float | None = None
    max: float | None = None
    stdev: float | None = None
    cv: float | None = None
    speedup: float | None = None
    speedup_state: str = SPEEDUP_NO_VALID_TRIALS
    scaling_efficiency: float | None = None
    memory_mib: float | None = None  # latency workloads: max over valid trials
    throughput: float | None = None  # latency workloads: samples/s = global batch / latency (median)

    @property
    def unit(self) -> str:
        return UNITS[self.metric_kind]

    @property
    def n_valid(self) -> int:
        return sum(1 for t in self.trials if t.valid)

    @property
    def n_invalid(self) -> int:
        return len(self.trials) - self.n_valid

    @property
    def invalid_trials(self) -> list[TrialResult]:
        return [t for t in self.trials if not t.valid]

    # DLPerf names
    @property
    def median_speed(self) -> float | None:
        return self.median

    @property
    def average_speed(self) -> float | None:
        return self.average

    @property
    def latency_ms(self) -> float | None:
        return self.median if self.metric_kind == MetricKind.LATENCY else None


def _kind(cell: Cell, trials: list[TrialResult]) -> MetricKind:
    for t in trials:
        if t.metric is not None:
            return MetricKind(t.metric.kind)
    try:  # no trial produced a metric: ask the framework
        return MetricKind(frameworks.get(cell.framework).metric_kind)
    except Exception:
        return MetricKind.THROUGHPUT


def cell_stats(cell: Cell, trials: list[TrialResult]) -> CellStats:
    """Median/average/dispersion of one cell (speedup is filled in by :func:`aggregate`)."""
    trials = sorted(trials, key=lambda t: t.trial.index)
    st = CellStats(cell=cell, trials=trials, metric_kind=_kind(cell, trials))
    values = [v for v in (trial_value(t) for t in trials if t.valid) if v is not None]
    st.values = values
    if not values:
        st.speedup_state = SPEEDUP_NOT_APPLICABLE if st.metric_kind == MetricKind.LATENCY else SPEEDUP_NO_VALID_TRIALS
        return st
    mean = sum(values) / len(values)
    st.median = dlperf_round(median(values))
    st.average = dlperf_round(mean)
    st.min = min(values)
    st.max = max(values)
    if len(values) >= 2:
        sd = stdev(values)
        st.stdev = dlperf_round(sd, 4)
        st.cv = dlperf_round(sd / mean, 4) if mean else None
    if st.metric_kind == MetricKind.LATENCY:
        st.speedup_state = SPEEDUP_NOT_APPLICABLE
        mems = [t.metric.memory_mib for t in trials if t.valid and t.metric and t.metric.memory_mib is not None]
        st.memory_mib = max(mems) if mems else None
        tps = [t.metric.throughput for t in trials if t.valid and t.metric and t.metric.throughput is not None]
        st.throughput = dlperf_round(median(tps)) if tps else None
    return st


_GROUP_ORDER = {"DP": 0, "MP": 1, "2D": 2, "PP": 3}


def _cell_order(cell: Cell) -> tuple:
    layout = cell.layout
    if layout is not None:  # Megatron cases: seed 002's order (DP, MP, 2D, PP, then size)
        return (cell.suite, cell.model, 1, _GROUP_ORDER.get(layout.group, 9), layout.group,
                cell.topology.world_size, cell.topology.nodes, layout.case)
    return (
        cell.suite,
        cell.model,
        0,
        cell.batch_size_per_device,
        cell.precision,
        cell.xla,
        cell.topology.world_size,
        cell.topology.nodes,
        layout.case if layout else "",
    )


def aggregate(trial_results: Iterable[TrialResult]) -> list[CellStats]:
    """Group trial results by cell and compute every cell's statistics and speedup.

    Works on any TrialResults (from ``extract_tree`` or from a cluster sweep). Cells come
    back sorted by suite, model, batch size, precision, XLA, then world size (1n1g first).
    """
    groups: dict[Cell, list[TrialResult]] = {}
    for r in trial_results:
        groups.setdefault(r.trial.cell, []).append(r)
    cells = [cell_stats(cell, trials) for cell, trials in groups.items()]
    cells.sort(key=lambda s: _cell_order(s.cell))

    baselines: dict[tuple, CellStats] = {}
    for st in cells:
        if st.cell.topology == BASELINE and st.cell.layout is None:
            baselines[st.cell.baseline_key] = st
    for st in cells:
        if st.metric_kind == MetricKind.LATENCY:
            st.speedup_state = SPEEDUP_NOT_APPLICABLE
            continue
        if st.median is None:
            st.speedup_state = SPEEDUP_NO_VALID_TRIALS
            continue
        base = baselines.get(st.cell.baseline_key)
        if base is None or base.median is None or base.median <= 0:
            st.speedup_state = SPEEDUP_MISSING_BASELINE
            continue
        speedup = dlperf_round(st.median / base.median)
        st.speedup = speedup
        st.speedup_state = SPEEDUP_BASELINE if st is base else SPEEDUP_OK
        st.scaling_efficiency = None if speedup is None else dlperf_round(speedup / st.cell.topology.world_size, 4)
    return cells


def config_key(cell: Cell) -> str:
    """Key of the seeds' result dict per batch size / precision: ``bz32``, ``bz32_fp16``,
    ``bz32_fp16_xla``, ``bz32_xla`` (fp32 without XLA has no suffix)."""
    key = f"bz{cell.batch_size_per_device}"
    if cell.precision_tag != "fp32":
        key += f"_{cell.precision_tag}"
    if cell.xla:
        key += "_xla"
    return key


def dlperf_dict(cells: Iterable[CellStats], model_name: str | None = None) -> dict[str, dict]:
    """The seeds' exact result shape, one entry per batch size/precision (see :func:`config_key`)::

        {"bz32": {"bert-base": {"1n1g": {"average_speed": 126.74, "batch_size_per_device": 32,
                                         "median_speed": 127.05, "speedup": 1.0}, ...}}}

    Only throughput cells with at least one valid trial appear. ``model_name`` overrides the
    model key (DLPerf printed e.g. ``bert`` for TensorFlow and ``rn50`` for ResNet50).
    A cell whose baseline is missing has ``"speedup": None``.
    """
    out: dict[str, dict] = {}
    for st in cells:
        if st.metric_kind != MetricKind.THROUGHPUT or st.median is None:
            continue
        model = model_name or st.cell.model
        out.setdefault(config_key(st.cell), {}).setdefault(model, {})[st.cell.topology.name] = {
            "average_speed": st.average,
            "batch_size_per_device": st.cell.batch_size_per_device,
            "median_speed": st.median,
            "speedup": st.speedup,
        }
    return out

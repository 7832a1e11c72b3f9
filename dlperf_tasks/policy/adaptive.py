"""Adaptive trial count: stop a cell's trials once its median is known well enough.

Pure logic (no I/O, no clock, no Airflow). Opt-in per suite (catalog field ``adaptive``) or
per run (override ``adaptive``). The rule, per cell:

* run at least ``min_trials`` valid trials (default 3) and never more than ``max_trials``
  attempts (the suite's ``trials``, the fixed count);
* after each trial, compute a confidence interval (CI) of the cell's median from its valid
  trial values; once ``(hi - lo) / median <= rel_width`` (default 0.01 = 1 %) the cell stops
  (``converged``), otherwise it runs its next trial, up to ``max_trials`` (``max_trials``).

CI methods (``method``):

``order`` (default, distribution-free)
    The order-statistic interval ``[x_(j), x_(n+1-j)]`` of the sorted values, with the largest
    ``j`` whose binomial coverage ``1 - 2 * P(Binom(n, 1/2) < j)`` is at least ``confidence``.
    With few values no pair reaches the target and the interval is the range ``[min, max]``,
    whose coverage is ``1 - 2 * 0.5**n`` (75 % for 3 values, 87.5 % for 4, 93.75 % for 5);
    the record states the coverage actually achieved (``ci_confidence``), never the target.
``bootstrap``
    The percentile bootstrap of the median (``n_boot`` resamples, seeded from the values, so
    the same values always give the same interval).

The decision record (:meth:`CellDecision.to_dict`, in result.json ``run.adaptive`` and the
report's "Adaptive trials" section) names each cell's trials used, the maximum, why it
stopped, the median and the interval. :func:`worst_case` is what the plan shows: the
maximum trial count (the fixed count) next to the minimum.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

METHODS = ("order", "bootstrap")
CONVERGED = "converged"
MAX_TRIALS = "max_trials"
RUNNING = "running"
NO_VALID = "no_valid_trials"
REPORT_HEADING = "## Adaptive trials"


@dataclass(frozen=True)
class AdaptivePolicy:
    """When to stop a cell. ``max_trials`` None = the suite's trials (set per cell by the caller)."""

    enabled: bool = True
    min_trials: int = 3
    max_trials: int | None = None
    rel_width: float = 0.01
    confidence: float = 0.95
    method: str = "order"
    n_boot: int = 2000

    def __post_init__(self) -> None:
        if self.min_trials < 1:
            raise ValueError(f"adaptive min_trials must be >= 1, got {self.min_trials}")
        if self.max_trials is not None and self.max_trials < 1:
            raise ValueError(f"adaptive max_trials must be >= 1, got {self.max_trials}")
        if not (0 < self.rel_width < 1):
            raise ValueError(f"adaptive rel_width must be in (0, 1) (0.01 = 1 %), got {self.rel_width}")
        if not (0.5 <= self.confidence < 1):
            raise ValueError(f"adaptive confidence must be in [0.5, 1), got {self.confidence}")
        if self.method not in METHODS:
            raise ValueError(f"adaptive method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.n_boot < 100:
            raise ValueError("adaptive n_boot must be >= 100")

    @classmethod
    def from_value(cls, value: Any) -> "AdaptivePolicy | None":
        """From a catalog/override value: None/False -> None (off), True -> defaults, a mapping
        of the fields (``min_trials, max_trials, rel_width, confidence, method, n_boot``)."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, AdaptivePolicy):
            return value if value.enabled else None
        if not isinstance(value, Mapping):
            raise ValueError(f"adaptive must be true/false or a mapping, got {type(value).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        bad = sorted(set(value) - known)
        if bad:
            raise ValueError(f"adaptive: unknown key(s) {', '.join(bad)} (known: {', '.join(sorted(known))})")
        pol = cls(**dict(value))
        return pol if pol.enabled else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def cap(self, suite_trials: int) -> int:
        """The maximum trial count of a cell: the suite's trials, or less if the policy says so."""
        return min(suite_trials, self.max_trials) if self.max_trials else suite_trials


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    confidence: float  # coverage actually achieved (order) or the nominal level (bootstrap)
    method: str

    def rel_width(self, center: float) -> float:
        return (self.hi - self.lo) / abs(center) if center else math.inf


# ---- confidence intervals of the median ------------------------------------------------
def _binom_cdf_half(k: int, n: int) -> float:
    """P(Binom(n, 1/2) <= k)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(0, min(k, n) + 1)) / 2.0 ** n


def order_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Distribution-free CI of the median from order statistics (see the module docstring)."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")
    best_j, best_cov = 1, 1.0 - 2.0 * 0.5 ** n if n > 1 else 0.0
    for j in range(1, (n + 1) // 2 + 1):  # narrowing pairs (x_j, x_{n+1-j})
        cov = 1.0 - 2.0 * _binom_cdf_half(j - 1, n)
        if cov >= confidence:
            best_j, best_cov = j, cov
        else:
            break
    return Interval(xs[best_j - 1], xs[n - best_j], round(best_cov, 6), "order")


def bootstrap_interval(values: Sequence[float], confidence: float = 0.95, n_boot: int = 2000) -> Interval:
    """Percentile bootstrap CI of the median, deterministic for given values."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values")
    rng = random.Random(hash(tuple(round(x, 9) for x in xs)) & 0xFFFFFFFF)
    n = len(xs)
    meds = sorted(statistics.median(rng.choices(xs, k=n)) for _ in range(n_boot))
    a = (1.0 - confidence) / 2.0
    lo = meds[max(0, int(math.floor(a * n_boot)))]
    hi = meds[min(n_boot - 1, int(math.ceil((1.0 - a) * n_boot)) - 1)]
    return Interval(lo, hi, confidence, "bootstrap")


def median_interval(values: Sequence[float], policy: AdaptivePolicy) -> Interval:
    if policy.method == "bootstrap":
        return bootstrap_interval(values, policy.confidence, policy.n_boot)
    return order_interval(values, policy.confidence)


# ---- per-cell decisions -----------------------------------------------------------------
@dataclass
class CellDecision:
    cell_id: str
    max_trials: int
    min_trials: int
    trials_used: int = 0  # attempts, valid or not
    n_valid: int = 0
    stopped: str = RUNNING  # running | converged | max_trials | no_valid_trials
    median: float | None = None
    ci_lo: float | None = None
    ci_hi: float | None = None
    ci_rel_width: float | None = None
    ci_confidence: float | None = None
    method: str = "order"
    reason: str = ""
    values: list[float] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.stopped != RUNNING

    @property
    def saved(self) -> int:
        return self.max_trials - self.trials_used

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("median", "ci_lo", "ci_hi"):
            if d[k] is not None:
                d[k] = round(d[k], 4)
        if d["ci_rel_width"] is not None:
            d["ci_rel_width"] = round(d["ci_rel_width"], 6) if math.isfinite(d["ci_rel_width"]) else None
        return d


def decide(cell_id: str, values: Sequence[float | None], policy: AdaptivePolicy, max_trials: int) -> CellDecision:
    """The decision after the trials so far (``None`` = an invalid trial): stop or go on."""
    cap = policy.cap(max_trials)
    valid = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    d = CellDecision(cell_id=cell_id, max_trials=cap, min_trials=min(policy.min_trials, cap),
                     trials_used=len(values), n_valid=len(valid), method=policy.method, values=valid)
    if valid:
        d.median = statistics.median(valid)
    if len(valid) >= 2:
        iv = median_interval(valid, policy)
        d.ci_lo, d.ci_hi, d.ci_confidence = iv.lo, iv.hi, iv.confidence
        d.ci_rel_width = iv.rel_width(d.median)
    pct = f"{policy.rel_width * 100:g} %"
    if len(valid) >= d.min_trials and d.ci_rel_width is not None and d.ci_rel_width <= policy.rel_width:
        d.stopped = CONVERGED
        d.reason = (f"median CI width {d.ci_rel_width * 100:.2f} % <= {pct} after {len(valid)} valid trial(s) "
                    f"({policy.method} CI, coverage {d.ci_confidence * 100:.1f} %)")
    elif len(values) >= cap:
        if not valid:
            d.stopped, d.reason = NO_VALID, f"{cap} trial(s), none valid"
        else:
            d.stopped = MAX_TRIALS
            w = "-" if d.ci_rel_width is None else f"{d.ci_rel_width * 100:.2f} %"
            d.reason = f"reached the maximum of {cap} trial(s); median CI width {w} (target {pct})"
    else:
        need = max(0, d.min_trials - len(valid))
        d.reason = (f"{need} more valid trial(s) before the minimum of {d.min_trials}" if need
                    else f"median CI width {d.ci_rel_width * 100:.2f} % > {pct}")
    return d


class Tracker:
    """Follows every cell of a sweep: feed trial outcomes, ask whether a cell needs more.

    ``cells``: ``{cell_id: suite trials}`` (the fixed count = each cell's maximum)."""

    def __init__(self, cells: Mapping[str, int], policy: AdaptivePolicy):
        self.policy = policy
        self.max = dict(cells)
        self.outcomes: dict[str, list[float | None]] = {c: [] for c in cells}

    def record(self, cell_id: str, value: float | None) -> CellDecision:
        self.outcomes.setdefault(cell_id, []).append(value)
        return self.decision(cell_id)

    def decision(self, cell_id: str) -> CellDecision:
        return decide(cell_id, self.outcomes.get(cell_id, []), self.policy, self.max[cell_id])

    def wants(self, cell_id: str, trial_index: int) -> bool:
        """Should trial ``trial_index`` (1-based) of the cell run? The first ``min_trials`` always do;
        a later one only while the cell has not stopped and has fewer attempts than the index."""
        cap = self.policy.cap(self.max[cell_id])
        if trial_index > cap:
            return False
        if trial_index <= min(self.policy.min_trials, cap):
            return True
        return not self.decision(cell_id).done

    def decisions(self) -> list[CellDecision]:
        return [self.decision(c) for c in sorted(self.max)]

    def summary(self) -> dict[str, Any]:
        return summarise(self.decisions(), self.policy)


def summarise(decisions: Sequence[CellDecision], policy: AdaptivePolicy | None = None) -> dict[str, Any]:
    """``{policy, cells: [...], trials_used, trials_max, saved, saved_fraction}`` (result.json ``run.adaptive``)."""
    used = sum(d.trials_used for d in decisions)
    cap = sum(d.max_trials for d in decisions)
    return {"policy": policy.to_dict() if policy else None, "cells": [d.to_dict() for d in decisions],
            "trials_used": used, "trials_max": cap, "saved": cap - used,
            "saved_fraction": round((cap - used) / cap, 4) if cap else 0.0}


def worst_case(cells: Mapping[str, int], policy: AdaptivePolicy) -> dict[str, int]:
    """What the plan shows: ``{min_trials, max_trials}`` over all cells (max = the fixed count)."""
    caps = [policy.cap(t) for t in cells.values()]
    return {"min_trials": sum(min(policy.min_trials, c) for c in caps), "max_trials": sum(caps)}


def render_markdown(summary: Mapping[str, Any]) -> str:
    """The report's "Adaptive trials" section: one row per cell."""
    lines = [REPORT_HEADING, ""]
    pol = summary.get("policy") or {}
    if pol:
        lines.append(f"Stop after >= {pol.get('min_trials')} valid trials once the {pol.get('method')} CI of the "
                     f"median is within {float(pol.get('rel_width', 0)) * 100:g} % (max = the suite's trials).")
    lines.append(f"Trials used: {summary.get('trials_used')} of {summary.get('trials_max')} "
                 f"({float(summary.get('saved_fraction') or 0) * 100:.1f} % saved).")
    lines += ["", "| cell | trials | max | stopped | median | CI | CI width | coverage |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in summary.get("cells", []):
        ci = "-" if c.get("ci_lo") is None else f"{c['ci_lo']:.2f} .. {c['ci_hi']:.2f}"
        w = "-" if c.get("ci_rel_width") is None else f"{c['ci_rel_width'] * 100:.2f} %"
        cov = "-" if c.get("ci_confidence") is None else f"{c['ci_confidence'] * 100:.1f} %"
        med = "-" if c.get("median") is None else f"{c['median']:.2f}"
        lines.append(f"| {c['cell_id']} | {c['trials_used']} | {c['max_trials']} | {c['stopped']} | {med} | "
                     f"{ci} | {w} | {cov} |")
    return "\n".join(lines) + "\n"


def simulate(values_by_cell: Mapping[str, Iterable[float | None]], policy: AdaptivePolicy) -> list[CellDecision]:
    """Replay fixed-count trial sequences (in trial order) through the stopping rule: the decision
    each cell would have reached, having run only a prefix of its trials (benchmarks, tests)."""
    out = []
    for cell_id, seq in values_by_cell.items():
        seq = list(seq)
        tr = Tracker({cell_id: len(seq)}, policy)
        d = tr.decision(cell_id)
        for i, v in enumerate(seq, start=1):
            if not tr.wants(cell_id, i):
                break
            d = tr.record(cell_id, v)
        out.append(d)
    return out

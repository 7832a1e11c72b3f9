"""Regression detection: is this run's cell slower than that cell's recent history?

Pure logic (no I/O). For every cell of the current run, against the same cell in the last
``history_runs`` valid earlier runs, two quantities are tested separately:

- **throughput**: the cell's trial speeds (latency cells: a rise in ms/iter is the regression);
- **scaling**: the speedup vs the 1n1g cell of the same group (model, batch size, precision),
  per trial ``trial_speed / 1n1g median`` of the same run. A communication regression shows
  as a lower multi-GPU speedup while the 1n1g speed is unchanged.

A quantity is a **regression** only if all of these hold (so run-to-run noise pages nobody):

1. the effect is at least ``min_effect`` (default 3 %) in the bad direction, measured between
   the current median and the median of the baseline runs' medians;
2. it lies beyond ``band_k`` (default 4) robust standard deviations of the baseline run medians
   (MAD band scaled to sigma, floored at the spread expected from the within-run trial noise,
   so a lucky quiet history does not make the band too narrow), i.e. it is unusual for *this* cell;
3. a one-sided Mann-Whitney U test of the current trials against the pooled baseline trials
   gives ``p < alpha`` (default 0.01).

A cell whose history is itself noisy (robust CV of the baseline run medians above
``noisy_cv``, default 5 %) and that shows a drop of at least ``min_effect`` is reported as
**noisy** instead of flagged. Fewer than ``min_history`` baseline runs: **insufficient_history**.

Every verdict also carries ``ci_pct`` (95 % interval of the change, the cell's history being
the noise model: :mod:`dlperf_tasks.history.interval`) and ``mde_pct`` (the drop these trial
counts detect with 80 % power at ``alpha``). A cell that was not flagged although a drop of
``min_effect`` would not even reach the detection threshold (too few trials for its noise)
is **undecided**, not ok: the check says it could not tell.

Classification of a multi-GPU cell: a throughput drop with a scaling drop while the group's
1n1g cell is fine is one **scaling** finding (the slowdown is in communication); a throughput
drop with unchanged speedup is a **throughput** finding. Every finding carries the environment
diff (image digest, driver, CUDA/NCCL, transport... from ``run.env``) between the most recent
baseline run and the current run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from dlperf_tasks.history.interval import MEDIAN_EFF, noise_from_history, t_quantile
from dlperf_tasks.history.robust import mad, mann_whitney_u, median, safe_expm1
from dlperf_tasks.history.runs import RunView, env_diff, sort_runs
from dlperf_tasks.history.basis import summarize
from dlperf_tasks.history.basis import basis_line

OK = "ok"
REGRESSION = "regression"
IMPROVED = "improved"
NOISY = "noisy"
INSUFFICIENT = "insufficient_history"
NO_DATA = "no_data"
UNDECIDED = "undecided"


@dataclass(frozen=True)
class RegressConfig:
    history_runs: int = 20
    min_history: int = 5
    min_effect: float = 0.03
    alpha: float = 0.01
    band_k: float = 4.0
    noisy_cv: float = 0.05

    def __post_init__(self) -> None:
        if self.history_runs < 1 or self.min_history < 1:
            raise ValueError("history_runs and min_history must be >= 1")
        if not (0 < self.alpha < 1) or self.min_effect < 0 or self.band_k < 0 or self.noisy_cv <= 0:
            raise ValueError("alpha must be in (0, 1); min_effect, band_k >= 0; noisy_cv > 0")


@dataclass
class Verdict:
    """The outcome of one test (one cell, one kind)."""

    kind: str  # throughput | scaling
    cell_id: str
    status: str
    unit: str
    current: float | None = None
    baseline: float | None = None
    baseline_mad: float | None = None
    delta_pct: float | None = None
    p_value: float | None = None
    score: float | None = None  # |current - baseline| / MAD-sigma of the baseline run medians
    history_cv: float | None = None
    n_current: int = 0
    n_baseline_runs: int = 0
    baseline_runs: list[str] = field(default_factory=list)
    baseline_run: str | None = None  # most recent baseline run (the env diff is against it)
    env_diff: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    ci_pct: list[float] | None = None  # 95 % interval of delta_pct
    mde_pct: float | None = None  # smallest drop detected with 80 % power
    band: list[float] | None = None  # kind "loss": the history band of the final loss (history/loss.py)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("current", "baseline", "baseline_mad", "delta_pct", "score", "history_cv", "mde_pct"):
            if isinstance(d[k], float):
                d[k] = None if not math.isfinite(d[k]) else round(d[k], 6)
        if d["p_value"] is not None:
            d["p_value"] = float(f"{d['p_value']:.3g}")
        return d


@dataclass
class RegressionReport:
    run_id: str
    suite: str
    config: RegressConfig
    verdicts: list[Verdict] = field(default_factory=list)
    findings: list[Verdict] = field(default_factory=list)
    #: the run's flagged cells (cell id -> report.flags.flags_text), shown beside the findings
    cell_flags: dict[str, str] = field(default_factory=dict)

    @property
    def noisy(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == NOISY]

    @property
    def improved(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == IMPROVED]

    @property
    def basis(self) -> dict[str, Any]:
        """The counts every surface shows (history/basis.py: the one function that makes them)."""
        return summarize(({"kind": v.kind, "cell_id": v.cell_id, "status": v.status,
                           "n_baseline_runs": v.n_baseline_runs} for v in self.verdicts),
                         self.config.min_history)

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "run_id": self.run_id,
            "suite": self.suite,
            "config": asdict(self.config),
            "findings": [v.to_dict() for v in self.findings],
            "noisy": [v.to_dict() for v in self.noisy],
            "improved": [v.to_dict() for v in self.improved],
            "checked_cells": len({v.cell_id for v in self.verdicts}),
            "insufficient_history": sorted({v.cell_id for v in self.verdicts if v.status == INSUFFICIENT}),
            "undecided": [v.to_dict() for v in self.verdicts if v.status == UNDECIDED],
            "loss": [v.to_dict() for v in self.verdicts if v.kind == "loss"],  # every loss sanity verdict
            "cell_flags": dict(self.cell_flags),
        }

    def summary_lines(self) -> list[str]:
        """Human-readable lines for task logs and notifications."""
        lines = [f"regression check of run {self.run_id} ({self.suite}): {basis_line(self.basis)}"]
        for v in self.findings + self.noisy:
            if v.kind == "loss":  # "fast but wrong?": the note says it all
                lines.append(f"  LOSS {v.cell_id}: {v.note}")
                continue
            env = "; ".join(f"{k}: {d['baseline']} -> {d['current']}" for k, d in v.env_diff.items()) or "no env change"
            ci = f", 95% interval [{v.ci_pct[0]:+.2f}, {v.ci_pct[1]:+.2f}]%" if v.ci_pct else ""
            mde = f", detectable >= {v.mde_pct:.1f}%" if v.mde_pct is not None else ""
            lines.append(
                f"  {v.status.upper()} {v.kind} {v.cell_id}: {_fmt(v.baseline)} -> {_fmt(v.current)} {v.unit} "
                f"({v.delta_pct:+.2f}%{ci}{mde}, p={v.p_value:.2g}, score={_fmt(v.score)}) [{env}]"
                + (f" {v.note}" if v.note else ""))
        bare = [v.cell_id for v in self.verdicts if v.kind == "loss" and v.status == INSUFFICIENT]
        if bare:
            lines.append(f"  loss: no loss history (fewer than 3 earlier runs with a final loss): {', '.join(bare)}")
        undecided = [v for v in self.verdicts if v.status == UNDECIDED]
        if undecided:
            lines.append(f"  UNDECIDED: {len(undecided)} check(s) cannot see a {100 * self.config.min_effect:.0f}% "
                         "drop with these trial counts: "
                         + ", ".join(f"{v.kind} {v.cell_id} (detectable >= {v.mde_pct:.1f}%)" for v in undecided[:6])
                         + (" ..." if len(undecided) > 6 else ""))
        return lines


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return "inf"
    return f"{x:.4g}" if abs(x) < 100 else f"{x:.2f}"


def _test(kind: str, cell_id: str, unit: str, higher_is_better: bool, current_values: list[float],
          current_point: float, base_points: list[tuple[RunView, float, list[float]]], current_env: dict,
          cfg: RegressConfig, floor_factor: float = 1.0) -> Verdict:
    """Test one quantity. ``base_points``: (run, run's point value, run's per-trial values), oldest first.
    ``floor_factor`` scales the within-run noise floor (sqrt(2) for a ratio of two noisy medians)."""
    v = Verdict(kind=kind, cell_id=cell_id, status=OK, unit=unit, current=current_point,
                n_current=len(current_values), n_baseline_runs=len(base_points),
                baseline_runs=[r.run_id for r, _, _ in base_points])
    if base_points:
        v.baseline_run = base_points[-1][0].run_id
        v.env_diff = env_diff(base_points[-1][0].env, current_env)
    if len(base_points) < cfg.min_history:
        v.status = INSUFFICIENT
        v.note = f"{len(base_points)} baseline run(s), need {cfg.min_history}"
        return v
    points = [p for _, p, _ in base_points]
    pooled = [x for _, _, xs in base_points for x in xs]
    base = median(points)
    # expected sigma of a run median from the within-run trial spread (median over runs)
    within = [mad(xs) / math.sqrt(len(xs)) * 1.2533 for _, _, xs in base_points if len(xs) >= 3]
    sigma = max(mad(points), floor_factor * median(within) if within else 0.0)
    v.baseline, v.baseline_mad = base, sigma
    v.history_cv = sigma / abs(base) if base else None
    delta = (current_point - base) / base if base else 0.0
    v.delta_pct = 100.0 * delta
    v.score = abs(current_point - base) / sigma if sigma > 0 else (math.inf if current_point != base else 0.0)
    worse = delta < 0 if higher_is_better else delta > 0
    alternative = "less" if (higher_is_better == worse) else "greater"
    _, v.p_value = mann_whitney_u(current_values, pooled, alternative=alternative)
    big = abs(delta) >= cfg.min_effect
    significant = v.p_value < cfg.alpha and v.score >= cfg.band_k
    if big and worse and v.history_cv is not None and v.history_cv > cfg.noisy_cv:
        v.status = NOISY
        v.note = f"history CV {100 * v.history_cv:.1f}% > {100 * cfg.noisy_cv:.1f}%: not flagged"
    elif big and significant:
        v.status = REGRESSION if worse else IMPROVED
    _interval(v, current_values, base_points, cfg, floor_factor)
    return v


def _interval(v: Verdict, current_values: list[float], base_points: list, cfg: RegressConfig,
              floor_factor: float) -> None:
    """Fill ``ci_pct``/``mde_pct``; an unflagged verdict that could not have seen a
    ``min_effect`` drop becomes UNDECIDED."""
    noise = noise_from_history([xs for _, _, xs in base_points])
    if noise is None or v.delta_pct is None:
        return
    from statistics import NormalDist

    n_hist = int(median([len(xs) for _, _, xs in base_points]))
    var = floor_factor ** 2 * (noise.var_median(len(current_values))
                               + MEDIAN_EFF * noise.var_median(n_hist) / len(base_points))
    se = math.sqrt(var)  # on the log scale: the interval never reaches below -100 %
    q95 = t_quantile(0.975, noise.df)
    d = math.log1p(v.delta_pct / 100.0) if v.delta_pct > -100.0 else -math.inf
    v.ci_pct = [round(100.0 * safe_expm1(d - q95 * se), 3), round(100.0 * safe_expm1(d + q95 * se), 3)]
    threshold = 100.0 * t_quantile(1 - cfg.alpha, noise.df) * se  # one-sided detection threshold (50 % power)
    v.mde_pct = threshold + 100.0 * NormalDist().inv_cdf(0.8) * se
    if v.status == OK and threshold > 100.0 * cfg.min_effect:
        v.status = UNDECIDED
        v.note = (f"{v.n_current} trial(s) at {100 * noise.within:.1f}% trial noise detect drops of "
                  f"{v.mde_pct:.1f}% or more: a {100 * cfg.min_effect:.0f}% drop would go unseen")


def detect(current: RunView, history: Iterable[RunView], config: RegressConfig | None = None) -> RegressionReport:
    """Test every cell of ``current`` against the earlier valid runs in ``history``."""
    cfg = config or RegressConfig()
    earlier = [r for r in sort_runs(history)
               if r.valid and r.run_id != current.run_id and r.sort_key < current.sort_key]
    report = RegressionReport(run_id=current.run_id, suite=current.suite, config=cfg)
    by_cell: dict[str, dict[str, Verdict]] = {}

    for cell_id, cv in sorted(current.cells.items()):
        if not cv.values or cv.median is None:
            continue
        verdicts: dict[str, Verdict] = {}
        # throughput (or latency) of the cell itself
        base = [(r, r.cells[cell_id].median, list(r.cells[cell_id].values)) for r in earlier
                if cell_id in r.cells and r.cells[cell_id].values and r.cells[cell_id].median]
        base = base[-cfg.history_runs:]
        verdicts["throughput"] = _test("throughput", cell_id, cv.unit, cv.higher_is_better, list(cv.values),
                                       cv.median, base, current.env, cfg)
        # scaling: speedup vs the 1n1g cell of the same group
        key = cv.key
        bid = key.baseline_id
        if cv.higher_is_better and bid and not key.is_baseline:
            b_cur = current.cells.get(bid)
            if b_cur is not None and b_cur.median:
                sbase = []
                for r in earlier:
                    c, b = r.cells.get(cell_id), r.cells.get(bid)
                    if c and b and c.values and c.median and b.median:
                        sbase.append((r, c.median / b.median, [x / b.median for x in c.values]))
                sbase = sbase[-cfg.history_runs:]
                verdicts["scaling"] = _test("scaling", cell_id, "x (speedup vs 1n1g)", True,
                                            [x / b_cur.median for x in cv.values], cv.median / b_cur.median,
                                            sbase, current.env, cfg, floor_factor=math.sqrt(2.0))
        by_cell[cell_id] = verdicts
        report.verdicts.extend(verdicts.values())

    for cell_id, verdicts in by_cell.items():
        t, s = verdicts.get("throughput"), verdicts.get("scaling")
        bid = current.cells[cell_id].key.baseline_id
        b = by_cell.get(bid, {}).get("throughput") if bid and bid != cell_id else None
        base_bad = b is not None and b.status == REGRESSION
        if s is not None and s.status == REGRESSION:
            if t is not None and t.status == REGRESSION and not base_bad:
                s.note = (f"throughput {t.delta_pct:+.2f}% (p={t.p_value:.2g}) with the 1n1g cell unchanged: "
                          "communication/scaling slowdown")
                t.note = "explained by the scaling regression of this cell"
            report.findings.append(s)
            if t is not None and t.status == REGRESSION and base_bad:
                report.findings.append(t)
        elif t is not None and t.status == REGRESSION:
            report.findings.append(t)
    report.findings.sort(key=lambda v: (v.kind, v.cell_id))
    return report

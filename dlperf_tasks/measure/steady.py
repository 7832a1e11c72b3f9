"""Steady state within a trial's measured window, and loss sanity against a cell's history.

Steady state: a trial is *trending* when the per-iteration speed of its measured
window still moves, judged two ways that must both agree:

* Mann-Kendall rank trend test (two-sided, normal approximation with the tie correction):
  p < ``alpha`` (default 0.01), and
* the medians of the window's two halves differ by more than the trial's own noise: more than
  ``k_noise`` (3) standard errors of that difference (sigma = 1.4826 x MAD of each half around its
  own median, SE = 1.2533 x sigma x sqrt(2 / half)) and more than ``min_rel`` (1%) of the median.

A cell whose trials are not steady gets ``suggested_warmup``: the smallest warm-up (in steps of
5% of the window) after which every trending trial's remaining window is steady; ``None`` when
no cut of at most half the window makes it steady.

Series: throughput formats give samples/s per iteration; timestamp-only formats (unit ``s``) are
turned into per-iteration durations (a trend either way is a trend). One rank (the lowest).

Loss sanity (16.5), one definition for the outputs step and the regression check:

* a run's **final loss of a cell** = the median of its valid trials' final losses (the last loss
  each trial's log printed);
* the cell's **history** = that per-run figure of the same cell in the last ``LOSS_HISTORY_RUNS``
  (20) earlier runs of the suite's store index (runs whose status is not ``failed``, the run
  itself excluded);
* the **band** = median of the history +- max(``k`` (4) x 1.4826 x MAD of the history,
  ``rel_floor`` (5%) x |median|): robust to one odd earlier run, and never narrower than 5% so a
  very quiet history does not flag seed noise; it needs at least ``LOSS_MIN_RUNS`` (3) earlier
  runs, with fewer the verdict is ``no_history`` (never flagged, and it says so);
* outside the band (either side: a loss far lower is as suspect as a higher one) the cell is
  flagged "fast but wrong?" (status ``LOSS_FLAG``).

Non-finite losses are the validity gate's business (``validity.py``: the trial is invalid), not
this module's.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Mapping, Sequence


def mann_kendall(xs: Sequence[float]) -> tuple[int, float, float]:
    """(S, z, two-sided p) of the Mann-Kendall test."""
    n = len(xs)
    if n < 4:
        return 0, 0.0, 1.0
    s = 0
    for i in range(n - 1):
        xi = xs[i]
        for j in range(i + 1, n):
            d = xs[j] - xi
            s += (d > 0) - (d < 0)
    ties: dict[float, int] = {}
    for x in xs:
        ties[x] = ties.get(x, 0) + 1
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in ties.values() if t > 1)) / 18.0
    if var <= 0:
        return s, 0.0, 1.0
    z = (s - 1) / math.sqrt(var) if s > 0 else (s + 1) / math.sqrt(var) if s < 0 else 0.0
    p = math.erfc(abs(z) / math.sqrt(2))
    return s, z, p


def _mad(xs: Sequence[float]) -> float:
    m = statistics.median(xs)
    return statistics.median([abs(x - m) for x in xs])


def trend(values: Sequence[float], alpha: float = 0.01, k_noise: float = 3.0, min_rel: float = 0.01) -> dict:
    """``{"steady": bool, "p": .., "rel_change": .., "noise_rel": ..}`` for one series."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n < 8:
        return {"steady": True, "n": n, "p": 1.0, "rel_change": 0.0, "noise_rel": None, "reason": "too few samples"}
    half = n // 2
    a, b = xs[:half], xs[n - half:]
    med = statistics.median(xs) or 1e-12
    diff = statistics.median(b) - statistics.median(a)
    sigma = 1.4826 * statistics.fmean([_mad(a), _mad(b)])
    se = 1.2533 * sigma * math.sqrt(2.0 / half)
    _, _, p = mann_kendall(xs)
    rel = diff / abs(med)
    trending = p < alpha and abs(diff) > k_noise * se and abs(rel) > min_rel
    return {"steady": not trending, "n": n, "p": round(p, 6), "rel_change": round(rel, 4),
            "noise_rel": round(se / abs(med), 4)}


def series_from_samples(samples: Iterable, warmup: int) -> list[float]:
    """Per-iteration values of the measured window (iteration > warmup), lowest rank only."""
    rows = [s for s in samples if s.iteration > warmup]
    if not rows:
        return []
    ranks = {s.rank for s in rows}
    keep = min((r for r in ranks if r is not None), default=None)
    rows = sorted((s for s in rows if s.rank == keep), key=lambda s: s.iteration)
    if rows and (rows[0].unit == "s" or looks_like_epoch(rows)):  # timestamps -> durations per iteration
        return [(b.value - a.value) / max(1, b.iteration - a.iteration) for a, b in zip(rows, rows[1:])]
    return [s.value for s in rows]


def looks_like_epoch(rows) -> bool:
    """Samples whose values are epoch time stamps (a timestamp-rule framework's samples reloaded from
    a trial record, where the unit is not stored): no real speed is 1e8 samples/s and rising."""
    vals = [s.value for s in rows]
    return bool(vals) and all(v > 1e8 for v in vals) and all(b >= a for a, b in zip(vals, vals[1:]))


def suggest_cut(values: Sequence[float], step_frac: float = 0.05, **kw) -> int | None:
    """Smallest number of leading values to drop so the rest is steady (None: not within half)."""
    n = len(values)
    step = max(1, int(round(n * step_frac)))
    for cut in range(0, n // 2 + 1, step):
        if trend(values[cut:], **kw)["steady"]:
            return cut
    return None


def cell_steadiness(trials: dict[str, Sequence[float]], warmup: int, **kw) -> dict:
    """``trials``: trial id -> measured-window series. Returns the cell's verdict:
    ``{"steady": bool, "trials": {id: trend}, "unsteady": [ids], "suggested_warmup": int|None}``."""
    per = {tid: trend(vals, **kw) for tid, vals in trials.items()}
    unsteady = [tid for tid, r in per.items() if not r["steady"]]
    suggestion = None
    if unsteady:
        cuts = [suggest_cut(list(trials[tid]), **kw) for tid in unsteady]
        known = [c for c in cuts if c is not None]
        suggestion = warmup + max(known) if len(known) == len(cuts) else None
    return {"steady": not unsteady, "trials": per, "unsteady": unsteady, "suggested_warmup": suggestion}


LOSS_FLAG = "fast but wrong?"
LOSS_HISTORY_RUNS = 20
LOSS_MIN_RUNS = 3


def loss_band(history: Iterable[float], rel_floor: float = 0.05, k: float = 4.0,
              min_n: int = LOSS_MIN_RUNS) -> tuple[float, float] | None:
    """The band of a cell's history of per-run final losses (None: fewer than ``min_n`` values)."""
    hs = [float(x) for x in history if x is not None and math.isfinite(float(x))]
    if len(hs) < min_n:
        return None
    med = statistics.median(hs)
    half = max(k * 1.4826 * _mad(hs), rel_floor * abs(med))
    return med - half, med + half


def loss_verdict(final_losses: Sequence[float], history: Iterable[float]) -> dict:
    """The cell's loss verdict: ``{"status": "ok" | LOSS_FLAG | "no_history" | "no_loss", "label",
    "final_loss" (median of ``final_losses``), "band", "history_runs", "history_median", "detail"}``."""
    fl = [float(x) for x in final_losses if isinstance(x, (int, float)) and math.isfinite(float(x))]
    hs = [float(x) for x in history if isinstance(x, (int, float)) and math.isfinite(float(x))]
    cur = statistics.median(fl) if fl else None
    out: dict[str, Any] = {"status": "ok", "label": None, "final_loss": None if cur is None else round(cur, 6), "band": None,
           "history_runs": len(hs), "history_median": round(statistics.median(hs), 6) if hs else None, "detail": ""}
    band = loss_band(hs)
    if cur is None:
        out.update(status="no_loss", detail="no final loss in the valid trials' logs: not checked")
    elif band is None:
        out.update(status="no_history", detail=f"no loss history for this cell: {len(hs)} earlier run(s) with a "
                                                f"final loss, {LOSS_MIN_RUNS} needed; not checked")
    else:
        out["band"] = [round(band[0], 4), round(band[1], 4)]
        where = f"the band [{band[0]:.4g}, {band[1]:.4g}] of the cell's last {len(hs)} run(s) (median {out['history_median']:.4g})"
        if band[0] <= cur <= band[1]:
            out["detail"] = f"final loss {cur:.4g} within {where}"
        else:
            out.update(status=LOSS_FLAG, label=LOSS_FLAG, detail=f"{LOSS_FLAG} final loss {cur:.4g} outside {where}")
    return out


def same_training(row_window: Any, window: Mapping[str, Any] | None) -> bool:
    """Whether a history row trained as long as the run at hand (``window``: its ``run.window``,
    ``{"warmup", "measure"}``; None = not known, any row counts). A final loss is only
    comparable after the same number of iterations: a row of another window, or of a run that
    does not say, is not history for it."""
    if not window:
        return True
    return isinstance(row_window, Mapping) and all(row_window.get(k) == window.get(k) for k in ("warmup", "measure"))


def _order(row: Mapping[str, Any]) -> tuple[str, str]:
    return str(row.get("started_at") or row.get("date") or ""), str(row.get("run_id") or "")


def history_rows(index_rows: Iterable[Mapping[str, Any]], cell_id: str, run: Mapping[str, Any] | None = None,
                 limit: int = LOSS_HISTORY_RUNS) -> list[tuple[Mapping[str, Any], float]]:
    """``(index row, its final loss of cell_id)`` of the loss history of ``run`` (a result's
    ``run`` section: ``run_id``, ``started_at``, ``window``; None = every row), oldest first, the
    newest ``limit``: runs started before it (not itself), not failed, that trained as long
    (:func:`same_training`) and printed a final loss for the cell (a row's figure: the median of
    the cell's ``final_losses``, one per valid trial, or its ``final_loss``). The one rule of the
    outputs step's ``loss_check`` and the regression check's ``loss`` verdicts."""
    run = run or {}
    me = (str(run.get("started_at") or ""), str(run.get("run_id") or ""))
    out: list[tuple[Mapping[str, Any], float]] = []
    for row in sorted(index_rows, key=_order):
        if (run.get("run_id") and row.get("run_id") == run["run_id"]) or row.get("status") == "failed":
            continue
        if (me[0] and _order(row) >= me) or not same_training(row.get("window"), run.get("window")):
            continue
        c = (row.get("cells") or {}).get(cell_id) or {}
        raw = c.get("final_losses")
        if not isinstance(raw, list):
            raw = [c.get("final_loss")]
        vals = [float(x) for x in raw if isinstance(x, (int, float)) and math.isfinite(float(x))]
        if vals:
            out.append((row, statistics.median(vals)))
    return out[-limit:] if limit else out

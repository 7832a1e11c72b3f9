"""Loss sanity in the regression check: is a cell's final loss inside the band of its history?

Pure logic (no I/O). One definition with the outputs step (:mod:`dlperf_tasks.measure.steady`, "Loss
sanity"): the run's figure per cell is the median of its valid trials' final losses (the result's
``final_losses``, else each valid trial's ``metric.details.final_loss``); the history is the same
figure of the same cell in the last 20 earlier runs of the suite index that trained as many
iterations (the same ``run.window``; not failed, the run itself and later runs excluded:
:func:`dlperf_tasks.measure.steady.history_rows`); the band is median +- max(4 x 1.4826 x MAD, 5% of the
median), with at least 3 earlier runs. Outside it, a verdict of kind ``loss`` and status ``fast but wrong?`` is a
finding of the regression report; a cell with too little history gets status
``insufficient_history`` and a note saying there is no history (never a finding).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from dlperf_tasks.measure import steady
from dlperf_tasks.history.regress import INSUFFICIENT, OK, Verdict
from dlperf_tasks.history.runs import RunView, env_diff, flat_env

KIND = "loss"
FLAG = steady.LOSS_FLAG


def cell_final_losses(cell: Mapping[str, Any]) -> list[float]:
    """The valid trials' final losses of one result cell."""
    if isinstance(cell.get("final_losses"), list):
        return [float(x) for x in cell["final_losses"] if isinstance(x, (int, float))]
    out = []
    for t in cell.get("trials") or []:
        d = (t.get("metric") or {}).get("details") or {}
        if t.get("valid", t.get("status") == "OK") and isinstance(d.get("final_loss"), (int, float)):
            out.append(float(d["final_loss"]))
    return out


def loss_verdicts(result: Mapping[str, Any], rows: Iterable[Mapping[str, Any]],
                  history_runs: int = steady.LOSS_HISTORY_RUNS) -> list[Verdict]:
    """One ``loss`` verdict per cell of ``result`` whose valid trials printed a final loss.
    ``rows``: the suite's index rows (``store.list_runs(suite)``), oldest first."""
    run = result.get("run") or {}
    rows = list(rows)
    current_env = flat_env(run)
    out: list[Verdict] = []
    for cell in result.get("cells") or []:
        losses = cell_final_losses(cell)
        if not losses:
            continue
        cid = cell["cell_id"]
        pairs = steady.history_rows(rows, cid, run, history_runs)
        used, hist = [r for r, _ in pairs], [v for _, v in pairs]
        doc = steady.loss_verdict(losses, hist)
        v = Verdict(kind=KIND, cell_id=cid, status=OK, unit="loss", current=doc["final_loss"],
                    baseline=doc["history_median"], n_current=len(losses), n_baseline_runs=len(hist),
                    baseline_runs=[str(r.get("run_id")) for r in used], note=doc["detail"], band=doc["band"])
        if used:
            v.baseline_run = str(used[-1].get("run_id"))
            v.env_diff = env_diff(RunView.from_summary(dict(used[-1])).env, current_env)
        if v.baseline:
            v.delta_pct = 100.0 * (v.current - v.baseline) / abs(v.baseline)
        if doc["band"]:
            half = (doc["band"][1] - doc["band"][0]) / 2
            v.baseline_mad = half
            v.score = abs(v.current - v.baseline) / half if half > 0 else None
        if doc["status"] == FLAG:
            v.status = FLAG
        elif doc["status"] == "no_history":
            v.status = INSUFFICIENT
        out.append(v)
    return out


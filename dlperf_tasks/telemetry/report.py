"""Telemetry in a run's outputs: per-trial summaries from the run dir's raw sampler text, attached
to the result document, a Markdown section for report.md and a per-trial plot.

* :func:`summarise_run_trial` -> the trial's summary (also written to ``telemetry/<key>/summary.json``).
* :func:`attach` adds to ``result``: ``trial["telemetry"]`` per trial, and per cell
  ``gpu_memory_mib`` (peak nvidia-smi memory over the cell's valid trials: seed 001's memory table,
  and for latency cells beside the log's allocator figure ``memory_mib``: seed 002), ``telemetry_labels``,
  ``steady_state`` (see :mod:`dlperf_tasks.measure.steady`) and ``loss_check``.
* :func:`markdown_section` renders ``## GPU telemetry`` (tables + every marked trial with its reason).
* :func:`plot_trial` draws memory and SM clock over time with the measured window shaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from dlperf_tasks.measure import steady
from dlperf_tasks.telemetry import gpu as g
from dlperf_tasks.telemetry.sampler import load_raw
from dlperf_tasks.telemetry.summary import Policy, measured_window, summarise_trial
from dlperf_tasks.core.model import TrialStatus
from dlperf_tasks.telemetry.summary import _LABELS
from dlperf_tasks.store.store import open_store

HEADING = "## GPU telemetry"
NOT_CHECKED = {"status": "not_checked", "label": None, "final_loss": None, "band": None, "history_runs": 0,
               "history_median": None, "detail": "the store's loss history was not read in this step (the "
                                                 "regression check after publish compares the final loss)"}


def summarise_run_trial(run_dir: str | Path, res, policy: Policy | None = None,
                        nccl_net: str | None = None) -> dict | None:
    """Summary of one TrialResult's telemetry from the run dir (None when no sampler ran)."""
    raw = load_raw(run_dir, res.trial.key)
    if not raw:
        return None
    win = measured_window(res.samples, res.trial.cell.window.warmup)
    stamps = [s.timestamp for s in res.samples if s.timestamp is not None]
    if not stamps:  # reloaded record: timestamp-rule values are the time stamps
        rows = sorted(res.samples, key=lambda s: s.iteration)
        stamps = [rows[0].value] if steady.looks_like_epoch(rows) else []
    summary = summarise_trial(raw, window=win, launched_at=res.started_at,
                              first_iteration_at=min(stamps) if stamps else None,
                              multi_node=res.trial.cell.topology.nodes > 1, nccl_net=nccl_net, policy=policy)
    path = Path(run_dir) / "telemetry" / res.trial.key / "summary.json"
    path.write_text(json.dumps(summary, indent=1, sort_keys=True))
    return summary


def apply_policy(res, summary: Mapping[str, Any] | None) -> None:
    """A trial whose telemetry says invalid (policy) becomes INVALID_LOG with the reason."""
    if summary and summary.get("invalid_reason") and res.status == TrialStatus.OK:
        res.status = TrialStatus.INVALID_LOG
        res.reason = f"GPU telemetry: {summary['invalid_reason']}"


def attach(result: dict, run_dir: str | Path, results: Iterable, summaries: Mapping[str, dict],
           loss_history: Mapping[str, list[float]] | None = None, final_losses: Mapping[str, float] | None = None) -> dict:
    by_id = {r.trial.id: r for r in results}
    for cell in result.get("cells", []):
        series: dict[str, list[float]] = {}
        peaks, labels = [], set()
        warmup = None
        for t in cell.get("trials", []):
            s = summaries.get(t.get("trial_key") or "")
            if s is not None:
                t["telemetry"] = s
                labels.update(s.get("labels") or [])
                if t.get("valid") and s.get("peak_memory_mib") is not None:
                    peaks.append(s["peak_memory_mib"])
            r = by_id.get(t.get("trial_id"))
            if r is not None and t.get("valid"):
                warmup = r.trial.cell.window.warmup
                series[t["trial_id"]] = steady.series_from_samples(r.samples, warmup)
        cell["gpu_memory_mib"] = max(peaks) if peaks else None
        cell["telemetry_labels"] = sorted(labels)
        cell["steady_state"] = _steady(series, warmup) if series else None
        fl = [x for x in (_final_loss(by_id.get(t.get("trial_id")), final_losses) for t in cell.get("trials", [])
                          if t.get("valid")) if x is not None]
        cell["final_losses"] = fl
        cell["loss_check"] = (steady.loss_verdict(fl, loss_history.get(cell["cell_id"], []))
                              if loss_history is not None else dict(NOT_CHECKED))
    return result


def _final_loss(r, given: Mapping[str, float] | None) -> float | None:
    """The trial's final loss: given, else the metric's ``details["final_loss"]`` (parsers), else
    the last sample that carries a loss."""
    if r is None:
        return None
    if given and r.trial.id in given:
        return given[r.trial.id]
    d = getattr(r.metric, "details", None) or {}
    if isinstance(d.get("final_loss"), (int, float)):
        return float(d["final_loss"])
    losses = [getattr(s, "loss", None) for s in r.samples]
    losses = [x for x in losses if isinstance(x, (int, float))]
    return float(losses[-1]) if losses else None


def loss_history_from_index(index: Mapping[str, Any] | None, run: Mapping[str, Any] | None = None,
                            limit: int = steady.LOSS_HISTORY_RUNS) -> dict[str, list[float]]:
    """cell id -> per-run final losses of the runs before ``run`` (its result's ``run`` section)
    in a store index (``store.read_index(suite)``), by :func:`steady.history_rows`."""
    rows = list((index or {}).get("runs") or [])
    cells = {cid for row in rows for cid in (row.get("cells") or {})}
    return {cid: [v for _, v in steady.history_rows(rows, cid, run, limit)] for cid in cells}


def loss_history_from_store(settings, suite: str | None, run: Mapping[str, Any]) -> tuple[dict | None, str]:
    """(cell id -> loss history of ``run``, note) read from the settings' store index of ``suite``;
    a store that cannot be read gives (None, why): the outputs never fail for it."""
    if settings is None or not suite or not getattr(settings, "store_url", None):
        return None, "no store configured for this step"
    try:
        store = open_store(settings)
        return loss_history_from_index(store.read_index(suite), run), ""
    except Exception as exc:  # noqa: BLE001 - history is advisory
        return None, f"loss history not read from the store: {type(exc).__name__}: {exc}"


def _steady(series: dict[str, list[float]], warmup: int) -> dict:
    out = steady.cell_steadiness(series, warmup)
    return {"steady": out["steady"], "unsteady_trials": out["unsteady"], "suggested_warmup": out["suggested_warmup"],
            "trials": {k: {"p": v["p"], "rel_change": v["rel_change"]} for k, v in out["trials"].items()}}


def _fmt(v, nd=0) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def markdown_section(result: Mapping[str, Any]) -> str:
    cells = result.get("cells", [])
    if not any(t.get("telemetry") for c in cells for t in c.get("trials", [])) and not any(
            (c.get("steady_state") and not c["steady_state"]["steady"]) or _flagged(c) for c in cells):
        loss = loss_lines(cells)  # no GPU section, but say which cells had no loss history
        return "\n".join([HEADING, "", "no GPU telemetry in this run"] + loss) + "\n" if loss else ""
    lines = [HEADING, "", "Peak GPU memory per cell as nvidia-smi reports it (`memory.used`, max over the trial's GPUs "
             "and valid trials), beside the log's own allocator figure where the framework prints one.", "",
             "cell | peak MiB (nvidia-smi) | log memory (MiB) | mean power (W) | SM clock / max | throttled | labels",
             "-- | -- | -- | -- | -- | -- | --"]
    for c in cells:
        gpus = [gs for t in c.get("trials", []) if t.get("telemetry")
                for n in t["telemetry"]["nodes"].values() for gs in n["gpus"].values()]
        absent = all(n.get("gpu") == "absent" for t in c.get("trials", []) if t.get("telemetry")
                     for n in t["telemetry"]["nodes"].values())
        mean = lambda k: (sum(x[k] for x in gpus if x[k] is not None) / max(1, sum(x[k] is not None for x in gpus))  # noqa: E731
                          if any(x[k] is not None for x in gpus) else None)
        mx = [x["max_sm_clock_mhz"] for x in gpus if x["max_sm_clock_mhz"]]
        sm = mean("mean_sm_clock_mhz")
        thr = max((x["throttled_share"] for x in gpus), default=None)
        peak = "no GPU (nvidia-smi absent)" if absent and not gpus else _fmt(c.get("gpu_memory_mib"))
        lines.append(f"{c['cell_id']} | {peak} | {_fmt(c.get('memory_mib'))} | {_fmt(mean('mean_power_w'), 1)} | "
                     f"{_fmt(sm)} / {_fmt(max(mx) if mx else None)} | {'-' if thr is None else f'{thr:.0%}'} | "
                     f"{', '.join(c.get('telemetry_labels') or []) or '-'}")
    marked = [(c["cell_id"], t) for c in cells for t in c.get("trials", []) if (t.get("telemetry") or {}).get("flags")]
    if marked:
        lines += ["", "### marked trials", ""]
        for cid, t in marked:
            for f in t["telemetry"]["flags"]:
                where = f" node {f['node']}" if f.get("node") else ""
                lines.append(f"* {t.get('trial_id', cid)} [{_label(f)}{', invalid' if f['action'] == 'invalid' else ''}]"
                             f"{where}: {f['detail']}")
    startups = [(t.get("trial_id"), t["telemetry"]["startup_s"]) for c in cells for t in c.get("trials", [])
                if (t.get("telemetry") or {}).get("startup_s") is not None]
    if startups:
        lines += ["", "start-up (launch -> first iteration): " + ", ".join(f"{i} {s:.1f} s" for i, s in startups)]
    unsteady = [c for c in cells if c.get("steady_state") and not c["steady_state"]["steady"]]
    if unsteady:
        lines += ["", "### not steady", ""]
        for c in unsteady:
            st = c["steady_state"]
            sug = (f"a warm-up of {st['suggested_warmup']} iterations would have been steady"
                   if st["suggested_warmup"] is not None else "no warm-up within half the window makes it steady")
            lines.append(f"* {c['cell_id']}: speed still trending in {', '.join(st['unsteady_trials'])}; {sug}")
    return "\n".join(lines + loss_lines(cells)) + "\n"


def _flagged(cell: Mapping[str, Any]) -> bool:
    return (cell.get("loss_check") or {}).get("status") == steady.LOSS_FLAG


def loss_lines(cells: list) -> list[str]:
    """``### loss sanity``: every flagged cell, and the cells that had no history to compare with."""
    wrong = [c for c in cells if _flagged(c)]
    bare = [c["cell_id"] for c in cells if (c.get("loss_check") or {}).get("status") == "no_history"]
    if not wrong and not bare:
        return []
    lines = ["", "### loss sanity", ""]
    lines += [f"* {c['cell_id']} [{steady.LOSS_FLAG}]: {c['loss_check']['detail']}" for c in wrong]
    if bare:
        lines.append(f"* no loss history yet (fewer than {steady.LOSS_MIN_RUNS} earlier runs with a final loss), "
                     f"not checked: {', '.join(bare)}")
    return lines


def _label(f: Mapping[str, Any]) -> str:
    return _LABELS.get(f["kind"], f["kind"])


def plot_trial(run_dir: str | Path, trial_key: str, summary: Mapping[str, Any], out: str | Path) -> Path | None:
    """Memory (MiB) and SM clock (MHz) of every GPU over time, measured window shaded."""
    raw = load_raw(run_dir, trial_key)
    series = [(node, s) for node, r in raw.items() for s in g.parse_gpu_loop(r.gpu).gpus.values()
              if r.gpu_indices is None or s.index in r.gpu_indices]
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(s.t[0] for _, s in series if s.t)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax2 = ax.twinx()
    for node, s in series[:16]:
        ts = [x - t0 for x in s.t]
        ax.plot(ts, [m if m is not None else float("nan") for m in s.memory_used], lw=1.2, label=f"{node} GPU{s.index} memory")
        ax2.plot(ts, [c if c is not None else float("nan") for c in s.sm_clock], lw=0.8, ls="--")
    w = summary.get("window") or {}
    if w.get("start") is not None:
        ax.axvspan(w["start"] - t0, w["end"] - t0, color="tab:green", alpha=0.12, label="measured window")
    ax.set_xlabel("seconds since sampler start")
    ax.set_ylabel("memory.used (MiB)")
    ax2.set_ylabel("SM clock (MHz, dashed)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"trial {trial_key}: GPU memory and SM clock")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out

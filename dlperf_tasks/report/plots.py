"""PNG plots of a run and of a cell's history (matplotlib, Agg canvas, no pyplot state).

- :func:`render_plots` (result JSON dict -> PNG files; the entry point the engine's outputs
  step calls for a run), per model and precision, like the
  DLPerf report images: ``<model>_<precision>_throughput.png`` (samples/s vs number of GPUs,
  one line per batch size) and ``<model>_<precision>_speedup.png`` (speedup vs number of
  GPUs with the ideal linear line). Latency workloads (Megatron) get
  ``<model>_latency.png`` (ms/iteration per parallel case).
- :func:`trend_png` draws a cell's history (median per run, trial min-max band, trials).

Honest axes: throughput, speedup and latency axes start at zero (a 1 % drop does not look
like a cliff), the GPU axis has integer ticks at the measured GPU counts, every median carries
an error bar from the trials' min to max, and the trend's x-axis is the runs' start time with
the run id under each labelled tick.

Both use ``matplotlib.figure.Figure`` with the Agg canvas, so they are safe in threads (the
results web page renders plots on request) and never touch the global pyplot backend.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _figure(w: float = 7.0, h: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | os.PathLike | None) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    data = buf.getvalue()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
    return data


def safe_name(text: str) -> str:
    return _SAFE.sub("_", str(text)).strip("_") or "x"


def _prec_label(cell: Mapping[str, Any]) -> str:
    prec = "fp16" if cell.get("precision") == "amp" else str(cell.get("precision") or "fp32")
    return prec + ("_xla" if cell.get("xla") else "")


def plot_groups(result: Mapping[str, Any]) -> dict[tuple[str, str], dict[int, list[Mapping[str, Any]]]]:
    """Throughput cells grouped as ``{(model, precision): {batch_size: [cells by #GPUs]}}``."""
    groups: dict[tuple[str, str], dict[int, list]] = {}
    for c in result.get("cells", []):
        if c.get("metric_kind", "throughput") != "throughput" or c.get("layout_case"):
            continue
        if c.get("median_speed") is None:
            continue
        key = (str(c.get("model") or (c.get("cell") or {}).get("model") or "model"), _prec_label(c))
        groups.setdefault(key, {}).setdefault(int(c["batch_size_per_device"]), []).append(c)
    for by_bz in groups.values():
        for cells in by_bz.values():
            cells.sort(key=lambda c: (int(c.get("gpus") or 0), int(c.get("nodes") or 0)))
    return groups


def _spread(c: Mapping[str, Any], med: float, scale: float = 1.0) -> tuple[float, float]:
    """(below, above) of the trials' min..max around ``med`` (0 when unknown)."""
    lo, hi = c.get("min"), c.get("max")
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        vals = [float(v) for v in c.get("values") or [] if isinstance(v, (int, float))]
        lo, hi = (min(vals), max(vals)) if vals else (med * scale, med * scale)
    return max(0.0, med - lo * scale), max(0.0, hi * scale - med)


def _gpu_axis(ax, gpus: Iterable[int]) -> None:
    ticks = sorted({int(g) for g in gpus})
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.set_xlim(0, max(ticks) * 1.08 + 0.5)
    ax.set_ylim(bottom=0)


def throughput_figure(model: str, prec: str, by_bz: Mapping[int, list], suite: str = ""):
    fig = _figure()
    ax = fig.add_subplot(111)
    gpus: list[int] = []
    for bz, cells in sorted(by_bz.items()):
        xs = [int(c["gpus"]) for c in cells]
        ys = [float(c["median_speed"]) for c in cells]
        err = list(zip(*[_spread(c, y) for c, y in zip(cells, ys)])) if cells else [[], []]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"bz{bz} (bars: trial min-max)")
        gpus += xs
        for x, y, c in zip(xs, ys, cells):
            ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    _gpu_axis(ax, gpus)
    ax.set_xlabel("number of GPUs")
    ax.set_ylabel("throughput (samples/s, median of trials)")
    ax.set_title(f"{suite + ': ' if suite else ''}{model} {prec} throughput")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def speedup_figure(model: str, prec: str, by_bz: Mapping[int, list], suite: str = ""):
    fig = _figure()
    ax = fig.add_subplot(111)
    max_gpus = 1
    for bz, cells in sorted(by_bz.items()):
        pts = [(int(c["gpus"]), float(c["speedup"])) for c in cells if c.get("speedup") is not None]
        if not pts:
            continue
        max_gpus = max(max_gpus, max(x for x, _ in pts))
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=f"bz{bz}")
        for x, y in pts:
            ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax.plot([1, max_gpus], [1, max_gpus], linestyle="--", color="grey", label="ideal (linear)")
    _gpu_axis(ax, [int(c["gpus"]) for cells in by_bz.values() for c in cells])
    ax.set_xlabel("number of GPUs")
    ax.set_ylabel("speedup vs 1n1g")
    ax.set_title(f"{suite + ': ' if suite else ''}{model} {prec} speedup")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def latency_figure(cells: list[Mapping[str, Any]], suite: str = ""):
    fig = _figure(max(7.0, 0.5 * len(cells) + 2), 4.5)
    ax = fig.add_subplot(111)
    labels = [str(c.get("layout_case") or c.get("topology")) for c in cells]
    vals = [float(c["median_speed"]) for c in cells]
    err = list(zip(*[_spread(c, v) for c, v in zip(cells, vals)])) if cells else None
    ax.bar(range(len(vals)), vals, yerr=err, capsize=3)
    ax.set_ylim(bottom=0)
    ax.set_xticks(range(len(vals)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("latency (ms/iteration, median)")
    ax.set_title(f"{suite + ': ' if suite else ''}latency per case")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def plot_specs(result: Mapping[str, Any]) -> list[str]:
    """File names :func:`render_plots` writes for ``result`` (no drawing)."""
    names = []
    for model, prec in sorted(plot_groups(result)):
        names += [f"{safe_name(model)}_{safe_name(prec)}_throughput.png",
                  f"{safe_name(model)}_{safe_name(prec)}_speedup.png"]
    lat_models = sorted({str(c.get("model") or "model") for c in result.get("cells", [])
                         if c.get("metric_kind") == "latency" and c.get("median_speed") is not None})
    names += [f"{safe_name(m)}_latency.png" for m in lat_models]
    return names


def render_plot(result: Mapping[str, Any], name: str) -> bytes:
    """PNG bytes of one plot named as in :func:`plot_specs` (KeyError if ``result`` has no such plot)."""
    suite = str((result.get("run") or {}).get("suite") or "")
    for (model, prec), by_bz in plot_groups(result).items():
        stem = f"{safe_name(model)}_{safe_name(prec)}"
        if name == f"{stem}_throughput.png":
            return _save(throughput_figure(model, prec, by_bz, suite), None)
        if name == f"{stem}_speedup.png":
            return _save(speedup_figure(model, prec, by_bz, suite), None)
    for c_model in {str(c.get("model") or "model") for c in result.get("cells", [])}:
        if name == f"{safe_name(c_model)}_latency.png":
            cells = [c for c in result.get("cells", []) if c.get("metric_kind") == "latency"
                     and str(c.get("model") or "model") == c_model and c.get("median_speed") is not None]
            if cells:
                return _save(latency_figure(cells, suite), None)
    raise KeyError(f"no plot named {name!r} for this result (known: {', '.join(plot_specs(result)) or 'none'})")


def render_plots(result: Mapping[str, Any], out_dir: str | os.PathLike) -> list[Path]:
    """Write every plot of ``result`` as PNG under ``out_dir``; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in plot_specs(result):
        p = out / name
        p.write_bytes(render_plot(result, name))
        paths.append(p)
    return paths


def _when(p: Mapping[str, Any]):
    import datetime as dt

    text = str(p.get("started_at") or p.get("date") or "")
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def short_run_label(p: Mapping[str, Any]) -> str:
    """A run as a person recognises it on an axis: its date and a short id (the run id's last
    part, e.g. ``2026-01-02`` / ``abc123``), not the full id."""
    day = str(p.get("started_at") or p.get("date") or "")[:10]
    parts = [x for x in str(p.get("run_id") or "").split("-") if x]
    short = parts[-1][:8] if parts else ""
    if len(short) < 4 and len(parts) > 1:  # "...-nightly-7": keep the word before the number
        short = f"{parts[-2][:8]}-{short}"
    return f"{day}\n{short}".strip()


def trend_figure(points: Iterable[Mapping[str, Any]], *, title: str, unit: str, baseline: float | None = None,
                 min_history: int | None = None):
    """History of one cell: median per run with min-max error bars, trials (dots), the history
    median (only from at least ``min_history`` runs, what a verdict needs); x = the runs' start
    time, labelled with date and short run id, legible at the page's width."""
    pts = [p for p in points if p.get("median") is not None]
    fig = _figure(10.0, 5.0)
    ax = fig.add_subplot(111)
    if not pts:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    else:
        times = [_when(p) for p in pts]
        xs = times if all(t is not None for t in times) else list(range(len(pts)))
        meds = [float(p["median"]) for p in pts]
        err = list(zip(*[_spread({"values": p.get("trial_values")}, m) for p, m in zip(pts, meds)]))
        tx = [x for x, p in zip(xs, pts) for _ in (p.get("trial_values") or [])]
        ty = [v for p in pts for v in (p.get("trial_values") or [])]
        ax.scatter(tx, ty, s=16, alpha=0.75, color="tab:orange", edgecolors="black", linewidths=0.3,
                   zorder=3, label="trials")
        ax.errorbar(xs, meds, yerr=err, marker="o", markersize=5, capsize=3, zorder=2,
                    label="median (bars: trial min-max)")
        if baseline is not None and (min_history is None or len(pts) >= min_history):
            ax.axhline(baseline, linestyle="--", color="grey", label="history median")
        elif baseline is not None:
            ax.text(0.99, 0.02, f"no history line: {len(pts)} run(s), a verdict needs {min_history}",
                    ha="right", va="bottom", fontsize=9, color="grey", transform=ax.transAxes)
        step = max(1, -(-len(pts) // 8))  # at most 8 labelled ticks
        ax.set_xticks(xs[::step])
        ax.set_xticklabels([short_run_label(p) for p in pts][::step], rotation=0, ha="center", fontsize=9)
        ax.set_xlabel("run (start date, UTC, and short id)", fontsize=10)
        ax.legend(fontsize=9, loc="lower left")
    ax.set_ylim(bottom=0)
    ax.set_ylabel(unit, fontsize=10)
    ax.tick_params(axis="y", labelsize=9)
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    return fig


def trend_png(points: Iterable[Mapping[str, Any]], *, title: str, unit: str,
              path: str | os.PathLike | None = None, baseline: float | None = None,
              min_history: int | None = None) -> bytes:
    """PNG of :func:`trend_figure`. ``points``: dicts with ``started_at``/``date``, ``run_id``,
    ``median``, ``trial_values`` (oldest first)."""
    return _save(trend_figure(points, title=title, unit=unit, baseline=baseline, min_history=min_history), path)

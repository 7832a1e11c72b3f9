"""Results in the formats other tools read (``dlperf results export --format ...``):

* ``openmetrics``: OpenMetrics text (Prometheus' exposition format, ``# EOF`` at the end), one
  gauge family per figure, every sample labelled ``suite``, ``cell``, ``run_id``,
  ``image_digest``, timestamped with the run's start (``promtool tsdb create-blocks-from
  openmetrics`` backfills it into Prometheus; ``--no-timestamps`` for a Pushgateway or a
  textfile collector, which refuse timestamps);
* ``conbench``: a JSON array of Conbench ``BenchmarkResult`` payloads (POST each to
  ``/api/benchmark-results``): one per run x cell, the valid trials as ``stats.data``
  (``i/s``: samples/s; latency suites in ``s``), the case as ``tags`` (name = suite, cell, topology,
  batch size, precision), the image digest in ``context``, speedup / efficiency / CV in
  ``optional_benchmark_info``; a cell without a valid trial is sent as an ``error``;
* ``bencher``: Bencher Metric Format (BMF) JSON for ``bencher run --adapter json --file``: one
  benchmark per cell (``<cell id>``), measures ``throughput`` (median, lower = min, upper = max
  of the valid trials), ``latency`` (latency suites, ns), ``speedup``, ``scaling-efficiency``,
  ``cv-percent``. BMF has no labels: it holds ONE run (give the run id and digest to ``bencher run``,
  e.g. ``--hash``/``--testbed``).

Per cell: throughput (global samples/s), speedup, scaling efficiency, CV; a figure the result
does not have (no valid trial, a baseline without speedup) is left out, never written as 0.
Pure functions over result JSON documents (``store.read_result``); no network.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any, Iterable, Mapping
from dlperf_tasks import __version__
from dlperf_tasks.core.errors import DlperfError

FORMATS = ("openmetrics", "conbench", "bencher")


def _num(v: Any) -> float | None:
    """A finite number, else None (results store NaN/inf as strings)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _latency(cell: Mapping[str, Any]) -> bool:
    return cell.get("metric_kind") == "latency"


def cell_figures(cell: Mapping[str, Any]) -> dict[str, float]:
    """The exported figures of one result cell (only those it has): ``throughput`` (global
    samples/s), ``latency_ms`` (latency suites), ``speedup``, ``efficiency``, ``cv`` (a ratio),
    ``valid_trials``."""
    out: dict[str, float | None] = {
        "throughput": _num(cell.get("throughput")) if _latency(cell) else _num(cell.get("median_speed")),
        "latency_ms": _num(cell.get("median_speed")) if _latency(cell) else None,
        "speedup": _num(cell.get("speedup")),
        "efficiency": _num(cell.get("scaling_efficiency")),
        "cv": _num(cell.get("cv")),
        "valid_trials": _num(cell.get("n_valid")),
    }
    return {k: v for k, v in out.items() if v is not None}


def _run(result: Mapping[str, Any]) -> Mapping[str, Any]:
    return result.get("run") or {}


def _epoch(text: Any) -> float | None:
    try:
        t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


# ----------------------------------------------------------------------------- OpenMetrics
#: family -> (figure, HELP text, scale)
_FAMILIES = (
    ("dlperf_throughput_samples_per_second", "throughput", "Median global samples/s of the cell's valid trials", 1.0),
    ("dlperf_latency_seconds", "latency_ms", "Median iteration latency of the cell's valid trials", 1e-3),
    ("dlperf_speedup_ratio", "speedup", "Throughput over the 1-GPU cell of the same model, precision and batch", 1.0),
    ("dlperf_scaling_efficiency_ratio", "efficiency", "Speedup over the GPU count", 1.0),
    ("dlperf_trial_cv_ratio", "cv", "Coefficient of variation of the valid trials (stdev / mean)", 1.0),
    ("dlperf_valid_trials", "valid_trials", "Valid trials behind the figures", 1.0),
)


def _label(v: Any) -> str:
    """A label value, escaped as OpenMetrics says; other control characters (a hostile store's
    cell id must not drive the terminal the export is printed on) become ``?``."""
    text = str("" if v is None else v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "".join("?" if ord(c) < 32 or ord(c) == 127 else c for c in text)


def _value(v: float) -> str:
    return repr(float(v))


def to_openmetrics(results: Iterable[Mapping[str, Any]], timestamps: bool = True) -> str:
    """OpenMetrics text of every cell of ``results`` (grouped by family, as the format requires)."""
    rows = []
    for res in results:
        run = _run(res)
        ts = _epoch(run.get("started_at")) if timestamps else None
        for cell in res.get("cells") or []:
            labels = {"suite": run.get("suite") or cell.get("suite"), "cell": cell.get("cell_id"),
                      "run_id": run.get("run_id"), "image_digest": run.get("image_digest")}
            rows.append((",".join(f'{k}="{_label(v)}"' for k, v in labels.items()), ts, cell_figures(cell)))
    lines = []
    for family, figure, help_text, scale in _FAMILIES:
        samples = [(lab, ts, figs[figure]) for lab, ts, figs in rows if figure in figs]
        if not samples:
            continue
        lines += [f"# TYPE {family} gauge", f"# HELP {family} {help_text}."]
        lines += [f"{family}{{{lab}}} {_value(v * scale)}" + (f" {ts:.3f}" if ts is not None else "")
                  for lab, ts, v in samples]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- Conbench
def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _conbench_one(result: Mapping[str, Any], cell: Mapping[str, Any], dlperf_version: str) -> dict[str, Any]:
    run = _run(result)
    figs = cell_figures(cell)
    latency = _latency(cell)
    values = [v for v in (_num(x) for x in cell.get("values") or []) if v is not None]
    nodes = [n.get("name") if isinstance(n, Mapping) else str(n) for n in (run.get("cluster") or {}).get("nodes") or []]
    doc: dict[str, Any] = {
        "run_id": str(run.get("run_id")),
        "batch_id": str(run.get("run_id")),
        "timestamp": str(run.get("started_at") or run.get("finished_at") or _now()),
        "run_reason": "dlperf",
        "tags": {"name": str(run.get("suite") or cell.get("suite")), "cell": str(cell.get("cell_id")),
                 "topology": str(cell.get("topology")), "batch_size_per_device": str(cell.get("batch_size_per_device")),
                 "precision": str(cell.get("precision"))},
        "context": {"image": run.get("image"), "image_digest": run.get("image_digest"),
                    "framework": run.get("framework")},
        "info": {"dlperf_version": dlperf_version, "upstream_commit": run.get("upstream_commit")},
        "cluster_info": {"name": str(run.get("cluster_name") or "dlperf"), "info": {"nodes": sorted(map(str, nodes))},
                         "optional_info": {}},
        "optional_benchmark_info": {k: figs[k] for k in ("speedup", "efficiency", "throughput") if k in figs}
        | ({"cv_pct": round(figs["cv"] * 100, 2)} if "cv" in figs else {}),
    }
    if not values:
        doc["error"] = {"reason": f"no valid trial ({int(cell.get('n_invalid') or 0)} invalid)"}
        return doc
    data = [v / 1000.0 for v in values] if latency else values  # Conbench units: "s" (less is better), "i/s"
    doc["stats"] = {"data": data, "unit": "s" if latency else "i/s", "iterations": len(data),
                    "times": [], "time_unit": "s"}
    return doc


def to_conbench(results: Iterable[Mapping[str, Any]]) -> str:
    docs = [_conbench_one(res, cell, __version__) for res in results for cell in res.get("cells") or []]
    return json.dumps(docs, indent=2) + "\n"


# ----------------------------------------------------------------------------- Bencher (BMF)
def to_bencher(result: Mapping[str, Any]) -> str:
    """BMF JSON of one run: ``{"<cell id>": {"throughput": {"value", "lower_value", "upper_value"}, ...}}``."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for cell in result.get("cells") or []:
        figs = cell_figures(cell)
        measures: dict[str, dict[str, float]] = {}
        lo, hi = _num(cell.get("min")), _num(cell.get("max"))
        if "throughput" in figs:
            measures["throughput"] = {"value": figs["throughput"]}
            if not _latency(cell) and lo is not None and hi is not None:
                measures["throughput"] |= {"lower_value": lo, "upper_value": hi}
        if "latency_ms" in figs:  # Bencher's built-in latency measure is in nanoseconds
            measures["latency"] = {"value": figs["latency_ms"] * 1e6}
            if lo is not None and hi is not None:
                measures["latency"] |= {"lower_value": lo * 1e6, "upper_value": hi * 1e6}
        for fig, slug, scale in (("speedup", "speedup", 1.0), ("efficiency", "scaling-efficiency", 1.0),
                                 ("cv", "cv-percent", 100.0)):
            if fig in figs:
                measures[slug] = {"value": round(figs[fig] * scale, 6)}
        if measures:
            out[str(cell.get("cell_id"))] = measures
    return json.dumps(out, indent=2) + "\n"


def render(results: list[Mapping[str, Any]], fmt: str, timestamps: bool = True) -> str:
    """``results`` (result JSON documents) in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "openmetrics":
        return to_openmetrics(results, timestamps=timestamps)
    if fmt == "conbench":
        return to_conbench(results)
    if fmt == "bencher":
        if len(results) != 1:
            raise DlperfError(f"--format bencher holds one run (BMF has no run label); got {len(results)}: "
                              "name one RUN")
        return to_bencher(results[0])
    raise DlperfError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")

"""Results in the formats other tools read (``dlperf results export --format ...``):

* ``openmetrics``: OpenMetrics text (Prometheus' exposition format, ``# EOF`` at the end), one
  gauge family per figure, each series labelled by what identifies the cell and the machine
  (``suite``, ``cell``, ``precision``, ``topology``, ``cluster``, ``image_digest`` only when known;
  never the run id, which would make every run its own series, against Prometheus' cardinality
  guidance); the run is the sample's timestamp (its start: ``promtool tsdb create-blocks-from
  openmetrics`` backfills it) and ``dlperf_run_info{run_id=...}``; ``--no-timestamps`` (for a
  Pushgateway or a textfile collector, which refuse timestamps) keeps each series' latest run;
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
from dlperf_tasks.report.flags import row_flags

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
    ``valid_trials``; LLM cells also ``tokens_per_sec_per_gpu``, ``tflops_per_gpu`` (full attention
    convention), ``mfu_pct``, ``step_time_ms``, ``energy_j_per_token`` (report/llm_summary.py)."""
    out: dict[str, float | None] = {
        "throughput": _num(cell.get("throughput")) if _latency(cell) else _num(cell.get("median_speed")),
        "latency_ms": _num(cell.get("median_speed")) if _latency(cell) else None,
        "speedup": _num(cell.get("speedup")),
        "efficiency": _num(cell.get("scaling_efficiency")),
        "cv": _num(cell.get("cv")),
        "valid_trials": _num(cell.get("n_valid")),
    }
    figs = (cell.get("llm") or {}).get("figures") or {}
    for name in ("tokens_per_sec_per_gpu", "tflops_per_gpu", "mfu_pct", "step_time_ms", "energy_j_per_token"):
        out[name] = _num((figs.get(name) or {}).get("median"))
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
    # LLM suites (report/llm_summary.py): the figures LLM teams quote, per GPU
    ("dlperf_tokens_per_second_per_gpu", "tokens_per_sec_per_gpu", "Median tokens/s per GPU of the cell's valid "
     "trials (global batch x sequence / step time / GPUs)", 1.0),
    ("dlperf_model_tflops_per_gpu", "tflops_per_gpu", "Median model TFLOP/s per GPU, attention not discounted for "
     "the causal mask (torchtitan's and NeMo 2's convention)", 1.0),
    ("dlperf_mfu_ratio", "mfu_pct", "Model FLOPs utilisation: model TFLOP/s per GPU over the GPU model's dense "
     "peak at the compute precision", 0.01),
)


def clean_text(v: Any) -> str:
    """``v`` as text a terminal or a parser takes as it is, one to one: a backslash doubled, a
    control character (C0 but newline, DEL, C1) written ``\\xNN`` and a lone surrogate ``\\uDNNN``,
    so two different values never come out the same (two cells never collapse into one series)."""
    out = []
    for ch in str("" if v is None else v):
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif (o < 32 and ch != "\n") or 127 <= o < 160:
            out.append(f"\\x{o:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def _label(v: Any) -> str:
    """A label value (:func:`clean_text`), escaped as OpenMetrics says."""
    return clean_text(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(v: float) -> str:
    return repr(float(v))


def _cluster(run: Mapping[str, Any]) -> str:
    """The machine a run measured: the cluster's name, else its node names (sorted)."""
    cluster = run.get("cluster") if isinstance(run.get("cluster"), Mapping) else {}
    name = run.get("cluster_name") or cluster.get("name")
    if name:
        return str(name)
    nodes = [n.get("name") if isinstance(n, Mapping) else n for n in cluster.get("nodes") or []]
    return ",".join(sorted(str(n) for n in nodes if n)) or "unknown"


def _series_labels(run: Mapping[str, Any], cell: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies a cell's series across runs (the run itself is the sample's timestamp and
    ``dlperf_run_info``): never the run id, the image digest only when known."""
    labels = {"suite": run.get("suite") or cell.get("suite"), "cell": cell.get("cell_id"),
              "precision": cell.get("precision"), "topology": cell.get("topology"), "cluster": _cluster(run)}
    if run.get("image_digest"):
        labels["image_digest"] = run["image_digest"]
    return labels


def _labelset(labels: Mapping[str, Any]) -> str:
    return ",".join(f'{k}="{_label(v)}"' for k, v in labels.items() if v is not None)


def _info_family(results: list[Mapping[str, Any]], timestamps: bool) -> list[str]:
    """``dlperf_run_info``: one sample per run, labelled with its id, joining a point to its run."""
    lines = []
    for res in results:
        run = _run(res)
        ts = _epoch(run.get("started_at")) if timestamps else None
        labels = {"suite": run.get("suite"), "cluster": _cluster(run), "run_id": run.get("run_id"),
                  "image_digest": run.get("image_digest") or None, "upstream_commit": run.get("upstream_commit")}
        lines.append(f"dlperf_run_info{{{_labelset(labels)}}} 1" + (f" {ts:.3f}" if ts is not None else ""))
    if not lines:
        return []
    return ["# TYPE dlperf_run info", "# HELP dlperf_run Which run a point belongs to."] + lines


def to_openmetrics(results: Iterable[Mapping[str, Any]], timestamps: bool = True) -> str:
    """OpenMetrics text of every cell of ``results`` (grouped by family, each series' points in
    time order, as the format requires). Without timestamps only each series' latest run is kept
    (a Pushgateway or textfile collector holds one value per series)."""
    results = list(results)
    series: dict[str, dict[float | None, dict[str, float]]] = {}
    for res in results:
        run = _run(res)
        ts = _epoch(run.get("started_at")) if timestamps else None
        seen = set()
        for cell in res.get("cells") or []:
            lab = _labelset(_series_labels(run, cell))
            if lab in seen:
                raise DlperfError(f"openmetrics: run {clean_text(run.get('run_id'))!r} holds cell "
                                  f"{clean_text(cell.get('cell_id'))!r} twice; export refused")
            seen.add(lab)
            points = series.setdefault(lab, {})
            if ts is None:
                points.clear()
            points[ts] = cell_figures(cell)  # a later run with the same start replaces the earlier
    lines = []
    for family, figure, help_text, scale in _FAMILIES:
        samples = [(lab, ts, figs[figure]) for lab, points in series.items()
                   for ts, figs in sorted(points.items(), key=lambda p: p[0] or 0.0) if figure in figs]
        if not samples:
            continue
        lines += [f"# TYPE {family} gauge", f"# HELP {family} {help_text}."]
        lines += [f"{family}{{{lab}}} {_value(v * scale)}" + (f" {ts:.3f}" if ts is not None else "")
                  for lab, ts, v in samples]
    lines += _info_family(results, timestamps)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- JSON formats
def _scaled(v: Any, scale: float) -> float | None:
    """``v * scale`` when both it and the product are finite (1e306 ms in ns is not), else None."""
    x = _num(v)
    if x is None:
        return None
    x *= scale
    return x if math.isfinite(x) else None


def _note(notes: list[str] | None, text: str) -> None:
    if notes is not None:
        notes.append(text)


def _no_surrogates(doc: Any) -> Any:
    """``doc`` with each lone surrogate in its strings written ``\\uDNNN`` (strict parsers such as
    serde_json, which Bencher uses, refuse a lone surrogate escape)."""
    if isinstance(doc, str):
        return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in doc)
    if isinstance(doc, Mapping):
        return {_no_surrogates(k): _no_surrogates(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_no_surrogates(v) for v in doc]
    return doc


def _strict_json(doc: Any, fmt: str) -> str:
    """Strict JSON (no NaN/Infinity, ASCII only: no control character or lone surrogate raw)."""
    try:
        return json.dumps(_no_surrogates(doc), indent=2, allow_nan=False) + "\n"
    except ValueError as e:
        raise DlperfError(f"{fmt}: a figure is not a finite number ({e}); export refused") from None


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
        | ({"cv_pct": round(cv_pct, 2)} if (cv_pct := _scaled(figs.get("cv"), 100.0)) is not None else {})
        | ({"flags": flags} if (flags := row_flags(cell)) else {}),
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
    return _strict_json(docs, "conbench")


# ----------------------------------------------------------------------------- Bencher (BMF)
#: an LLM cell's figures as Bencher measures (figure, measure slug, scale)
LLM_MEASURES = (("tokens_per_sec_per_gpu", "tokens-per-second-per-gpu", 1.0), ("tflops_per_gpu", "tflops-per-gpu", 1.0),
                ("mfu_pct", "mfu-percent", 1.0))


def to_bencher(result: Mapping[str, Any], notes: list[str] | None = None) -> str:
    """BMF JSON of one run: ``{"<cell id>": {"throughput": {"value", "lower_value", "upper_value"}, ...}}``
    (an LLM cell also :data:`LLM_MEASURES`)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for cell in result.get("cells") or []:
        figs = cell_figures(cell)
        measures: dict[str, dict[str, float]] = {}
        lo, hi = _num(cell.get("min")), _num(cell.get("max"))
        if "throughput" in figs:
            measures["throughput"] = {"value": figs["throughput"]}
            if not _latency(cell) and lo is not None and hi is not None:
                measures["throughput"] |= {"lower_value": lo, "upper_value": hi}
        ns = _scaled(figs.get("latency_ms"), 1e6)  # Bencher's built-in latency measure is in nanoseconds
        if ns is not None:
            measures["latency"] = {"value": ns}
            lo_ns, hi_ns = _scaled(lo, 1e6), _scaled(hi, 1e6)
            if lo_ns is not None and hi_ns is not None:
                measures["latency"] |= {"lower_value": lo_ns, "upper_value": hi_ns}
        elif "latency_ms" in figs:
            _note(notes, f"bencher: cell {clean_text(cell.get('cell_id'))!r}: latency beyond a double in ns; left out")
        for fig, slug, scale in (("speedup", "speedup", 1.0), ("efficiency", "scaling-efficiency", 1.0),
                                 ("cv", "cv-percent", 100.0), *LLM_MEASURES):
            v = _scaled(figs.get(fig), scale)
            if v is not None:
                measures[slug] = {"value": round(v, 6)}
            elif fig in figs:
                _note(notes, f"bencher: cell {clean_text(cell.get('cell_id'))!r}: {slug} beyond a double; left out")
        if measures:
            out[str(cell.get("cell_id"))] = measures
    return _strict_json(out, "bencher")


def render(results: list[Mapping[str, Any]], fmt: str, timestamps: bool = True,
           notes: list[str] | None = None) -> str:
    """``results`` (result JSON documents) in ``fmt`` (one of :data:`FORMATS`); what had to be left
    out (a figure beyond a double once scaled) is appended to ``notes``."""
    if fmt == "openmetrics":
        return to_openmetrics(results, timestamps=timestamps)
    if fmt == "conbench":
        return to_conbench(results)
    if fmt == "bencher":
        if len(results) != 1:
            raise DlperfError(f"--format bencher holds one run (BMF has no run label); got {len(results)}: "
                              "name one RUN")
        return to_bencher(results[0], notes)
    raise DlperfError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")

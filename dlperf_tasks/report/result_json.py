"""The result JSON: one file per run, read by the store, history, Airflow and the UI plugin.

Format (``schema_version`` 1; documented in docs/TEAM_NOTES.md "Result JSON")::

    {"schema_version": 1,
     "run": {run metadata: run_id, suite, framework, dag_run_id, started_at, finished_at,
             image, image_digest, upstream_commit, cluster, env, window, source ...},
     "cells": [{cell_id, cell, model, topology, nodes, gpus, batch_size_per_device, precision,
                xla, layout_case, layout_group, metric_kind, unit, median_speed, average_speed,
                min, max, stdev, cv, n_valid, n_invalid, values, speedup, speedup_state,
                scaling_efficiency, latency_ms, memory_mib, throughput,
                trials: [{index, trial_id, trial_key, status, valid, reason, value, metric,
                          node_names, exit_codes, samples, log, logs, started_at, finished_at}]}],
     "dlperf": {"bz32": {"bert-base": {"1n1g": {"average_speed", "batch_size_per_device",
                                                 "median_speed", "speedup"}}}}}

``samples`` are ``[iteration, value]`` or ``[iteration, value, rank]`` (rank when the log
names it); non-finite raw values are written as the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` so the file stays strict JSON.

This module owns what a trial and a cell become in the document (:func:`trial_to_dict`,
:func:`cell_to_dict`, :func:`build_result`; the run dir's trial record is :func:`trial_record`);
:mod:`dlperf_tasks.report.result_stream` owns how the document is laid out in bytes
(``write_document``: :func:`dumps`, :func:`write_result` and ``dlperf extract`` all go through it).
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from collections.abc import Callable, Iterable
from typing import Any

from dlperf_tasks.report.llm_summary import cell_llm
from dlperf_tasks.report.probe_summary import annotate, cell_interconnect
from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.core.model import (Cell, MetricKind, Sample, Trial, TrialMetric, TrialResult, TrialStatus,
                                     trial_key)
from dlperf_tasks.measure.extract import dlperf_model_key
from dlperf_tasks.measure.stats import CellStats, dlperf_dict, dlperf_round
from dlperf_tasks.report.result_stream import json_number, sample_row, write_document, write_result_file

SCHEMA_VERSION = 1


class ResultFormatError(DlperfError):
    """A result JSON is unreadable, of an unknown schema_version, or malformed."""


RUN_DEFAULTS: dict[str, Any] = {
    "run_id": None,
    "suite": None,
    "framework": None,
    "dag_run_id": None,
    "started_at": None,
    "finished_at": None,
    "image": None,
    "image_digest": None,
    "upstream_commit": None,
    "cluster": {"nodes": []},
    "env": {},
}

_NUM = {"type": ["number", "null"]}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema_version", "run", "cells", "dlperf"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "run": {"type": "object", "required": ["run_id", "suite"]},
        "dlperf": {"type": "object"},
        "cells": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["cell_id", "cell", "topology", "batch_size_per_device", "precision", "metric_kind",
                             "median_speed", "average_speed", "speedup", "speedup_state", "n_valid",
                             "n_invalid", "trials"],
                "properties": {
                    "cell_id": {"type": "string"},
                    "metric_kind": {"enum": [k.value for k in MetricKind]},
                    "median_speed": _NUM, "average_speed": _NUM, "speedup": _NUM,
                    "n_valid": {"type": "integer", "minimum": 0},
                    "n_invalid": {"type": "integer", "minimum": 0},
                    "trials": {
                        "type": "array",
                        "items": {"type": "object", "required": ["index", "trial_id", "status", "reason", "value"],
                                  "properties": {"index": {"type": "integer"}, "status": {"type": "string"},
                                                 "value": _NUM, "samples": {"type": "array"}}},
                    },
                },
            },
        },
    },
}


def _finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _trial_value(r: TrialResult) -> float | None:
    """A trial's ``value``: its metric rounded as DLPerf printed it (None: no metric or not finite)."""
    return dlperf_round(_finite_or_none(r.metric.value)) if r.metric else None


def _trial_log(r: TrialResult) -> str | None:
    """A trial's ``log``: its first log file."""
    return r.log_paths[0] if r.log_paths else None


def trial_to_dict(r: TrialResult, samples_of: Callable[[TrialResult], Any] | None = None) -> dict[str, Any]:
    """One trial with its raw numbers (kept for invalid trials too). ``samples_of``: what to put
    in ``samples`` instead of the rows (report/result_stream.py: a spool placeholder)."""
    m = r.metric
    if samples_of is not None:
        samples = samples_of(r)
    else:
        samples = [sample_row(s.iteration, s.value, s.rank) for s in r.samples]
    trial_id = r.trial.id
    return {
        "index": r.trial.index,
        "trial_id": trial_id,
        "trial_key": trial_key(trial_id),
        "status": r.status.value,
        "valid": r.valid,
        "reason": r.reason,
        "value": _trial_value(r),
        "metric": None if m is None else {
            "kind": MetricKind(m.kind).value, "value": json_number(m.value),
            "memory_mib": json_number(m.memory_mib), "throughput": json_number(m.throughput),
            # what memory_mib is and where it came from (never nvidia-smi's figure unless it says so),
            # and the parser's details: framework's own figure, disagreement, flags, samples per step
            "memory_source": getattr(m, "memory_source", None),
            "details": {k: (json_number(v) if isinstance(v, float) else v) for k, v in (getattr(m, "details", None) or {}).items()},
        },
        "node_names": list(r.nodes),
        "exit_codes": dict(r.exit_codes),
        "samples": samples,
        "log": _trial_log(r),
        "logs": list(r.log_paths),
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        **({"node_env": {n: dict(e) for n, e in r.node_env.items()}} if r.node_env else {}),
        **({"interconnect": dict(r.interconnect)} if r.interconnect else {}),
    }


def _num_back(v: float | str | None) -> float | None:
    if isinstance(v, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v]
    return None if v is None else float(v)


#: how records written before status SKIPPED existed (2026-11) said "not needed": NOT_RUN with this reason
_LEGACY_SKIP = "not needed (adaptive stop: "


def _status(d: Mapping[str, Any]) -> tuple[TrialStatus, str]:
    """A trial's status and reason; an old adaptive "not needed" record (NOT_RUN, reason
    ``not needed (adaptive stop: WHY)``) reads as SKIPPED with reason WHY."""
    status, reason = TrialStatus(d["status"]), str(d.get("reason", ""))
    if status == TrialStatus.NOT_RUN and reason.startswith(_LEGACY_SKIP) and reason.endswith(")"):
        return TrialStatus.SKIPPED, reason[len(_LEGACY_SKIP):-1]
    return status, reason


def trial_from_dict(cell: Cell, d: Mapping[str, Any]) -> TrialResult:
    """Rebuild a TrialResult from its result-JSON form (inverse of :func:`trial_to_dict`)."""
    m = d.get("metric")
    metric = None
    if m is not None:
        metric = TrialMetric(value=_num_back(m.get("value")), kind=MetricKind(m.get("kind", "throughput")),
                             memory_mib=_num_back(m.get("memory_mib")), throughput=_num_back(m.get("throughput")),
                             memory_source=m.get("memory_source"), details=dict(m.get("details") or {}))
    unit = "ms/iter" if metric is not None and metric.kind == MetricKind.LATENCY else "samples/s"
    samples = [Sample(iteration=int(row[0]), value=_num_back(row[1]), unit=unit,
                      rank=int(row[2]) if len(row) > 2 and row[2] is not None else None)
               for row in d.get("samples", [])]
    status, reason = _status(d)
    return TrialResult(
        trial=Trial(cell, int(d["index"])), status=status, reason=reason,
        metric=metric, samples=samples, log_paths=list(d.get("logs") or ([d["log"]] if d.get("log") else [])),
        nodes=list(d.get("node_names", [])), exit_codes=dict(d.get("exit_codes", {})),
        started_at=d.get("started_at"), finished_at=d.get("finished_at"),
        node_env={str(n): dict(e) for n, e in (d.get("node_env") or {}).items() if isinstance(e, Mapping)},
        interconnect=dict(d["interconnect"]) if isinstance(d.get("interconnect"), Mapping) else None)


TRIAL_RECORD_VERSION = 1


def trial_record(r: TrialResult) -> dict[str, Any]:
    """The ONE on-disk / in-transit form of a finished trial (run dir ``trials/<key>.json``, the
    per-trial task's return value): ``{"record": 1, "cell": Cell.to_dict(), "trial": trial_to_dict(r)}``."""
    return {"record": TRIAL_RECORD_VERSION, "cell": r.trial.cell.to_dict(), "trial": trial_to_dict(r)}


def trial_from_record(doc: Mapping[str, Any]) -> TrialResult:
    """Inverse of :func:`trial_record`; raises ResultFormatError on anything else."""
    try:
        if doc.get("record") != TRIAL_RECORD_VERSION:
            raise ValueError(f"record version {doc.get('record')!r}")
        return trial_from_dict(Cell.from_dict(doc["cell"]), doc["trial"])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ResultFormatError(f"not a trial record: {type(exc).__name__}: {exc}") from None


def trials_from_result(result: Mapping[str, Any]) -> list[TrialResult]:
    """Every trial of a result document as TrialResults, e.g. to merge runs and ``aggregate`` again.
    (Sample units are not stored; they come back as samples/s or ms/iter by metric kind.)"""
    out = []
    for c in result.get("cells", []):
        cell = Cell.from_dict(c["cell"])
        out += [trial_from_dict(cell, t) for t in c.get("trials", [])]
    return out


def _unit(st: CellStats) -> str:
    """The cell's speed unit: the one its valid trials' metrics name (an LLM cell: the job's
    ``tokens/s``), else the metric kind's."""
    units = {(t.metric.details or {}).get("unit") for t in st.trials if t.valid and t.metric is not None}
    return units.pop() if len(units) == 1 and None not in units else st.unit


def cell_to_dict(st: CellStats, samples_of: Callable[[TrialResult], Any] | None = None) -> dict[str, Any]:
    c = st.cell
    return {
        "cell_id": c.id,
        "cell": c.to_dict(),
        "suite": c.suite,
        "model": c.model,
        "topology": c.topology.name,
        "nodes": c.topology.nodes,
        "gpus": c.topology.world_size,
        "gpus_per_node": c.topology.gpus_per_node,
        "batch_size_per_device": c.batch_size_per_device,
        "precision": c.precision,
        "xla": c.xla,
        "layout_case": c.layout.case if c.layout else None,
        "layout_group": c.layout.group if c.layout else None,
        "metric_kind": st.metric_kind.value,
        "unit": _unit(st),
        "median_speed": st.median,
        "average_speed": st.average,
        "min": st.min,
        "max": st.max,
        "stdev": st.stdev,
        "cv": st.cv,
        "n_valid": st.n_valid,
        "n_invalid": st.n_invalid,
        "values": list(st.values),
        "speedup": st.speedup,
        "speedup_state": st.speedup_state,
        "scaling_efficiency": st.scaling_efficiency,
        "latency_ms": st.latency_ms,
        "memory_mib": st.memory_mib,
        "throughput": st.throughput,
        "trials": [trial_to_dict(t, samples_of) for t in st.trials],
        **({"llm": llm} if (llm := cell_llm(st.trials)) is not None else {}),
        **({"interconnect": probe} if (probe := cell_interconnect(st.trials)) is not None else {}),
    }


def _latency_dict(cells: Iterable[CellStats]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for st in cells:
        if st.metric_kind != MetricKind.LATENCY or st.median is None:
            continue
        case = st.cell.layout.case if st.cell.layout else st.cell.topology.name
        out[case] = {"group": st.cell.layout.group if st.cell.layout else None,
                     "latency_ms": st.median, "memory_mib": st.memory_mib, "topology": st.cell.topology.name}
    return out


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def build_result(cells: list[CellStats], run: Mapping[str, Any] | None = None, *,
                 dlperf_model: str | None = None,
                 samples_of: Callable[[TrialResult], Any] | None = None) -> dict[str, Any]:
    """Assemble the result document. ``run`` overrides :data:`RUN_DEFAULTS` (never put secrets
    or IP addresses in it). ``dlperf_model`` is the model key of the seeds' dict (e.g. ``bert``).
    ``samples_of(trial)``: each trial's ``samples`` value instead of its rows (``dlperf extract``:
    a spool placeholder, or nothing when the output shows no samples)."""
    run_meta = dict(RUN_DEFAULTS)
    run_meta.update(run or {})
    if run_meta.get("suite") is None and cells:
        run_meta["suite"] = cells[0].cell.suite
    if run_meta.get("framework") is None and cells:
        run_meta["framework"] = cells[0].cell.framework
    dl = dlperf_dict(cells, dlperf_model)
    lat = _latency_dict(cells)
    if lat:
        dl["latency"] = lat
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run": run_meta,
        "cells": [cell_to_dict(st, samples_of) for st in cells],
        "dlperf": dl,
    }
    annotate(doc)  # a slow multi-node cell: interconnect, straggler rank or compute side
    return doc


def dumps(result: Mapping[str, Any]) -> str:
    """Serialise: indented, but each trial's sample list on one line (they can be long);
    :func:`dlperf_tasks.report.result_stream.write_document`'s layout."""
    buf = io.BytesIO()
    write_document(result, None, buf)
    return buf.getvalue().decode("utf-8")


def write_result(result: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Validate and write atomically (temp file + rename). Returns the path."""
    validate(result, where=str(path))
    return write_result_file(result, None, path)


def validate(result: Mapping[str, Any], where: str = "result") -> None:
    """Raise :class:`ResultFormatError` naming the first problem."""
    if not isinstance(result, Mapping):
        raise ResultFormatError(f"{where}: top level must be a JSON object, got {type(result).__name__}")
    version = result.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultFormatError(
            f"{where}: unsupported schema_version {version!r} (this dlperf reads schema_version {SCHEMA_VERSION})")
    import jsonschema  # a large library: imported by the commands that check a result file

    try:
        jsonschema.validate(result, SCHEMA)
    except jsonschema.ValidationError as exc:
        loc = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ResultFormatError(f"{where}: invalid result at {loc}: {exc.message}") from None


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a result JSON (checks ``schema_version``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise ResultFormatError(f"result file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ResultFormatError(f"{path}: not valid JSON: {exc}") from None
    validate(doc, where=str(path))
    return doc


def extract_result(res, run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The result JSON document of an :class:`dlperf_tasks.measure.extract.ExtractResult`
    (``run``: extra run metadata)."""
    refs = res.sample_refs
    samples_of = None if res.samples_kept else (lambda t: refs.get(id(t), []))
    return build_result(res.cells, res.run_metadata(**dict(run or {})), dlperf_model=dlperf_model_key(res.suite),
                        samples_of=samples_of)

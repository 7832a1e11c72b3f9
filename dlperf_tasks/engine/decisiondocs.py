"""The documents of the engine's decisions (:mod:`dlperf_tasks.engine.decisions`): ``adaptive.json``
and ``node-health.json`` in the run dir, their report.md sections, ``run.adaptive`` /
``run.node_health`` in result.json, and the lines ``dlperf results show`` and the web page print
about them. Both drivers (``dlperf sweep``, the DAG's aggregate step) write them here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from dlperf_tasks.core.model import TrialResult
from dlperf_tasks.policy import adaptive as ad
from dlperf_tasks.policy import nodehealth as nh

ADAPTIVE_FILE = "adaptive.json"
HEALTH_FILE = "node-health.json"


def _result_row(r: TrialResult) -> dict[str, Any]:
    return {"index": r.trial.index, "trial_id": r.trial.id, "status": r.status.value,
            "value": r.metric.value if r.valid and r.metric is not None else None, "node_names": list(r.nodes),
            "exit_codes": dict(r.exit_codes), "reason": r.reason}


def results_doc(results: Iterable[TrialResult]) -> dict[str, Any]:
    """The part of a result JSON node health reads (cells -> trials), from TrialResults."""
    cells: dict[str, dict[str, Any]] = {}
    for r in results:
        c = cells.setdefault(r.trial.cell.id, {"cell_id": r.trial.cell.id, "trials": [], "metric_kind": "throughput"})
        if r.metric is not None:
            c["metric_kind"] = str(getattr(r.metric.kind, "value", r.metric.kind))
        c["trials"].append(_result_row(r))
    return {"cells": list(cells.values())}


def write_docs(run_dir: str | os.PathLike, result: dict[str, Any] | None, adaptive_doc: Mapping[str, Any] | None,
               health_doc: Mapping[str, Any]) -> None:
    """``adaptive.json`` (when given) and ``node-health.json`` in the run dir, their report.md
    sections, and ``run.adaptive`` / ``run.node_health`` in ``result`` (the document result.json
    is then written from, :func:`dlperf_tasks.engine.outputs.write_outputs`)."""
    root = Path(run_dir)
    if result is not None:
        result.setdefault("run", {}).update(
            {"node_health": dict(health_doc), **({"adaptive": dict(adaptive_doc)} if adaptive_doc else {})})
    sections = []
    if adaptive_doc:
        _write_json(root / ADAPTIVE_FILE, adaptive_doc)
        sections.append((ad.REPORT_HEADING, ad.render_markdown(adaptive_doc)))
    _write_json(root / HEALTH_FILE, health_doc)
    sections.append((nh.REPORT_HEADING, nh.render_markdown(health_doc)))
    md = root / "report.md"
    if md.is_file():
        text = md.read_text()
        for heading, body in sections:
            text = replace_section(text, heading, body)
        md.write_text(text)


def replace_section(text: str, heading: str, body: str) -> str:
    """``text`` with the ``heading`` section (up to the next ``## ``) replaced by ``body``, or appended."""
    head, sep, tail = text.partition(heading)
    if sep:
        nxt = tail.find("\n## ")
        text = head + (tail[nxt + 1:] if nxt >= 0 else "")
    return text.rstrip("\n") + "\n\n" + body


def _write_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def summary_lines(run: Mapping[str, Any]) -> list[str]:
    """What ``dlperf results show`` prints about a run's decisions (result.json ``run`` section)."""
    lines = []
    a = run.get("adaptive")
    if a:
        lines.append(f"adaptive trials: {a.get('trials_used')} of {a.get('trials_max')} "
                     f"({100 * float(a.get('saved_fraction') or 0):.1f} % saved)")
        for c in a.get("cells", []):
            lines.append(f"  {c['cell_id']}: {c['trials_used']}/{c['max_trials']} trials, {c['stopped']}: {c['reason']}")
    h = run.get("node_health") or {}
    for n in h.get("nodes", []):
        if n.get("suspect"):
            q = " (quarantined)" if n["node"] in h.get("quarantined", []) else ""
            lines.append(f"suspect node {n['node']}{q}: " + " / ".join(n.get("evidence", [])))
    return lines

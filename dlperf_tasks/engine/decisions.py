"""The engine's decisions during a sweep: adaptive trial count and node quarantine.

One :class:`SweepDecisions` per batch of trials; the scheduling step asks it

* :meth:`initial` - the trials to queue now (adaptive on: each cell's first ``min_trials``;
  the rest wait until the cell's results say they are needed);
* :meth:`excluded` - nodes the service keeps out (``state/quarantine.json`` in the run store,
  cleared with ``dlperf cluster clear NODE``), to be marked down before the first trial;
* :meth:`finished` after every trial - ``(trials to queue next, nodes to take out now)``;
* :meth:`summary` / :meth:`write` at the end - ``adaptive.json`` and ``node-health.json`` in
  the run dir, their report.md sections, and the ``run.adaptive`` / ``run.node_health``
  entries the engine puts into result.json.

Pure logic except the quarantine state and the two JSON files (no SSH, no Airflow).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from dlperf_tasks.policy import adaptive as ad
from dlperf_tasks.policy import nodehealth as nh
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.core.model import Trial, TrialResult
from dlperf_tasks.measure import stragglers

ADAPTIVE_FILE = "adaptive.json"
HEALTH_FILE = "node-health.json"


def _result_row(r: TrialResult) -> dict[str, Any]:
    return {"index": r.trial.index, "trial_id": r.trial.id, "status": r.status.value,
            "value": r.metric.value if r.valid else None, "node_names": list(r.nodes),
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


class SweepDecisions:
    def __init__(self, trials: Sequence[Trial], *, adaptive: ad.AdaptivePolicy | None = None,
                 health: nh.HealthConfig | None = None, work_dir: str | os.PathLike | Quarantine | None = None,
                 run_id: str = "", nodes: Iterable[str] = (),
                 straggler_report: Callable[[TrialResult], Mapping[str, Any] | None] | None = None,
                 telemetry: Callable[[], Mapping[str, Any]] | None = None):
        self.trials = list(trials)
        self.adaptive = adaptive
        self.health = health or nh.HealthConfig()
        self.quarantine = None  # work_dir: a Quarantine (the service's, in the store) or a directory
        if work_dir is not None and work_dir != "" and self.health.quarantine:
            self.quarantine = work_dir if isinstance(work_dir, Quarantine) else Quarantine(work_dir)
        self.run_id = run_id
        self.nodes = list(nodes)
        self.straggler_report = straggler_report
        self.telemetry = telemetry
        self.results: list[TrialResult] = []
        self.stragglers: list[Mapping[str, Any]] = []
        self.quarantined: dict[str, list[str]] = {}
        self.notes: list[str] = []
        by_cell: dict[str, list[Trial]] = {}
        for t in sorted(self.trials, key=lambda t: (t.cell.id, t.index)):
            by_cell.setdefault(t.cell.id, []).append(t)
        self.by_cell = by_cell
        self.tracker = ad.Tracker({c: len(ts) for c, ts in by_cell.items()}, adaptive) if adaptive else None
        self.queued: set[str] = set()

    # ---- adaptive -------------------------------------------------------------------------
    def preload(self, results: Iterable[TrialResult]) -> None:
        """Trials a re-run reuses (valid records already in the run dir) count as done."""
        for r in sorted(results, key=lambda r: (r.trial.cell.id, r.trial.index)):
            self.results.append(r)
            self.queued.add(r.trial.id)
            if self.tracker is not None:
                self.by_cell.setdefault(r.trial.cell.id, [])
                if r.trial not in self.by_cell[r.trial.cell.id]:
                    self.by_cell[r.trial.cell.id].append(r.trial)
                    self.by_cell[r.trial.cell.id].sort(key=lambda t: t.index)
                    self.tracker.max[r.trial.cell.id] = len(self.by_cell[r.trial.cell.id])
                self.tracker.record(r.trial.cell.id, r.metric.value if r.valid else None)

    def initial(self) -> list[Trial]:
        if self.tracker is None:
            out = list(self.trials)
        else:
            out = []
            for cell_id, ts in self.by_cell.items():
                done = len(self.tracker.outcomes.get(cell_id, []))
                fresh = [t for t in ts if t.id not in self.queued]
                want = max(0, self.adaptive.min_trials - done) if not self.tracker.decision(cell_id).done else 0
                if done >= self.adaptive.min_trials and not self.tracker.decision(cell_id).done:
                    want = 1
                out += fresh[:want]
            order = {t.id: i for i, t in enumerate(self.trials)}
            out.sort(key=lambda t: order[t.id])
        self.queued.update(t.id for t in out)
        return out

    def _next_for(self, cell_id: str) -> list[Trial]:
        if self.tracker is None:
            return []
        ts = self.by_cell[cell_id]
        done = len(self.tracker.outcomes.get(cell_id, []))
        in_flight = sum(1 for t in ts if t.id in self.queued) - done
        if in_flight > 0:
            return []  # wait for the cell's running trials before deciding
        nxt = [t for t in ts if t.id not in self.queued]
        if not nxt or not self.tracker.wants(cell_id, done + 1):
            return []
        self.queued.add(nxt[0].id)
        return [nxt[0]]

    def not_run(self) -> list[Trial]:
        """Trials the adaptive rule made unnecessary (never queued)."""
        return [t for t in self.trials if t.id not in self.queued]

    # ---- node health ----------------------------------------------------------------------
    def excluded(self) -> dict[str, str]:
        """Nodes quarantined by earlier runs (service state), with the reason."""
        if self.quarantine is None:
            return {}
        return {n: f"node {n} is quarantined since {d.get('since')} (run {d.get('run_id') or '-'}): "
                   f"{'; '.join(d.get('evidence', []))[:300]}; clear with: dlperf cluster clear {n}"
                for n, d in self.quarantine.nodes().items()}

    def verdicts(self) -> list[nh.NodeVerdict]:
        tele = self.telemetry() if self.telemetry else None
        return nh.assess_run({**results_doc(self.results), "run": {"cluster": {"nodes": [
            {"name": n} for n in self.nodes]}}}, self.stragglers, tele, self.health)

    def finished(self, r: TrialResult) -> tuple[list[Trial], list[str]]:
        """Record one finished trial (final attempt): the trials to queue next and the nodes
        that became suspect and must get no further trials (quarantine on)."""
        self.results.append(r)
        if self.straggler_report and len(r.nodes) > 1 and r.log_paths:
            try:
                rep = self.straggler_report(r)
            except (OSError, ValueError) as exc:  # a broken log must not stop the sweep
                rep = None
                self.notes.append(f"{r.trial.id}: no per-node step times ({exc})")
            if rep:
                self.stragglers.append(rep)
        nxt: list[Trial] = []
        if self.tracker is not None:
            self.tracker.record(r.trial.cell.id, r.metric.value if r.valid else None)
            nxt = self._next_for(r.trial.cell.id)
        out: list[str] = []
        if self.health.quarantine:
            for v in self.verdicts():
                if v.suspect and v.node not in self.quarantined:
                    self.quarantined[v.node] = list(v.evidence)
                    if self.quarantine is not None:
                        self.quarantine.add(v.node, v.evidence, self.run_id)
                    out.append(v.node)
        return nxt, out

    # ---- outputs --------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tracker is not None:
            out["adaptive"] = self.tracker.summary()
        out["node_health"] = nh.to_doc(self.verdicts(), self.quarantined)
        return out

    def write(self, run_dir: str | os.PathLike, result: dict[str, Any] | None = None) -> dict[str, Any]:
        """``adaptive.json`` (adaptive on) and ``node-health.json``, plus their report.md sections.
        With the run's ``result`` (result.json), the trials' telemetry flags (XID, throttling) join
        the node-health evidence and ``run.node_health`` in result.json is brought up to date."""
        if result is not None:
            facts = nh.telemetry_facts(result)
            if facts:
                self.telemetry = lambda: facts
        s = self.summary()
        write_docs(run_dir, result, s.get("adaptive"), s["node_health"])
        return s


def write_docs(run_dir: str | os.PathLike, result: dict[str, Any] | None, adaptive_doc: Mapping[str, Any] | None,
               health_doc: Mapping[str, Any]) -> None:
    """``adaptive.json`` (when given) and ``node-health.json`` in the run dir, their report.md
    sections, and ``run.adaptive`` / ``run.node_health`` in ``result`` (result.json rewritten
    when they changed). The sweep and the DAG's aggregate step both write them here."""
    root = Path(run_dir)
    if result is not None:
        run = result.setdefault("run", {})
        want = {"node_health": dict(health_doc), **({"adaptive": dict(adaptive_doc)} if adaptive_doc else {})}
        if any(run.get(k) != v for k, v in want.items()):
            from dlperf_tasks.report.result_json import write_result

            run.update(want)
            write_result(result, root / "result.json")
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


def policy_for(suite, params: Mapping[str, Any] | None) -> ad.AdaptivePolicy | None:
    """The run's ``adaptive`` (``params``: a DAG run's conf, a sweep's options; true / false / a CI
    width / a mapping), else the suite's field."""
    value = (params or {}).get("adaptive")
    if value is None:
        value = (getattr(suite, "extra", None) or {}).get("adaptive")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"rel_width": float(value)}
    return ad.AdaptivePolicy.from_value(value)


def health_for(suite, params: Mapping[str, Any] | None) -> nh.HealthConfig:
    """The suite's ``node_health`` with the run's ``quarantine`` (true/false) on top."""
    cfg = nh.HealthConfig.from_value((getattr(suite, "extra", None) or {}).get("node_health"))
    q = (params or {}).get("quarantine")
    return cfg if q is None else dataclasses.replace(cfg, quarantine=bool(q))


def for_sweep(suite, todo: Sequence[Trial], reused: Sequence[TrialResult], *, adaptive: Any = None,
              node_health: Any = None, work_dir: str | os.PathLike | Quarantine | None = None, run_id: str = "",
              nodes: Iterable[str] = (), run_dir: str | os.PathLike | None = None) -> SweepDecisions:
    """The decisions of one sweep, by the DAG's rules (:func:`policy_for`, :func:`health_for`):
    ``adaptive`` (true / a CI width / a mapping) else the suite's field; ``node_health`` true/false
    switches quarantine on/off on top of the suite's ``node_health`` settings (a mapping replaces them)."""
    pol = policy_for(suite, {"adaptive": adaptive})
    cfg = (nh.HealthConfig.from_value(node_health) if isinstance(node_health, Mapping)
           else health_for(suite, {"quarantine": node_health}))

    def straggler(r: TrialResult) -> Mapping[str, Any] | None:
        return stragglers.from_run_dir(r, run_dir).to_dict() if run_dir else None

    dec = SweepDecisions(todo, adaptive=pol, health=cfg, work_dir=work_dir, run_id=run_id, nodes=nodes,
                         straggler_report=straggler)
    dec.preload(reused)
    return dec


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


def plan_line(suite, plan) -> str:
    """``dlperf plan``'s line for a suite with ``adaptive`` on: trials between the minimum and the
    worst case (the fixed count); "" when adaptive is off."""
    pol = policy_for(suite, None)
    if pol is None:
        return ""
    cells: dict[str, int] = {}
    for pt in plan.trials:
        cells[pt.trial.cell.id] = cells.get(pt.trial.cell.id, 0) + 1
    wc = ad.worst_case(cells, pol)
    return (f"adaptive trials: {wc['min_trials']} to {wc['max_trials']} (worst case = the fixed count; a cell stops "
            f"once its median's CI is within {pol.rel_width * 100:g} %)")

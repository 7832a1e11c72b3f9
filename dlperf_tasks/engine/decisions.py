"""The engine's decisions, once for both drivers: adaptive trial count and node health / quarantine.

One :class:`Decisions` per run, rebuilt from the run dir (:meth:`Decisions.from_run_dir`: the
planned trials from plan.json, the trial records in ``trials/``, the policy from the run's params
or the suite), with hooks both drivers call:

* :meth:`~Decisions.before_trial` - is this trial still needed? ``None`` (run it) or its
  ``SKIPPED`` record (written to the run dir) when the adaptive rule stopped its cell. The DAG's
  trial step asks it before leasing anything (:mod:`dlperf_tasks.engine.trials`, the cell's
  earlier records fetched from the run's staging area first); ``dlperf sweep``'s scheduling loop
  asks it for a cell's next trial once the cell's running trials finished
  (:meth:`~Decisions.initial` / :meth:`~Decisions.after_trial`), so both record the same trials
  ``SKIPPED`` with the same reasons.
* :meth:`~Decisions.after_trial` - one finished trial (final attempt) observed: the cell's next
  trial to queue and the nodes that became suspect (online quarantine). The sweep calls it from
  its scheduling loop; a DAG run has no loop (one task per trial): its trial records in the run
  dir are what the later hooks rebuild from.
* :meth:`~Decisions.after_aggregate` - on the run's result document, before result.json is
  written: node-health verdicts from it (per-node speeds, straggler reports, telemetry facts),
  suspects quarantined when asked (the service's ``state/quarantine.json`` in the run store),
  ``adaptive.json`` / ``node-health.json`` / the report.md sections / ``run.adaptive`` and
  ``run.node_health`` (:mod:`dlperf_tasks.engine.decisiondocs`). Both drivers pass it to the
  aggregate step as its ``decide`` hook (the DAG's through :class:`RunDecisions`).

``SKIPPED`` trials are no failures and no invalid trials: both drivers leave them out of the
statistics. Pure logic except the quarantine state and the documents (no SSH, no Airflow).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from dlperf_tasks.catalog.plan import Plan
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.engine.decisiondocs import ADAPTIVE_FILE, HEALTH_FILE, results_doc, write_docs
from dlperf_tasks.engine.decisiondocs import replace_section, summary_lines  # noqa: F401 (re-exported)
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.measure import stragglers
from dlperf_tasks.policy import adaptive as ad
from dlperf_tasks.policy import nodehealth as nh
from dlperf_tasks.store.quarantine import Quarantine

__all__ = ["ADAPTIVE_FILE", "HEALTH_FILE", "Decisions", "RunDecisions", "for_sweep", "split_items"]


def is_skipped(rec: TrialResult | Mapping[str, Any] | None) -> bool:
    """A ``SKIPPED`` record (a TrialResult or a trial record dict; old "not needed" records read
    as SKIPPED through :func:`dlperf_tasks.report.result_json.trial_from_dict`)."""
    if rec is None:
        return False
    if isinstance(rec, TrialResult):
        return rec.status == TrialStatus.SKIPPED
    return (rec.get("trial") or rec).get("status") == TrialStatus.SKIPPED.value


def drop_skipped(records: list) -> list:
    """The trial steps' records without the SKIPPED ones (what collect counts)."""
    return [r for r in records if r and not is_skipped(r)]


def stop_reason(trial: Trial, earlier: list[TrialResult | None], policy: ad.AdaptivePolicy, size: int) -> str | None:
    """Why ``trial`` is not needed given the cell's earlier records (None = missing, not finished
    yet), or None when it must run. Only decided once every earlier trial has a record, unless
    the ones present already stop the cell. Every SKIPPED trial of a cell gives the reason the
    cell stopped, whichever order its trials were decided in (the DAG's run side by side)."""
    if trial.index > policy.cap(size):
        return f"the policy's maximum of {policy.cap(size)} trial(s) per cell"
    for r in earlier:
        if r is not None and is_skipped(r):
            return r.reason
    done = [r for r in earlier if r is not None]
    d = ad.decide(trial.cell.id, [r.metric.value if r.valid and r.metric else None for r in done], policy, size)
    return d.reason if d.stopped == ad.CONVERGED else None


def adaptive_summary(planned: Sequence[Trial], records: Iterable[TrialResult], policy: ad.AdaptivePolicy) -> dict:
    """``run.adaptive``: per cell (trials in index order) the trials it used and why it stopped."""
    by_cell: dict[str, list[Trial]] = {}
    for t in planned:
        by_cell.setdefault(t.cell.id, []).append(t)
    got = {r.trial.id: r for r in records}
    decisions = []
    for cell_id, ts in sorted(by_cell.items()):
        ts = sorted(ts, key=lambda t: t.index)
        ran = [got[t.id] for t in ts if t.id in got and not is_skipped(got[t.id])]
        d = ad.decide(cell_id, [r.metric.value if r.valid and r.metric else None for r in ran], policy, len(ts))
        skip = next((got[t.id] for t in ts if is_skipped(got.get(t.id))), None)
        if skip is not None and not d.done:  # a trial in flight when the cell stopped widened the CI again
            d.stopped, d.reason = ad.CONVERGED, skip.reason
        elif skip is None and not d.done:
            d.reason = f"{len(ran)} of {d.max_trials} trial(s) have a record; " + d.reason
        decisions.append(d)
    return ad.summarise(decisions, policy)


class Decisions:
    """The decisions of one run (see the module docstring). ``trials``: every planned trial;
    ``rd``: the run dir (None: in memory only); ``quarantine``: the service's quarantine state
    (None: a suspect is quarantined for this run only)."""

    def __init__(self, trials: Sequence[Trial], *, adaptive: ad.AdaptivePolicy | None = None,
                 health: nh.HealthConfig | None = None, work_dir: str | os.PathLike | Quarantine | None = None,
                 run_id: str = "", nodes: Iterable[str] = (), rd: RunDir | None = None,
                 straggler_report: Callable[[TrialResult], Mapping[str, Any] | None] | None = None):
        self.trials = sorted(trials, key=lambda t: (t.cell.id, t.index))
        self.order = {t.id: i for i, t in enumerate(trials)}
        self.adaptive = adaptive
        self.health = health or nh.HealthConfig()
        self.quarantine = None  # work_dir: a Quarantine (the service's, in the store) or a directory
        if work_dir is not None and work_dir != "" and self.health.quarantine:
            self.quarantine = work_dir if isinstance(work_dir, Quarantine) else Quarantine(work_dir)
        self.rd = rd
        self.run_id = run_id or (rd.run_id if rd else "")
        self.nodes = list(nodes)
        self.straggler_report = straggler_report
        self.records: dict[str, TrialResult] = {}  # trial id -> final record (ran, reused or SKIPPED)
        self.stragglers: list[Mapping[str, Any]] = []
        self.quarantined: dict[str, list[str]] = {}
        self.notes: list[str] = []
        self.by_cell: dict[str, list[Trial]] = {}
        for t in self.trials:
            self.by_cell.setdefault(t.cell.id, []).append(t)
        self.queued: set[str] = set()

    @classmethod
    def from_run_dir(cls, rd: RunDir, suite, *, params: Mapping[str, Any] | None = None,
                     health: nh.HealthConfig | None = None,
                     quarantine: Quarantine | str | os.PathLike | None = None, nodes: Iterable[str] = (), records: Iterable[TrialResult] | None = None) -> "Decisions":
        """The run's decisions from its run dir: the planned trials (plan.json), the policy
        (``params``, else plan.json's params, else the suite's fields; none for an A/B
        confirmation run) and the trial records there (``records``: only these, e.g. the ones a
        re-run of a sweep reuses)."""
        plan_doc = rd.read("plan.json") or {}
        params = (plan_doc.get("params") or {}) if params is None else params
        planned = [pt.trial for pt in Plan.from_dict(plan_doc).trials] if plan_doc.get("trials") else []
        dec = cls(planned, adaptive=None if params.get("confirm") else policy_for(suite, params),
                  health=health or health_for(suite, params), work_dir=quarantine, nodes=nodes, rd=rd,
                  straggler_report=lambda r: stragglers.from_run_dir(r, rd.path).to_dict())
        found = records if records is not None else (r for r in (rd.load_trial(t) for t in planned) if r)
        dec.preload(found)
        return dec

    # ---- before a trial ---------------------------------------------------------------------
    def preload(self, results: Iterable[TrialResult]) -> None:
        """Trials already recorded (a re-run reuses them; SKIPPED ones are decided again)."""
        for r in results:
            self.records[r.trial.id] = r
            if not is_skipped(r):
                self.queued.add(r.trial.id)
            if r.trial not in self.by_cell.setdefault(r.trial.cell.id, []):
                self.by_cell[r.trial.cell.id].append(r.trial)
                self.by_cell[r.trial.cell.id].sort(key=lambda t: t.index)

    def before_trial(self, trial: Trial, fetch: Callable[[list[Trial]], None] | None = None) -> TrialResult | None:
        """None: run ``trial``; else its SKIPPED record (saved in the run dir): the adaptive rule
        stopped its cell. ``fetch(earlier trials)`` first brings their records into the run dir
        (the DAG: from the run's staging area). An earlier trial without a record yet leaves the
        decision open unless the ones present already stop the cell: the trial runs."""
        if self.adaptive is None or trial.index <= self.adaptive.min_trials:
            return None
        earlier = [Trial(trial.cell, j) for j in range(1, trial.index)]
        if fetch is not None and self.rd is not None:
            fetch(earlier)
            self.preload(r for r in (self.rd.load_trial(t) for t in earlier) if r is not None)
        size = max(len(self.by_cell.get(trial.cell.id, [])), trial.index)  # the cell's planned trials
        why = stop_reason(trial, [self.records.get(t.id) for t in earlier], self.adaptive, size)
        if why is None:
            return None
        res = TrialResult(trial=trial, status=TrialStatus.SKIPPED, reason=why)
        self.records[trial.id] = res
        if self.rd is not None:
            self.rd.save_trial(res)
        return res

    def initial(self) -> list[Trial]:
        """The trials to queue now: every one without a record (adaptive off), else each cell's
        first ``min_trials`` (then one at a time while the cell needs more)."""
        if self.adaptive is None:
            out = [t for t in self.trials if t.id not in self.queued]
        else:
            out = []
            for cell_id, ts in self.by_cell.items():
                fresh = [t for t in ts if t.id not in self.queued]
                want = max(0, self.adaptive.min_trials - len(self._ran(cell_id)))
                self.queued.update(t.id for t in fresh[:want])
                out += fresh[:want] if want else self._next_for(cell_id)
        out.sort(key=lambda t: self.order.get(t.id, len(self.order)))
        self.queued.update(t.id for t in out)
        return out

    def _ran(self, cell_id: str) -> list[TrialResult]:
        return [r for t in self.by_cell.get(cell_id, []) if (r := self.records.get(t.id)) and not is_skipped(r)]

    def _next_for(self, cell_id: str) -> list[Trial]:
        """The cell's next trial once its running ones finished, when :meth:`before_trial` lets it
        run; when it does not, the cell's remaining trials are recorded SKIPPED."""
        ts = self.by_cell[cell_id]
        if any(t.id in self.queued and t.id not in self.records for t in ts):
            return []  # wait for the cell's running trials before deciding
        nxt = [t for t in ts if t.id not in self.queued and not is_skipped(self.records.get(t.id))]
        if not nxt:
            return []
        if self.before_trial(nxt[0]) is None:
            self.queued.add(nxt[0].id)
            return [nxt[0]]
        for t in nxt[1:]:
            self.before_trial(t)
        return []

    def not_run(self) -> list[Trial]:
        """Trials the adaptive rule made unnecessary (never queued)."""
        return [t for t in self.trials if t.id not in self.queued]

    # ---- after a trial ----------------------------------------------------------------------
    def excluded(self) -> dict[str, str]:
        """Nodes quarantined by earlier runs (service state), with the reason."""
        if self.quarantine is None:
            return {}
        return {n: f"node {n} is quarantined since {d.get('since')} (run {d.get('run_id') or '-'}): "
                   f"{'; '.join(d.get('evidence', []))[:300]}; clear with: dlperf cluster clear {n}"
                for n, d in self.quarantine.nodes().items()}

    def after_trial(self, r: TrialResult) -> tuple[list[Trial], list[str]]:
        """Record one finished trial (final attempt): the trials to queue next and the nodes
        that became suspect and must get no further trials (quarantine on)."""
        self.records[r.trial.id] = r
        self.queued.add(r.trial.id)
        if self.straggler_report and len(r.nodes) > 1 and r.log_paths:
            try:
                rep = self.straggler_report(r)
            except (OSError, ValueError) as exc:  # a broken log must not stop the sweep
                rep = None
                self.notes.append(f"{r.trial.id}: no per-node step times ({exc})")
            if rep:
                self.stragglers.append(rep)
        nxt = self._next_for(r.trial.cell.id) if self.adaptive is not None else []
        out: list[str] = []
        if self.health.quarantine:
            for v in self.verdicts():
                if v.suspect and v.node not in self.quarantined:
                    self.quarantined[v.node] = list(v.evidence)
                    if self.quarantine is not None:
                        self.quarantine.add(v.node, v.evidence, self.run_id)
                    out.append(v.node)
        return nxt, out

    # ---- after aggregation ------------------------------------------------------------------
    def verdicts(self, result: Mapping[str, Any] | None = None) -> list[nh.NodeVerdict]:
        """Node-health verdicts: from the run's result.json (its straggler reports and telemetry
        facts), else from the trials recorded so far (the sweep, online)."""
        if result is None:
            doc: dict[str, Any] = {**results_doc(r for r in self.records.values() if not is_skipped(r)), "run": {}}
            reports: list = list(self.stragglers)
        else:
            doc, reports = dict(result), ((result.get("run") or {}).get("stragglers") or {}).get("trials") or []
        run = dict(doc.get("run") or {})
        cluster = dict(run.get("cluster") or {})
        names = [n.get("name") for n in cluster.get("nodes") or [] if isinstance(n, Mapping)]
        cluster["nodes"] = [*(cluster.get("nodes") or []), *({"name": n} for n in self.nodes if n not in names)]
        doc["run"] = {**run, "cluster": cluster}
        return nh.assess_run(doc, reports, nh.telemetry_facts(result) if result is not None else None, self.health)

    def _docs(self, result: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, list[str]]]:
        out: dict[str, Any] = {}
        if self.adaptive is not None:
            out["adaptive"] = adaptive_summary(self.trials, self.records.values(), self.adaptive)
        verdicts = self.verdicts(result)
        quarantined = dict(self.quarantined)
        if self.health.quarantine:
            quarantined.update({v.node: list(v.evidence) for v in verdicts if v.suspect and v.node not in quarantined})
        out["node_health"] = nh.to_doc(verdicts, quarantined)
        return out, quarantined

    def summary(self, result: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``{"adaptive" (adaptive on), "node_health"}``: result.json's ``run.adaptive`` / ``run.node_health``."""
        return self._docs(result)[0]

    def after_aggregate(self, run_dir: str | os.PathLike | None = None,
                        result: dict[str, Any] | None = None) -> dict[str, Any]:
        """On the run's result document (``result``, before result.json is written): verdicts,
        suspects quarantined (quarantine on), the decision documents written into the run dir
        and ``result``."""
        s, quarantined = self._docs(result)
        for node, evidence in quarantined.items():
            if node not in self.quarantined:
                self.quarantined[node] = evidence
                if self.quarantine is not None:
                    self.quarantine.add(node, evidence, self.run_id)
        where = run_dir if run_dir is not None else self.rd.path if self.rd is not None else None
        if where is None:
            raise ValueError("after_aggregate: no run dir (give run_dir, or build the decisions with rd)")
        write_docs(where, result, s.get("adaptive"), s["node_health"])
        return s



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


def sweep_params(adaptive: Any = None, node_health: Any = None) -> dict[str, Any]:
    """A sweep's options as run params: ``adaptive`` (true / a CI width / a mapping / None = the
    suite's) and ``node_health`` true/false (``quarantine`` on/off)."""
    return {"adaptive": adaptive, **({} if isinstance(node_health, Mapping) else {"quarantine": node_health})}


def for_sweep(suite, todo: Sequence[Trial], reused: Sequence[TrialResult], *, adaptive: Any = None,
              node_health: Any = None, work_dir: str | os.PathLike | Quarantine | None = None, run_id: str = "",
              nodes: Iterable[str] = (), run_dir: str | os.PathLike | None = None) -> Decisions:
    """The decisions of one sweep, by the DAG's rules (:func:`policy_for`, :func:`health_for`):
    ``adaptive`` (true / a CI width / a mapping) else the suite's field; ``node_health`` true/false
    switches quarantine on/off on top of the suite's ``node_health`` settings (a mapping replaces
    them). With ``run_dir`` (its plan.json written) the decisions are the run dir's
    (:meth:`Decisions.from_run_dir`, the DAG's too) with the ``reused`` records."""
    params = sweep_params(adaptive, node_health)
    cfg = nh.HealthConfig.from_value(node_health) if isinstance(node_health, Mapping) else health_for(suite, params)
    if run_dir is not None:
        rd = RunDir(Path(run_dir), run_id)
        return Decisions.from_run_dir(rd, suite, params=params, health=cfg, quarantine=work_dir, nodes=nodes,
                                      records=reused)
    dec = Decisions([*todo, *(r.trial for r in reused)], adaptive=policy_for(suite, params), health=cfg,
                    work_dir=work_dir, run_id=run_id, nodes=nodes)
    dec.preload(reused)
    return dec


# ---- the DAG's steps -------------------------------------------------------------------------------
def split_items(run_set: Mapping[str, Any], settings) -> tuple[list[dict], list[dict]]:
    """``(first, more)``: the planned trial items to map first, and those beyond each adaptive
    cell's minimum (mapped after the first ones finished; none when adaptive is off)."""
    params = run_set.get("params") or {}
    policies: dict[str, ad.AdaptivePolicy | None] = {}
    first: list[dict] = []
    more: list[dict] = []
    for item in run_set.get("trials") or []:
        if item["suite"] not in policies:
            policies[item["suite"]] = None if params.get("confirm") or item.get("dry_run") else \
                policy_for(load_suite(item["suite"], settings.catalog_path), params)
        pol = policies[item["suite"]]
        (more if pol is not None and int(item["trial"]["index"]) > pol.min_trials else first).append(item)
    return first, more


class RunDecisions:
    """The DAG's aggregate step's ``decide`` hook (:func:`dlperf_tasks.engine.finish.aggregate_runs`):
    :meth:`Decisions.after_aggregate` for each aggregated run, with the service's quarantine state
    when the run or suite asks for quarantine. ``done``: one ``{run_id, suspects, quarantined,
    adaptive}`` per run (for the task log)."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.done: list[dict[str, Any]] = []

    def __call__(self, rd: RunDir, suite, result: dict[str, Any]) -> None:
        params = (rd.read("plan.json") or {}).get("params") or {}
        q = Quarantine.for_settings(self.settings) if health_for(suite, params).quarantine else None
        doc = Decisions.from_run_dir(rd, suite, quarantine=q).after_aggregate(rd.path, result)
        ada, health = doc.get("adaptive"), doc["node_health"]
        self.done.append({"run_id": rd.run_id, "suspects": list(health.get("suspects") or []),
                          "quarantined": health["quarantined"],
                          "adaptive": {"trials_used": ada["trials_used"], "trials_max": ada["trials_max"]}
                          if ada else None})


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

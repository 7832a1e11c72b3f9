"""Issue 17 in the per-trial DAG path: adaptive trial count and node health / quarantine.

``dlperf sweep`` takes these decisions in its scheduling loop (:mod:`dlperf_tasks.engine.decisions`);
a DAG run has no loop, only one mapped task per planned trial, so the same rules run at two
points of the engine's steps instead (no Airflow here):

* **adaptive**: :func:`split_items` puts each adaptive cell's trials beyond the policy's minimum
  into a second mapped task that starts once the first trials have finished (any executor, any
  order); :func:`adaptive_skip` (called by the trial step before it leases anything) has such a
  trial read the cell's earlier trial records (pulled from the run's staging area) and, when the
  median's confidence interval is already within the width, record itself ``NOT_RUN`` with the
  reason ``not needed (adaptive stop: ...)`` instead of running. Such records are left out of
  the statistics (:func:`drop_skipped`: not invalid trials, just trials not needed).
* **node health** (:func:`after_aggregate`, called by the aggregate step): the run's per-node
  speeds, straggler reports and telemetry facts name suspect nodes; with quarantine on they go
  into the service's quarantine state (``state/quarantine.json`` in the settings' run store,
  shared by every worker host; the one ``dlperf cluster quarantine/clear`` shows and clears), which the trial step's lease allocation honours
  (:func:`dlperf_tasks.engine.placement.usable_nodes`). result.json gets ``run.adaptive`` and
  ``run.node_health``, report.md the "Adaptive trials" / "Node health" sections, the run dir
  ``adaptive.json`` / ``node-health.json``, exactly as the sweep writes them.

Opt-in as in the sweep: the run's conf (``adaptive``: true or a CI width; ``quarantine``:
true/false), else the suite's catalog fields ``adaptive`` / ``node_health``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.policy import adaptive as ad
from dlperf_tasks.policy import nodehealth as nh
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.engine.decisions import health_for, policy_for
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.engine.setup import load_suite
from dlperf_tasks.engine.storeaccess import open_store
from dlperf_tasks.store.staging import TRIALS_DIR, Staging
from dlperf_tasks.engine.decisions import write_docs
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.catalog.plan import Plan
from dlperf_tasks.report.result_json import load_result

SKIP_PREFIX = "not needed (adaptive stop"


def is_skip(rec: TrialResult | Mapping[str, Any] | None) -> bool:
    """An adaptive "not needed" record (a TrialResult or a trial record dict)."""
    if rec is None:
        return False
    if isinstance(rec, TrialResult):
        return rec.status == TrialStatus.NOT_RUN and rec.reason.startswith(SKIP_PREFIX)
    t = rec.get("trial") or rec
    return t.get("status") == TrialStatus.NOT_RUN.value and str(t.get("reason", "")).startswith(SKIP_PREFIX)


def drop_skipped(records: list) -> list:
    """The trial steps' records without the adaptive "not needed" ones (what collect counts)."""
    return [r for r in records if r and not is_skip(r)]


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
                policy_for(load_suite(item["suite"], settings), params)
        pol = policies[item["suite"]]
        (more if pol is not None and int(item["trial"]["index"]) > pol.min_trials else first).append(item)
    return first, more


def _cell_size(plan_doc: Mapping[str, Any], trial: Trial) -> int:
    n = sum(1 for t in plan_doc.get("trials") or [] if t.get("cell_id") == trial.cell.id)
    return max(n, trial.index)


def _pull(rd, settings, trials: list[Trial]) -> None:
    """The cell's earlier records from the run's staging area (no shared disk between tasks)."""
    Staging(open_store(settings), rd.run_id).pull(rd.path, only=[f"{TRIALS_DIR}/{t.key}.json" for t in trials])


def stop_reason(trial: Trial, earlier: list[TrialResult | None], policy: ad.AdaptivePolicy, size: int) -> str | None:
    """Why ``trial`` is not needed given the cell's earlier records (None = missing, not finished
    yet), or None when it must run. Only decided once every earlier trial has a record, unless
    the ones present already stop the cell."""
    if trial.index > policy.cap(size):
        return f"the policy's maximum of {policy.cap(size)} trial(s) per cell"
    for r in earlier:
        if r is not None and is_skip(r):
            return f"the cell stopped before trial {r.trial.index}: {r.reason[len(SKIP_PREFIX) + 2:-1]}"
    done = [r for r in earlier if r is not None]
    d = ad.decide(trial.cell.id, [r.metric.value if r.valid and r.metric else None for r in done], policy, size)
    if d.stopped == ad.CONVERGED:
        return d.reason
    return None


def adaptive_skip(item: Mapping[str, Any], rd, settings) -> dict[str, Any] | None:
    """The trial step's check (one call before leasing): the trial's "not needed" record (written
    to the run dir) when the adaptive rule stopped its cell, else None (run it). An earlier trial
    of the cell without a record yet (the DAG maps the trials beyond the minimum after the others,
    but those may run in parallel) leaves the decision open: the trial runs."""
    trial = Trial.from_dict(item["trial"])
    plan_doc = rd.read("plan.json") or {}
    params = plan_doc.get("params") or {}
    if params.get("confirm") or trial.index <= 1:
        return None

    suite = load_suite(item["suite"], settings)
    policy = policy_for(suite, params)
    if policy is None or trial.index <= policy.min_trials:
        return None
    earlier_trials = [Trial(trial.cell, j) for j in range(1, trial.index)]
    _pull(rd, settings, earlier_trials)
    why = stop_reason(trial, [rd.load_trial(t) for t in earlier_trials], policy, _cell_size(plan_doc, trial))
    if why is None:
        return None
    return rd.save_trial(TrialResult(trial=trial, status=TrialStatus.NOT_RUN, reason=f"{SKIP_PREFIX}: {why})"))


# ---- after aggregate ---------------------------------------------------------------------------
def adaptive_summary(planned: list[Trial], records: list[TrialResult], policy: ad.AdaptivePolicy) -> dict[str, Any]:
    """``run.adaptive`` of a DAG run: per cell the trials it used and why it stopped."""
    by_cell: dict[str, list[Trial]] = {}
    for t in planned:
        by_cell.setdefault(t.cell.id, []).append(t)
    got = {r.trial.id: r for r in records}
    decisions = []
    for cell_id, ts in sorted(by_cell.items()):
        ran = [got[t.id] for t in sorted(ts, key=lambda t: t.index) if t.id in got and not is_skip(got[t.id])]
        d = ad.decide(cell_id, [r.metric.value if r.valid and r.metric else None for r in ran], policy, len(ts))
        skip = next((got[t.id] for t in ts if t.id in got and is_skip(got[t.id])), None)
        if skip is not None and not d.done:  # a trial in flight when the cell stopped widened the CI again
            d.stopped, d.reason = ad.CONVERGED, skip.reason[len(SKIP_PREFIX) + 2:-1]
        elif skip is None and not d.done:
            d.reason = f"{len(ran)} of {d.max_trials} trial(s) have a record; " + d.reason
        decisions.append(d)
    return ad.summarise(decisions, policy)


def after_aggregate(summaries: list[Mapping[str, Any]], settings) -> list[dict]:
    """Adaptive summary and node health of every aggregated run of a DAG run; suspects are
    quarantined when the run (or suite) asks for it. Returns one ``{run_id, suspects,
    quarantined, adaptive}`` per run (for the task log)."""
    out = []
    for s in summaries:
        if not s.get("result"):
            continue
        rd = RunDir(Path(s["run_dir"]), s["run_id"])
        result = load_result(rd.file("result.json"))
        plan_doc = rd.read("plan.json") or {}
        params = plan_doc.get("params") or {}
        suite = load_suite(s["suite"], settings)
        planned = [pt.trial for pt in Plan.from_dict(plan_doc).trials]  # the run set in XCom has no trials
        policy = policy_for(suite, params) if not params.get("confirm") else None
        records = [r for r in (rd.load_trial(t) for t in planned) if r is not None]
        adaptive_doc = adaptive_summary(planned, records, policy) if policy else None
        health = health_for(suite, params)
        run = result.get("run") or {}
        verdicts = nh.assess_run(result, (run.get("stragglers") or {}).get("trials") or [],
                                 nh.telemetry_facts(result), health)
        suspects = {v.node: v.evidence for v in verdicts if v.suspect}
        if health.quarantine and suspects:
            q = Quarantine.for_settings(settings)
            for node, evidence in suspects.items():
                q.add(node, evidence, s["run_id"])
        health_doc = nh.to_doc(verdicts, suspects if health.quarantine else ())
        write_docs(rd.path, result, adaptive_doc, health_doc)
        out.append({"run_id": s["run_id"], "suspects": sorted(suspects), "quarantined": health_doc["quarantined"],
                    "adaptive": ({"trials_used": adaptive_doc["trials_used"], "trials_max": adaptive_doc["trials_max"]}
                                 if adaptive_doc else None)})
    return out

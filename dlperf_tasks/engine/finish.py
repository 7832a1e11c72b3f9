"""Engine steps for a whole run set: collect + aggregate (per run), publish, cleanup.

A dry run publishes nothing: :func:`publish` returns (and the caller prints) the commands the
trials would have run."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from dlperf_tasks.engine.errors import NonRetriable, Retriable
from dlperf_tasks.engine.outputs import aggregate, cell_rows, collect, result_table
from dlperf_tasks.engine.rundir import RunDir, now_iso, write_json
from dlperf_tasks.engine.runset import RunEntry, RunSet
from dlperf_tasks.engine.clusterconf import load_cluster
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.engine.storeaccess import engine_store
from dlperf_tasks.core.model import Trial
from dlperf_tasks.core.safeurl import safe_url
from dlperf_tasks.report.result_json import trial_from_record
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.basis import basis_line
from dlperf_tasks.engine.trials import stop_runs
from dlperf_tasks.engine import slurmitem
from dlperf_tasks.remote.slurm_inventory import SlurmCluster
from dlperf_tasks.remote import nodeclean
from dlperf_tasks.remote.runtime import make_runtime
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.history.check import check_run
from dlperf_tasks.history.confirm import notify_only_confirmed
from dlperf_tasks.remote import local
from dlperf_tasks.remote.inventory import load_for_redaction

log = logging.getLogger("dlperf.engine")


def _rundir(run: RunEntry) -> RunDir:
    return RunDir(Path(run.run_dir), run.run_id)


def collect_runs(run_set: RunSet | Mapping[str, Any], records: list[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Which planned trials have a record in their run dir, and which logs are missing.
    ``records`` are the trial steps' return values (a failed trial step returns none): each is
    decoded here once; the run dir's copy of it is only checked to be there (the aggregate step
    decodes that one, once)."""
    done = [trial_from_record(r) for r in records if r]
    out: dict[str, Any] = {"trials": {}, "missing_logs": {}}
    for run in RunSet.of(run_set).runs:
        rd = _rundir(run)
        mine = {r.trial.id: r for r in done if r.trial.cell.suite == run.suite}  # a trial is counted once
        found = [r for r in mine.values() if rd.trial_file(r.trial).is_file()]
        out["trials"][run.run_id] = [r.trial.to_dict() for r in found]
        out["missing_logs"][run.run_id] = [p for r in found for p in r.log_paths if not (rd.path / p).exists()]
    return out


def aggregate_runs(run_set: RunSet | Mapping[str, Any], collected: Mapping[str, Any], settings, source: str = "dag",
                   group_run_id: str | None = None,
                   decide: Callable[[RunDir, Any, dict[str, Any]], object] | None = None) -> list[dict[str, Any]]:
    """result.json + report.md + plots + index files + NCCL transports + stragglers per run.
    ``decide(rd, suite, result)``: the run's decisions on its document before result.json is
    written (:class:`dlperf_tasks.engine.decisions.RunDecisions`)."""
    run_set = RunSet.of(run_set)
    summaries: list[dict[str, Any]] = []
    for run in run_set.runs:
        rd = _rundir(run)
        trials = [Trial.from_dict(t) for t in collected["trials"].get(run.run_id, [])]
        results, _ = collect(rd, trials)
        if not results or run_set.dry_run:
            summaries.append({"run_id": run.run_id, "suite": run.suite, "result": None, "cells": [],
                              "run_dir": run.run_dir})
            continue
        suite = load_suite(run.suite, settings.catalog_path)
        result = aggregate(rd, results, suite, source, {"dag_run_id": group_run_id} if group_run_id else None,
                           settings=settings, decide=None if decide is None else functools.partial(decide, rd, suite))
        summaries.append({"run_id": run.run_id, "suite": run.suite, "result": str(rd.file("result.json")),
                          "run_dir": run.run_dir, "cells": cell_rows(result),
                          "plots": sorted(str(p) for p in rd.file("plots").glob("*")) if rd.file("plots").is_dir()
                          else []})
    return summaries


def publish_run(store, rd: RunDir, settings) -> str:
    """Publish with dlperf_tasks.store (redacted logs, manifest last, index updated). The cluster
    inventory goes with it, so node host names and user names are redacted too."""
    try:
        return str(store.publish(rd.path, inventory=None if settings.is_local else _resolved_inventory(settings)))
    except StoreError as exc:
        raise Retriable(f"publish {rd.run_id} to {safe_url(settings.store_url)}: {exc}") from None


def _resolved_inventory(settings):
    """The inventory with its credentials resolved as the trials resolved them (connections
    included), so the pre-publish leak check knows every secret they could print; its path when
    they cannot be resolved here, the file as it is (its own secrets are still read)."""
    try:
        cluster = load_cluster(settings)
        return cluster.login_cluster() if isinstance(cluster, SlurmCluster) else cluster
    except (DlperfError, NonRetriable, Retriable):
        return load_for_redaction(settings.cluster)


def publish(run_set: RunSet | Mapping[str, Any], summaries: list[Mapping[str, Any]], settings, group: str = "",
            dry_run_commands: list[str] | None = None,
            notify: Callable[[Mapping[str, Any]], int] | None = None) -> list[dict[str, Any]]:
    """Publish every aggregated run, check it against its suite's history; write
    ``<work_dir>/last-<group>.json`` (what was published, the table) for ``make run``.
    A dry run publishes nothing and records the commands instead. ``notify``: see
    :func:`regression_check`."""
    dry_run = RunSet.of(run_set).dry_run
    published: list[dict[str, Any]] = []
    todo = [s for s in summaries if s.get("result")] if not dry_run else []
    store = engine_store(settings) if todo else None
    for s in todo:
        where = publish_run(store, RunDir(Path(s["run_dir"]), s["run_id"]), settings)
        published.append({"run_id": s["run_id"], "suite": s["suite"], "location": where, "run_dir": s["run_dir"],
                          "plots": s.get("plots", []), "regressions": regression_check(store, s["run_id"], settings, notify)})
    if group:
        write_json(Path(settings.work_dir) / f"last-{group}.json",
                   {"dag": group, "published": published, "finished_at": now_iso(), "store": safe_url(settings.store_url),
                    "table": result_table(summaries), "dry_run": dry_run,
                    "commands": list(dry_run_commands or [])})
    return published


def regression_check(store, run_id: str, settings,
                     notify: Callable[[Mapping[str, Any]], int] | None = None) -> dict[str, Any]:
    """Compare the published run with its suite's history (history.check.check_run); the
    findings go to the log and the run's annotations. A failing check never fails the run.

    Who is told: without ``notify`` the check posts to ``settings.notify_url`` itself; with it
    (the scheduler's notifiers, one of them the webhook) the check sends nothing and
    ``notify(report)`` gets the findings instead, so nothing is sent twice. Either way
    ``DLPERF_NOTIFY_ON=confirmed`` sends nothing here (only A/B-confirmed findings are sent)."""
    try:
        rep = check_run(store, run_id, log=log, notify_target=settings.notify_url if notify is None else "")
        sent = notify(rep.to_dict()) if notify is not None and rep.findings and not notify_only_confirmed() else 0
    except Exception as exc:  # noqa: BLE001 - the check must not fail a published run
        log.error("regression check of %s failed (the run is published): %s: %s", run_id, type(exc).__name__, exc)
        return {"error": f"{type(exc).__name__}: {exc}"}

    return {"findings": len(rep.findings), "noisy": len(rep.noisy), "notified": sent,
            "cells": sorted({f"{v.kind}:{v.cell_id}" for v in rep.findings}), "summary": rep.summary_lines(),
            "basis": rep.basis, "basis_line": basis_line(rep.basis)}


def cleanup(run_set: RunSet | Mapping[str, Any] | None, settings) -> dict[str, Any]:
    """Teardown: stop whatever is still running, clean the nodes, release leases (nothing
    when planning failed or for a dry run: no node was touched)."""
    if not run_set:
        return {"cleaned": [], "note": "nothing planned, nothing touched"}
    run_set = RunSet.of(run_set)
    if run_set.dry_run:
        return {"cleaned": [], "note": "dry run"}
    if settings.is_local:
        stopped = sum(local.stop(key) for key in run_set.trial_keys)
        return {"cleaned": ["local0"], "stopped_process_groups": stopped}
    stop_runs({r.run_id for r in run_set.runs})
    if slurmitem.is_slurm(settings):  # every job the run started: scancelled, gone from squeue
        cancelled, problems = slurmitem.cancel_run_jobs(settings, [r.run_id for r in run_set.runs])
        if problems:
            raise Retriable("cleanup left something behind: " + "; ".join(problems))
        return {"cleaned": [], "cancelled_jobs": cancelled}
    cleaned, problems = clean_runs(list(run_set.runs), list(run_set.trial_keys), settings)
    if problems:
        raise Retriable("cleanup left something behind: " + "; ".join(problems))
    return {"cleaned": cleaned}


def clean_runs(runs: list[RunEntry], trial_keys: list[str], settings) -> tuple[list, list]:
    """On every node, for each run: its containers, scratch and leases removed, leftovers listed."""
    cluster = load_cluster(settings)
    cleaned: set[str] = set()
    problems: list[str] = []
    with SSHPool(cluster) as pool:
        for run in runs:
            suite = load_suite(run.suite, settings.catalog_path)
            runtime = make_runtime(suite.container, registry=cluster.registry, launcher=suite.launcher)
            done, bad = nodeclean.clean_run(pool, runtime, list(cluster.names), run.run_id, list(trial_keys))
            cleaned.update(done)
            problems += bad
    return sorted(cleaned), problems

"""Engine steps 1-2: plan (no node touched) and prepare (login, pull, env capture).

``plan_runs`` returns the *run set* (:class:`dlperf_tasks.engine.runset.RunSet`) that every
later step takes: its runs (:class:`~dlperf_tasks.engine.runset.RunEntry`, one per suite) and
the planned trials (:class:`~dlperf_tasks.engine.runset.TrialItem`, what running one trial needs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.engine.clusterconf import check_fits, load_cluster
from dlperf_tasks.engine import slurmitem
from dlperf_tasks.remote.slurm_check import validate_before_submit
from dlperf_tasks.engine.errors import NonRetriable, Retriable
from dlperf_tasks.engine.finish import clean_runs
from dlperf_tasks.engine.rundir import RunDir, group_run_record, new_run_id, now_iso, read_json, write_json, write_plan
from dlperf_tasks.engine.runset import RunEntry, RunSet, TrialItem
from dlperf_tasks.core.errors import DlperfError, RemoteError
from dlperf_tasks.remote.local import LOCAL_MAX_PROCS
from dlperf_tasks.store.redact_facts import NODE_IDENTITY_FILE as IDENTITY_FILE
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.catalog.plan import Overrides, plan
from dlperf_tasks.remote import envcapture
from dlperf_tasks.remote.runtime import make_runtime
from dlperf_tasks.catalog.shipping import put_node_files
from dlperf_tasks.remote import local
from dlperf_tasks.remote.envcapture import local_identity
from dlperf_tasks.telemetry.sampler import TelemetryConfig
from dlperf_tasks.remote.ssh import SSHPool

def plan_runs(group: str, suite_ids: list[str], params: Mapping[str, Any], settings, *,
              group_run_id: str | None = None, run_dirs: Mapping[str, str] | None = None) -> RunSet:
    """Plan every selected suite (``params["suites"]`` or all of ``suite_ids``) with the params'
    overrides, check they fit the cluster, create the run directories (``run_dirs[suite]`` or
    ``<work_dir>/<run_id>``). A re-run of the same ``group_run_id`` reuses its run ids."""
    overrides = Overrides.from_params(params)
    plans = []
    for suite_id in params.get("suites") or sorted(suite_ids):
        try:
            plans.append((suite_id, plan(load_suite(suite_id, settings.catalog_path), overrides)))
        except DlperfError as exc:
            raise NonRetriable(f"suite {suite_id}: {exc}") from None
    check_fits(sorted({c.topology for _, p in plans for c in p.cells}), settings)
    record_path = group_run_record(settings.work_dir, group, group_run_id) if group_run_id else None
    known = (read_json(record_path) or {}) if record_path else {}
    known_runs = known.get("runs", {}) if known.get("dag_run_id") == group_run_id else {}
    dry_run, policy = bool(params.get("dry_run")), params.get("policy") or settings.policy
    cluster_name = "local" if settings.is_local else Path(settings.cluster).name
    runs, items = [], []
    for suite_id, p in plans:
        prev = known_runs.get(suite_id) or {}
        where = (run_dirs or {}).get(suite_id)
        rd = RunDir.at(where, suite=suite_id) if where else None
        run_id = prev.get("run_id") or (rd.run_id if rd else new_run_id(suite_id, group_run_id))
        rd = rd or RunDir.at(Path(settings.work_dir) / run_id, run_id)
        started_at = prev.get("started_at") or now_iso()
        doc = p.to_dict()
        write_plan(rd, doc, params=params, dag=group, dag_run_id=group_run_id, started_at=started_at,
                   policy=policy, cluster=cluster_name, dry_run=dry_run)
        runs.append(RunEntry(run_id=run_id, run_dir=str(rd.path), suite=suite_id, framework=p.framework,
                             image=p.image, upstream_commit=p.upstream_commit, started_at=started_at,
                             window=doc["window"], n_trials=len(p.trials), summary=p.summary(), rerun=bool(prev)))
        items += [(run_id, str(rd.path), suite_id, t.trial, p.image) for t in p.trials]
    # a DAG task's progress counts over the whole DAG run (engine.trials.display_for)
    planned_runs = tuple(r.run_id for r in runs)
    trials = tuple(TrialItem(run_id=run_id, run_dir=run_dir, suite=suite_id, trial=trial, dry_run=dry_run,
                             policy=policy, image=image, planned=len(items), planned_runs=planned_runs)
                   for run_id, run_dir, suite_id, trial, image in items)
    if record_path:
        write_json(record_path, {"dag": group, "dag_run_id": group_run_id,
                                 "runs": {r.suite: {"run_id": r.run_id, "started_at": r.started_at} for r in runs}})
    return RunSet(runs=tuple(runs), trials=trials, trial_keys=tuple(i.key for i in trials), dry_run=dry_run,
                  policy=policy, cluster=cluster_name, params=dict(params))


# --------------------------------------------------------------------------- prepare
def prepare_nodes(rd: RunDir, suite, cluster, pool, nodes: list[str], *, image: str | None,
                  capture_env: bool = True, ssh_port: int | None = None, upstream_commit: str | None = None,
                  note=None):
    """Login + pull (runtime.prepare) and env capture on ``nodes`` for one run; writes the run
    dir's node facts and env.json. Returns (runtime, facts)."""
    runtime = make_runtime(suite.container, image=image, registry=cluster.registry, launcher=suite.launcher,
                           ssh_port=ssh_port or cluster.mpi_ssh_port)
    facts = runtime.prepare(pool, nodes)
    # catalog data the suite's command reads (e.g. pytorch-bert's BERT-base config): catalog/nodefiles.py

    for n in nodes:
        put_node_files(pool, n, cluster.node(n).workdir, suite)
    for f in facts.values():
        for n in f.notes:
            note and note(f"warning: {n}")
    smi = TelemetryConfig.from_env().nvidia_smi  # the nodes' nvidia-smi, as the telemetry runs it
    env = envcapture.capture(pool, nodes, runtime, facts, upstream_commit, smi) if capture_env else {}
    rd.save_facts(facts)
    # every name and address the nodes may print, for the store's redactor and leak scanner
    rd.write(IDENTITY_FILE, envcapture.identities(pool, nodes))
    digest = next((f.image_digest for f in facts.values() if getattr(f, "image_digest", None)), None)
    rd.write("env.json", {"env": env, "nodes": [n.public_dict() for n in cluster.subset(nodes).nodes],
                          "image": image if suite.container is not None else None, "image_digest": digest})
    return runtime, facts


def prepare_local(rd: RunDir) -> None:
    """Prepare for the local cluster (this machine is the node): its environment and the
    names and addresses it may print (for redaction)."""
    rd.write("env.json", {"env": local.environment(), "image": None, "image_digest": None,
                          "nodes": [{"name": "local0", "gpus": LOCAL_MAX_PROCS}]})
    rd.write(IDENTITY_FILE, {"local0": local_identity()})


def prepare(run_set: RunSet | Mapping[str, Any], settings) -> dict[str, Any]:
    """Prepare step of a scheduled run: every node of the cluster, for every run of the set
    (local cluster: record this machine's environment)."""
    run_set = RunSet.of(run_set)
    if run_set.dry_run:
        return {"skipped": "dry run"}
    reruns = [r for r in run_set.runs if r.rerun]
    if slurmitem.is_slurm(settings):
        return prepare_slurm(run_set, settings, reruns)
    if reruns and not settings.is_local:
        # the scheduled run is running again: a worker killed before may have left the run's
        # trial running and its node leases held; clear them before anything starts
        _, problems = clean_runs(reruns, list(run_set.trial_keys), settings)
        if problems:
            raise Retriable("cleaning what the previous attempt of this run left failed: " + "; ".join(problems))
    if settings.is_local:
        for run in run_set.runs:
            prepare_local(RunDir(Path(run.run_dir), run.run_id))
        return {"nodes": ["local0"]}

    cluster = load_cluster(settings)
    try:
        with SSHPool(cluster) as pool:
            for run in run_set.runs:
                rd = RunDir(Path(run.run_dir), run.run_id)
                prepare_nodes(rd, load_suite(run.suite, settings.catalog_path), cluster, pool, list(cluster.names),
                              image=cluster.resolve_image(run.image), upstream_commit=run.upstream_commit)
    except RemoteError as exc:
        raise Retriable(f"prepare on cluster {cluster.name}: {exc}") from None
    return {"nodes": list(cluster.names)}


def prepare_slurm(run_set: RunSet, settings, reruns: list) -> dict[str, Any]:
    """Prepare step on a Slurm cluster: a re-run's jobs left from its earlier attempt cancelled, the
    partition, account, QoS and reservation checked on the login node (one error naming the file and
    field, before anything is submitted), the nodes Slurm reports drained or down named. No node is
    prepared: the scheduler places each trial's job; the catalog files go to the shared work dir with it."""
    if reruns:
        _, problems = slurmitem.cancel_run_jobs(settings, [r.run_id for r in reruns])
        if problems:
            raise Retriable("cancelling what the previous attempt of this run left failed: " + "; ".join(problems))
    cluster = slurmitem.slurm_cluster(settings)
    login = cluster.login_names[0]
    try:
        with SSHPool(cluster.login_cluster()) as pool:
            validate_before_submit(cluster, pool, login)
            notes = slurmitem.unavailable_notes(cluster, pool, login)
    except RemoteError as exc:
        raise NonRetriable(f"prepare on Slurm cluster {cluster.name}: {exc}") from None
    return {"slurm": cluster.slurm.partition, "unavailable": notes}

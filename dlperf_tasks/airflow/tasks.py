"""What each task of a dlperf DAG does, as plain functions (the DAG factory wraps them).

plan -> prepare -> trial (mapped, one per trial) -> collect -> aggregate -> report -> publish,
and cleanup (a teardown that always runs).

Everything heavy (catalog, planner, remote layer, statistics, store, pandas, boto3,
paramiko, docker, matplotlib) is imported inside the functions, never at module level, so
DAG parsing stays fast. Failures are classified: :class:`NonRetriable` (bad params, a
broken suite, fail_fast policy) becomes ``AirflowFailException`` in the operators; a
:class:`Retriable` trial failure (node unreachable, launch failure, timeout, hang) is raised
while retries remain and recorded as the trial's status on the last try.

A DAG run may cover several suites (the mxnet DAG runs mxnet-bert and mxnet-resnet50);
each suite gets its own run id and run directory ``<work_dir>/<run_id>/`` holding
``plan.json``, ``env.json``, ``logs/...``, ``trials/<key>.json``, ``result.json``,
``report.md`` and ``plots/``, which publish copies to the store.

Re-runs: the run id of a suite is fixed for a DAG run (``<work_dir>/dag-runs/<hash>.json``
remembers it), trial keys are deterministic, and a trial whose valid result (status OK, logs
present) is already in the run directory is not run again. So clearing a DAG run and running
it again only runs the missing or invalid trials, and every trial is counted once.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import secrets
import time
from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.airflow.settings import DlperfSettings


class NonRetriable(Exception):
    """A failure that retrying cannot fix (the operators raise AirflowFailException)."""


class Retriable(Exception):
    """A failure worth another try (node unreachable, launch failure, timeout, hang)."""


# --------------------------------------------------------------------------- helpers
def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def dag_run_record(work_dir: str | os.PathLike, dag_name: str, dag_run_id: str) -> Path:
    """Where the run ids of one DAG run are remembered (so a cleared, re-run DAG run reuses them)."""
    h = hashlib.sha1(f"{dag_name}\0{dag_run_id}".encode()).hexdigest()[:20]
    return Path(work_dir) / "dag-runs" / f"{h}.json"


def new_run_id(suite: str, dag_run_id: str | None) -> str:
    """``<suite>-<UTC yyyymmddThhmmss>-<6 hex>``: path safe, sortable, unique per DAG run."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    salt = hashlib.sha1(f"{dag_run_id}/{suite}/{secrets.token_hex(4)}".encode()).hexdigest()[:6]
    return f"{suite}-{stamp}-{salt}"


def result_to_dict(r) -> dict[str, Any]:
    """TrialResult -> JSON-safe dict (XCom); :func:`result_from_dict` is the inverse."""
    m = r.metric
    return {
        "trial": r.trial.to_dict(), "status": r.status.value, "reason": r.reason,
        "metric": None if m is None else {"value": m.value, "kind": m.kind.value, "memory_mib": m.memory_mib,
                                          "throughput": m.throughput},
        "samples": [[s.iteration, s.value, s.unit, s.rank, s.timestamp, s.memory_mib] for s in r.samples],
        "log_paths": list(r.log_paths), "nodes": list(r.nodes), "exit_codes": dict(r.exit_codes),
        "started_at": r.started_at, "finished_at": r.finished_at,
    }


def result_from_dict(d: Mapping[str, Any]):
    from dlperf_tasks.model import MetricKind, Sample, Trial, TrialMetric, TrialResult, TrialStatus

    m = d.get("metric")
    return TrialResult(
        trial=Trial.from_dict(d["trial"]), status=TrialStatus(d["status"]), reason=d.get("reason", ""),
        metric=None if m is None else TrialMetric(value=m["value"], kind=MetricKind(m["kind"]),
                                                  memory_mib=m.get("memory_mib"), throughput=m.get("throughput")),
        samples=[Sample(iteration=s[0], value=s[1], unit=s[2], rank=s[3], timestamp=s[4], memory_mib=s[5])
                 for s in d.get("samples", [])],
        log_paths=list(d.get("log_paths", [])), nodes=list(d.get("nodes", [])),
        exit_codes=dict(d.get("exit_codes", {})), started_at=d.get("started_at"), finished_at=d.get("finished_at"),
    )


def _write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def _read_json(path: Path) -> Any:
    """The JSON document at ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _cluster(settings: DlperfSettings):
    """The inventory of the configured cluster (None for ``local``)."""
    if settings.is_local:
        return None
    from dlperf_tasks.errors import RemoteError
    from dlperf_tasks.remote.inventory import Cluster

    try:
        cluster = Cluster.from_yaml(settings.cluster)
    except (OSError, RemoteError) as exc:
        raise NonRetriable(f"[dlperf] cluster {settings.cluster}: {exc}") from None
    return with_registry_connection(cluster, settings.registry_conn_id)


def with_registry_connection(cluster, conn_id: str):
    """The cluster, with the registry password (and login) from the Airflow connection
    ``conn_id`` when the inventory's ``password_env`` gives none. Outside a task, or without
    such a connection, the cluster is returned unchanged (login then fails naming the variable)."""
    import dataclasses

    reg = cluster.registry
    if reg is None or not conn_id or reg.resolve_password():
        return cluster
    try:
        from airflow.sdk import Connection

        conn = Connection.get(conn_id)
    except Exception:  # noqa: BLE001 - no such connection / not inside a task: keep the inventory's
        return cluster
    if not getattr(conn, "password", None):
        return cluster
    if conn.host and conn.host.strip() != reg.server:
        raise NonRetriable(f"connection {conn_id}: host {conn.host!r} is not the inventory's registry {reg.server!r}")
    reg = dataclasses.replace(reg, password=conn.password,
                              **({"username": conn.login, "username_env": None} if conn.login else {}))
    return dataclasses.replace(cluster, registry=reg)


# --------------------------------------------------------------------------- plan
def plan_run(dag_name: str, suite_ids: list[str], conf: Mapping[str, Any] | None, settings: DlperfSettings,
             dag_run_id: str | None = None) -> dict[str, Any]:
    """Validate the params, plan every selected suite, create the run directories.

    Returns ``{"runs": [...], "trials": [item, ...], "dry_run": bool, "policy": str}`` where each
    trial item is what one mapped trial task needs.
    """
    from dlperf_tasks.airflow.params import ParamsError, validate_conf
    from dlperf_tasks.errors import DlperfError

    try:
        params = validate_conf(conf, suite_ids, settings.policy)
    except ParamsError as exc:
        raise NonRetriable(f"invalid run parameter {exc}") from None
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.plan import Overrides, plan

    overrides = {k: params[k] for k in ("batch_sizes", "precisions", "topologies", "trials", "warmup_iters",
                                        "measure_iters", "image_tag", "xla") if k in params}
    plans = []
    for suite_id in params["suites"] or sorted(suite_ids):
        try:
            plans.append((suite_id, plan(load_suite(suite_id), Overrides.from_dict(overrides))))
        except DlperfError as exc:
            raise NonRetriable(f"suite {suite_id}: {exc}") from None
    check_fits(sorted({c.topology for _, p in plans for c in p.cells}), settings)
    runs, items = [], []
    record_path = dag_run_record(settings.work_dir, dag_name, dag_run_id) if dag_run_id else None
    known = _read_json(record_path) if record_path else None
    known_runs = (known or {}).get("runs", {}) if (known or {}).get("dag_run_id") == dag_run_id else {}
    for suite_id, p in plans:
        prev = known_runs.get(suite_id) or {}
        run_id = prev.get("run_id") or new_run_id(suite_id, dag_run_id)
        started_at = prev.get("started_at") or _now_iso()
        run_dir = Path(settings.work_dir) / run_id
        plan_doc = p.to_dict()
        _write_json(run_dir / "plan.json", {**plan_doc, "params": params, "dag": dag_name, "dag_run_id": dag_run_id})
        runs.append({"run_id": run_id, "run_dir": str(run_dir), "suite": suite_id, "framework": p.framework,
                     "image": p.image, "upstream_commit": p.upstream_commit, "started_at": started_at,
                     "window": plan_doc["window"], "n_trials": len(p.trials), "summary": p.summary(),
                     "rerun": bool(prev)})
        for t in p.trials:
            items.append({"run_id": run_id, "run_dir": str(run_dir), "suite": suite_id,
                          "trial": t.trial.to_dict(), "trial_id": t.id, "key": t.trial.key,
                          "dry_run": params["dry_run"], "policy": params["policy"],
                          "timeout_s": p.timeout_s, "hang_timeout_s": p.hang_timeout_s, "image": p.image})
    if record_path:
        _write_json(record_path, {"dag": dag_name, "dag_run_id": dag_run_id,
                                  "runs": {r["suite"]: {"run_id": r["run_id"], "started_at": r["started_at"]}
                                           for r in runs}})
    return {"runs": runs, "trials": items, "trial_keys": [i["key"] for i in items],
            "dry_run": params["dry_run"], "policy": params["policy"],
            "cluster": "local" if settings.is_local else Path(settings.cluster).name, "params": params}


LOCAL_MAX_PROCS = 8  # "GPUs" per node on the local cluster = worker processes on this machine


def check_fits(topologies, settings: DlperfSettings) -> None:
    """Every topology must fit the configured cluster (checked before any node is touched)."""
    if settings.is_local:
        have_nodes, have_gpus, where = 1, LOCAL_MAX_PROCS, "the local cluster (this machine)"
    else:
        cluster = _cluster(settings)
        have_nodes, have_gpus = len(cluster.nodes), max(n.gpus for n in cluster.nodes)
        where = f"cluster {getattr(cluster, 'name', settings.cluster)}"
    for topo in topologies:
        if topo.nodes > have_nodes:
            raise NonRetriable(f"invalid run parameter topologies: {topo.name} needs {topo.nodes} nodes; "
                               f"{where} has {have_nodes}")
        if topo.gpus_per_node > have_gpus:
            raise NonRetriable(f"invalid run parameter topologies: {topo.name} needs {topo.gpus_per_node} "
                               f"GPUs per node; {where} has at most {have_gpus}")


# --------------------------------------------------------------------------- prepare
def local_env() -> dict[str, Any]:
    """Environment capture of this machine (no IPs, no user names)."""
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(terse=True),
                           "cpu_count": os.cpu_count(), "runtime": "host"}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda_available"] = bool(torch.cuda.is_available())
        if env["cuda_available"]:
            env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        env["torch"] = None
    return env


def prepare(plan_out: Mapping[str, Any], settings: DlperfSettings) -> dict[str, Any]:
    """Log in, pull images and capture the environment of the nodes (local: this machine)."""
    if plan_out["dry_run"]:
        return {"env": {}, "nodes": [], "skipped": "dry run"}
    images: dict[str, dict[str, Any]] = {}
    reruns = [r for r in plan_out["runs"] if r.get("rerun")]
    if reruns and not settings.is_local:
        # the DAG run is running again: a worker killed before may have left the run's trial
        # running and its node leases held; clear them before anything starts
        _, problems = clean_runs(reruns, plan_out.get("trial_keys", []), settings)
        if problems:
            raise Retriable("cleaning what the previous attempt of this DAG run left failed: " + "; ".join(problems))
    if settings.is_local:
        env = local_env()
        nodes = [{"name": "local0", "gpus": os.cpu_count() or 1}]
    else:
        env, nodes, images = _remote_prepare(plan_out, settings)
    for run in plan_out["runs"]:
        _write_json(Path(run["run_dir"]) / "env.json", {"env": env, "nodes": nodes})
    return {"env": env, "nodes": nodes, "images": images}


FACTS_FILE = "node-facts.json"  # per run dir: what prepare learnt about each node (read by the trials)


def _remote_prepare(plan_out: Mapping[str, Any], settings: DlperfSettings) -> tuple[dict, list, dict]:
    """Registry login + image pull (runtime.prepare) and env capture on every node, per suite.

    The image is the suite's, or the cluster's mirror of it (inventory ``images:``); the node
    facts (image digest, container flags the node's runtime refuses) go to ``node-facts.json``
    in the run directory, where the trial tasks read them."""
    import dataclasses

    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.errors import RemoteError
    from dlperf_tasks.remote import envcapture
    from dlperf_tasks.remote.runtime import make_runtime
    from dlperf_tasks.remote.ssh import SSHPool

    cluster = _cluster(settings)
    names = list(cluster.names)
    env: dict[str, Any] = {}
    images: dict[str, dict[str, Any]] = {}
    pool = SSHPool(cluster)
    try:
        for run in plan_out["runs"]:
            suite = load_suite(run["suite"])
            image = cluster.resolve_image(run.get("image"))
            runtime = make_runtime(suite.container, image=image, registry=cluster.registry, launcher=suite.launcher,
                                   ssh_port=cluster.mpi_ssh_port)
            facts = runtime.prepare(pool, names)
            env[run["suite"]] = envcapture.capture(pool, names, runtime, facts, run.get("upstream_commit"))
            _write_json(Path(run["run_dir"]) / FACTS_FILE, {n: dataclasses.asdict(f) for n, f in facts.items()})
            digest = next((f.image_digest for f in facts.values() if f.image_digest), None)
            images[run["suite"]] = {"image": image if suite.container is not None else None, "digest": digest}
    except RemoteError as exc:
        raise Retriable(f"prepare on cluster {cluster.name}: {exc}") from None
    finally:
        pool.close()
    return env, [n.public_dict() for n in cluster.nodes], images


# --------------------------------------------------------------------------- trials
def dry_run_commands(item: Mapping[str, Any]) -> list[str]:
    """The shell-quoted commands a trial would run on each node (shown by dry runs)."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.frameworks import get
    from dlperf_tasks.model import Trial
    from dlperf_tasks.smoke.local_runner import local_nodes

    trial = Trial.from_dict(item["trial"])
    fw = get(trial.cell.framework)
    settings = load_suite(item["suite"]).launcher
    nodes = local_nodes(trial.cell.topology.nodes, trial.cell.topology.gpus_per_node)
    ranks = range(1) if fw.launch_mode == "mpi" else range(trial.cell.topology.nodes)
    return [fw.launch(trial, r, nodes, settings).shell() for r in ranks]


def run_trial(item: Mapping[str, Any], settings: DlperfSettings, *, try_number: int = 1,
              max_tries: int = 1) -> dict[str, Any]:
    """Run one trial; returns its result dict (status OK or the reason it is invalid)."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.frameworks import get
    from dlperf_tasks.model import Trial, TrialResult, TrialStatus

    trial = Trial.from_dict(item["trial"])
    if item.get("dry_run"):
        res = TrialResult(trial=trial, status=TrialStatus.NOT_RUN, reason="dry run")
        return {**result_to_dict(res), "commands": dry_run_commands(item)}
    run_dir = Path(item["run_dir"])
    done = reusable_result(run_dir, item)
    if done is not None:  # a re-run of the DAG run: this trial already has a valid result
        return {**done, "reused": True}
    suite = load_suite(item["suite"])
    fw = get(suite.framework)
    if settings.is_local:
        from dlperf_tasks.smoke import local_runner

        res = local_runner.run_trial(trial, fw, suite.launcher, run_dir, timeout_s=suite.timeout_s,
                                     hang_timeout_s=suite.hang_timeout_s)
    else:
        res = _remote_run_trial(trial, suite, fw, run_dir, settings, item["run_id"], image=item.get("image"),
                                attempt=try_number)
    out = result_to_dict(res)
    _write_json(run_dir / "trials" / f"{trial.key}.json", out)
    if res.status.retriable and try_number < max_tries:
        raise Retriable(f"trial {trial.id}: {res.status.value}: {res.reason} (try {try_number} of {max_tries})")
    if res.status != TrialStatus.OK and item.get("policy") == "fail_fast":
        raise NonRetriable(f"trial {trial.id}: {res.status.value}: {res.reason} (policy fail_fast)")
    return out


def trial_file(run_dir: str | os.PathLike, key: str) -> Path:
    return Path(run_dir) / "trials" / f"{key}.json"


def reusable_result(run_dir: str | os.PathLike, item: Mapping[str, Any]) -> dict[str, Any] | None:
    """The trial's result already in ``run_dir`` when it is valid (status OK, same trial, every log
    file present); None means the trial must run (missing, invalid, or from another plan)."""
    done = _read_json(trial_file(run_dir, item["key"]))
    if not isinstance(done, dict) or done.get("status") != "OK":
        return None
    if done.get("trial") != json.loads(json.dumps(item["trial"])):
        return None
    logs = done.get("log_paths") or []
    if not logs or not all((Path(run_dir) / p).is_file() for p in logs):
        return None
    return done


_STOP_EVENTS: dict[str, Any] = {}


def _stop_key(run_id: str, trial_key: str) -> str:
    return f"{run_id}/{trial_key}"


def _load_facts(run_dir: Path, nodes: list[str]):
    """NodeFacts of ``nodes`` written by prepare (None: not there, the trial probes the nodes itself)."""
    from dlperf_tasks.remote.runtime import NodeFacts

    doc = _read_json(run_dir / FACTS_FILE)
    if not isinstance(doc, dict) or not all(n in doc for n in nodes):
        return None
    try:
        return {n: NodeFacts(**doc[n]) for n in nodes}
    except TypeError:
        return None


def _remote_run_trial(trial, suite, fw, run_dir: Path, settings: DlperfSettings, run_id: str,
                      image: str | None = None, attempt: int = 1):
    """Lease ``topology.nodes`` free nodes (node exclusivity across runs and DAGs), run the
    trial there with the remote layer (detached jobs, watchdogs, cleanup, log copy, gate),
    release the leases. A cancelled task sets the stop event (see :func:`stop_trial`)."""
    import threading

    from dlperf_tasks.model import TrialResult, TrialStatus
    from dlperf_tasks.remote.allocation import Leases, NodeBusy
    from dlperf_tasks.remote.runtime import make_runtime
    from dlperf_tasks.remote.ssh import SSHPool
    from dlperf_tasks.remote.trial import run_trial as remote_run

    cluster = _cluster(settings)
    topo = trial.cell.topology
    fits = [n.name for n in cluster.nodes if n.gpus >= topo.gpus_per_node]
    if len(fits) < topo.nodes:
        raise NonRetriable(f"trial {trial.id}: cluster {cluster.name} has no {topo.nodes} nodes with "
                           f"{topo.gpus_per_node} GPUs")
    stop = _STOP_EVENTS.setdefault(_stop_key(run_id, trial.key), threading.Event())
    image = cluster.resolve_image(image or (suite.container.image if suite.container else None))
    runtime = make_runtime(suite.container, image=image, registry=cluster.registry, launcher=suite.launcher,
                           ssh_port=cluster.mpi_ssh_port)
    pool = SSHPool(cluster)
    deadline = time.monotonic() + settings.lease_wait_s
    busy: dict[str, str] = {}
    try:
        while not stop.is_set():
            held: list = []  # one Leases per node, taken in inventory order (node rank 0 first)
            for name in fits:
                lease = Leases(pool, [name], run_id)
                try:
                    lease.acquire()
                except NodeBusy as exc:  # leased by another run, or unreachable
                    busy[name] = str(exc)
                    continue
                held.append(lease)
                if len(held) == topo.nodes:
                    break
            try:
                if len(held) == topo.nodes:
                    group = [lease.want[0] for lease in held]
                    return remote_run(cluster, group, trial, suite, run_id, run_dir, pool=pool, runtime=runtime,
                                      facts=_load_facts(run_dir, group), attempt=attempt, stop_event=stop)
            finally:
                for lease in held:
                    lease.release()
            if time.monotonic() > deadline:
                return TrialResult(trial=trial, status=TrialStatus.NODE_UNREACHABLE,
                                   reason=f"no {topo.nodes} free node(s) within {settings.lease_wait_s:.0f} s: "
                                          + "; ".join(busy.values()))
            stop.wait(2.0 + secrets.randbelow(3000) / 1000)  # random back-off: two waiting runs do not lock-step
        return TrialResult(trial=trial, status=TrialStatus.NOT_RUN, reason="stopped while waiting for free nodes")
    finally:
        _STOP_EVENTS.pop(_stop_key(run_id, trial.key), None)
        pool.close()


def stop_trial(item: Mapping[str, Any], settings: DlperfSettings) -> None:
    """Stop a running trial (task killed / run cancelled): kill its process groups or remote jobs."""
    from dlperf_tasks.model import Trial

    trial = Trial.from_dict(item["trial"])
    if settings.is_local:
        from dlperf_tasks.smoke import local_runner

        local_runner.stop(trial.key)
        return
    event = _STOP_EVENTS.get(_stop_key(item["run_id"], trial.key))
    if event is not None:  # the running remote trial stops, kills its jobs and cleans its nodes
        event.set()


# --------------------------------------------------------------------------- collect .. publish
def collect(plan_out: Mapping[str, Any], results: list[Mapping[str, Any]], settings: DlperfSettings) -> dict:
    """Group trial results by run and list logs missing from the run's log tree.

    Both runners copy every node's log into the run directory when the trial ends (the
    remote one over SFTP in its ``finally``), so collecting is a check, not a transfer."""
    by_run: dict[str, dict[str, Any]] = {r["run_id"]: {} for r in plan_out["runs"]}
    for res in results:
        if res is None:
            continue
        suite_id = res["trial"]["cell"]["suite"]
        run = next(r for r in plan_out["runs"] if r["suite"] == suite_id)
        # keyed by trial id: a trial is counted once, whatever a re-run returned
        by_run[run["run_id"]][_trial_id(res["trial"])] = res
    missing = {}
    for run in plan_out["runs"]:
        run_dir = Path(run["run_dir"])
        lacking = [p for res in by_run[run["run_id"]].values() for p in res.get("log_paths", [])
                   if not (run_dir / p).exists()]
        missing[run["run_id"]] = lacking
    return {"results": {k: list(v.values()) for k, v in by_run.items()}, "missing_logs": missing}


def _trial_id(trial_dict: Mapping[str, Any]) -> str:
    from dlperf_tasks.model import Trial

    return Trial.from_dict(dict(trial_dict)).id


def aggregate(plan_out: Mapping[str, Any], collected: Mapping[str, Any], prepared: Mapping[str, Any] | None,
              dag_run_id: str | None = None) -> list[dict[str, Any]]:
    """Statistics per cell, written as ``result.json`` per run; returns one summary per run."""
    from dlperf_tasks.extract import dlperf_model_key
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.report.result_json import build_result, write_result
    from dlperf_tasks.stats import aggregate as cell_stats

    summaries = []
    for run in plan_out["runs"]:
        results = [result_from_dict(d) for d in collected["results"][run["run_id"]]]
        if not results:
            summaries.append({"run_id": run["run_id"], "suite": run["suite"], "result": None, "cells": []})
            continue
        cells = cell_stats(results)
        prepared = prepared or {}
        img = (prepared.get("images") or {}).get(run["suite"]) or {}
        meta = {"run_id": run["run_id"], "suite": run["suite"], "framework": run["framework"],
                "dag_run_id": dag_run_id, "started_at": run["started_at"], "finished_at": _now_iso(),
                "image": img.get("image") or run.get("image"), "image_digest": img.get("digest"),
                "upstream_commit": run.get("upstream_commit") or None,
                "cluster": {"name": plan_out.get("cluster"), "nodes": prepared.get("nodes", [])},
                "env": prepared.get("env", {}), "window": run["window"], "source": "airflow",
                "params": plan_out.get("params", {})}
        result = build_result(cells, run=meta, dlperf_model=dlperf_model_key(load_suite(run["suite"])))
        path = write_result(result, Path(run["run_dir"]) / "result.json")
        summaries.append({"run_id": run["run_id"], "suite": run["suite"], "result": str(path),
                          "cells": [{"cell_id": c["cell_id"], "median_speed": c["median_speed"],
                                     "average_speed": c["average_speed"], "speedup": c["speedup"],
                                     "n_valid": c["n_valid"], "n_invalid": c["n_invalid"], "unit": c.get("unit")}
                                    for c in result["cells"]]})
    return summaries


def report(plan_out: Mapping[str, Any], summaries: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``report.md`` (and plots, when the plotting module is there) per run."""
    from dlperf_tasks.report.markdown import render_markdown
    from dlperf_tasks.report.result_json import load_result

    out = []
    for s in summaries:
        if not s.get("result"):
            continue
        run_dir = Path(s["result"]).parent
        result = load_result(s["result"])
        (run_dir / "report.md").write_text(render_markdown(result))
        plots: list[str] = []
        try:
            from dlperf_tasks.report import plots as plotmod  # matplotlib: imported only here
        except ImportError:
            plotmod = None
        if plotmod is not None:
            for name in ("write_plots", "plot_result", "render_plots"):
                fn = getattr(plotmod, name, None)
                if fn is not None:
                    got = fn(result, run_dir / "plots")
                    plots = [str(p) for p in (got or [])]
                    break
        out.append({"run_id": s["run_id"], "suite": s["suite"], "run_dir": str(run_dir),
                    "report": str(run_dir / "report.md"), "plots": plots})
    return out


def publish(reports: list[Mapping[str, Any]], settings: DlperfSettings, dag_name: str = "",
            summaries: list[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Copy each run directory to the store (manifest last); returns where each went.

    Also writes ``<work_dir>/last-<dag>.json`` (what was published, the result table) for
    ``make run`` and humans."""
    import logging

    log = logging.getLogger("dlperf.airflow.publish")
    published = []
    store = _store(settings) if reports else None
    for r in reports:
        where = _store_publish(store, Path(r["run_dir"]), settings)
        regressions = regression_check(store, r["run_id"], log)
        published.append({"run_id": r["run_id"], "suite": r["suite"], "location": where,
                          "run_dir": r["run_dir"], "report": r.get("report"), "plots": r.get("plots", []),
                          "regressions": regressions})
    if dag_name:
        _write_json(Path(settings.work_dir) / f"last-{dag_name}.json",
                    {"dag": dag_name, "published": published, "finished_at": _now_iso(),
                     "table": result_table(summaries or [])})
    return published


def _store(settings: DlperfSettings):
    """The configured store (credentials from the environment / connections, never the URL)."""
    from dlperf_tasks.errors import StoreError
    from dlperf_tasks.store import Store

    try:
        return Store.from_settings(settings.store_url, redaction=",".join(settings.redaction) or "none")
    except StoreError as exc:
        raise NonRetriable(f"[dlperf] store_url {settings.store_url}: {exc}") from None


def _store_publish(store, run_dir: Path, settings: DlperfSettings) -> str:
    """Publish with dlperf_tasks.store (redacted logs, manifest last, index updated).

    The cluster inventory goes with it (unless the cluster is ``local``), so the nodes' host
    names, node names and user names are redacted too (IP addresses always are)."""
    from dlperf_tasks.errors import StoreError

    inventory = None if settings.is_local else settings.cluster
    try:
        return str(store.publish(run_dir, inventory=inventory))
    except StoreError as exc:
        raise Retriable(f"publish {run_dir.name} to {settings.store_url}: {exc}") from None


def regression_check(store, run_id: str, log) -> dict[str, Any]:
    """Compare the published run with its suite's history (dlperf_tasks.history.check.check_run);
    the findings go to the task log and the run's annotations. A failing check is logged and
    never fails the run (the results are published already)."""
    try:
        from dlperf_tasks.history.check import check_run

        rep = check_run(store, run_id, log=log)
    except Exception as exc:  # noqa: BLE001 - the check must not fail a published run
        log.error("regression check of %s failed (the run is published): %s: %s", run_id, type(exc).__name__, exc)
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"findings": len(rep.findings), "noisy": len(rep.noisy),
            "cells": sorted({f"{v.kind}:{v.cell_id}" for v in rep.findings}), "summary": rep.summary_lines()}


# --------------------------------------------------------------------------- cleanup
def cleanup(plan_out: Mapping[str, Any] | None, settings: DlperfSettings) -> dict[str, Any]:
    """Teardown: stop whatever is still running, clean the nodes, release leases.

    Does nothing when planning failed (no node was touched then)."""
    if not plan_out:
        return {"cleaned": [], "note": "nothing planned, nothing touched"}
    if plan_out.get("dry_run"):
        return {"cleaned": [], "note": "dry run"}
    if settings.is_local:
        from dlperf_tasks.smoke import local_runner

        stopped = sum(local_runner.stop(key) for key in plan_out.get("trial_keys", []))
        return {"cleaned": ["local0"], "stopped_process_groups": stopped}
    run_ids = {r["run_id"] for r in plan_out["runs"]}
    for key, event in list(_STOP_EVENTS.items()):
        if key.split("/", 1)[0] in run_ids:
            event.set()
    cleaned, problems = clean_runs(plan_out["runs"], plan_out.get("trial_keys", []), settings)
    if problems:
        raise Retriable("cleanup left something behind: " + "; ".join(problems))
    return {"cleaned": cleaned}


def clean_runs(runs: list[Mapping[str, Any]], trial_keys: list[str], settings: DlperfSettings) -> tuple[list, list]:
    """On every node of the cluster, for each run: remove its containers, its scratch directory
    and a lease it still holds, then list what is left. Returns (cleaned nodes, problems).

    Used by the cleanup teardown and by prepare when a DAG run is re-run (a worker killed hard
    leaves its trial's detached job and its node leases behind)."""
    from concurrent.futures import ThreadPoolExecutor

    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.errors import RemoteError
    from dlperf_tasks.remote.runtime import make_runtime
    from dlperf_tasks.remote.ssh import SSHPool

    cluster = _cluster(settings)
    pool = SSHPool(cluster)
    cleaned: list[str] = []
    problems: list[str] = []
    try:
        for run in runs:
            suite = load_suite(run["suite"])
            runtime = make_runtime(suite.container, registry=cluster.registry, launcher=suite.launcher)

            def one(name: str, run_id: str = run["run_id"], runtime=runtime) -> None:
                try:
                    runtime.cleanup(pool, name, run_id)
                    clean_node_scratch(pool, name, run_id)
                    left = run_leftovers(pool, runtime, name, run_id, list(trial_keys))
                    if left:
                        problems.append(f"{name}: {', '.join(left)}")
                    cleaned.append(name)
                except RemoteError as exc:
                    problems.append(f"{name}: {exc}")

            with ThreadPoolExecutor(max_workers=max(1, len(cluster.nodes))) as ex:
                list(ex.map(one, cluster.names))
    finally:
        pool.close()
    return sorted(set(cleaned)), problems


def run_leftovers(pool, runtime, node: str, run_id: str, trial_keys: list[str]) -> list[str]:
    """What the run left on the node: with containers, the containers labelled with the run
    (the trial's processes live in them); on the host runtime, processes whose environment
    carries one of the run's ``DLPERF_TRIAL`` keys."""
    import shlex

    from dlperf_tasks.remote.runtime import TRIAL_ENV, list_containers_command

    left = []
    if runtime.kind == "docker":
        ids = pool.run(node, list_containers_command(run_id, None, node), timeout=60).stdout.split()
        left += [f"container {i}" for i in ids]
    keys = sorted({k for k in trial_keys if k.isalnum()})
    if keys and runtime.kind != "docker":
        pattern = f"^{TRIAL_ENV}=({'|'.join(keys)})$"
        cmd = (f"for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\" 2>/dev/null | grep -Eq -- "
               f"{shlex.quote(pattern)} && p=${{f#/proc/}} && echo ${{p%/environ}}; done; true")
        left += [f"process {p}" for p in pool.run(node, cmd, timeout=60).stdout.split()]
    return left


RELEASE_RUN_LEASE = r"""
set -u
wd="$1"; run="$2"
[ -d "$wd" ] || exit 0
exec 9>"$wd/.lease.lock"
flock -w 20 9 || exit 3
if [ -d "$wd/.lease" ] && [ "$(cat "$wd/.lease/run_id" 2>/dev/null)" = "$run" ]; then rm -rf "$wd/.lease"; echo RELEASED; fi
"""


def clean_node_scratch(pool, node: str, run_id: str) -> None:
    """Remove the run's scratch directory on the node (container log mounts, MPI keys) and a
    lease the run still holds there (a trial process killed hard cannot release its own)."""
    import shlex

    from dlperf_tasks.remote.runtime import safe_name

    wd = pool.cluster.node(node).workdir.rstrip("/")
    pool.run(node, f"rm -rf {shlex.quote(f'{wd}/runs/{safe_name(run_id)}')}", timeout=60)
    pool.run(node, "bash -c " + shlex.quote(RELEASE_RUN_LEASE) + " dlperf-cleanup " + shlex.join([wd, run_id]),
             timeout=60)


def result_table(summaries: list[Mapping[str, Any]]) -> str:
    """A plain-text table of the cells (what ``make run`` prints)."""
    rows = [["cell", "median", "average", "speedup", "valid/invalid"]]
    for s in summaries:
        for c in s.get("cells", []):
            fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            rows.append([c["cell_id"], fmt(c["median_speed"]), fmt(c["average_speed"]), fmt(c["speedup"]),
                         f"{c['n_valid']}/{c['n_invalid']}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


def elapsed_since(t0: float) -> float:
    return round(time.time() - t0, 1)

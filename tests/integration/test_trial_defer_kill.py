"""A deferred trial marked failed by a user (REST API, as the UI does) while its jobs
train on the simulated cluster: the triggerer's ``on_kill`` stops the remote jobs, removes their
containers and releases the node leases within seconds, before the run's cleanup task; the trial
task instance is failed, the cleanup teardown still succeeds and nothing of the run is left.

Real parts: PostgreSQL metadata DB, Redis broker, CeleryExecutor with one worker, api-server,
scheduler, dag-processor and triggerer (tests/fixtures/celery_airflow.py); real sshd nodes,
dockerd and registry (only the GPUs are simulated by the stand-in trainer).
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.fixtures import celery_airflow
from tests.fixtures.services import start_services
from tests.integration.dag_cluster_helpers import assert_cluster_idle, site_catalog

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow]

DAG = "dlperf_pytorch"
OUR_RUN = re.compile(r"pytorch-bert-\d{8}T\d{6}-")  # the dlperf run ids this DAG's runs get


def _trial(svc, run_id: str) -> dict:
    code, body = svc.request("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=50")
    assert code == 200, body
    return next((t for t in body["task_instances"] if t["task_id"] == "trial"), {})


def _leased_by(sim, run_id: str) -> list[str]:
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.ssh import SSHPool

    c = Cluster.from_yaml(sim.yaml_path)
    with SSHPool(c) as pool:
        return [n for n in c.names if pool.run(
            n, f"cat {c.node(n).workdir.rstrip('/')}/.lease/run_id 2>/dev/null || true", timeout=30).stdout.strip()
            == run_id]


def _job_dirs(sim, run_id: str) -> list[str]:
    """The run's detached-job directories on the nodes (the run's cleanup task does not remove
    them; only the trial's finish or the trigger's on_kill does)."""
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.ssh import SSHPool

    c = Cluster.from_yaml(sim.yaml_path)
    with SSHPool(c) as pool:
        return [f"{n}:{d}" for n in c.names
                for d in pool.run(n, f"ls -1 {c.node(n).workdir.rstrip('/')}/jobs 2>/dev/null || true",
                                  timeout=30).stdout.split() if run_id in d]


def test_marking_a_deferred_trial_failed_stops_its_jobs_and_frees_its_nodes(sim_cluster_env, tmp_path):
    sim = sim_cluster_env
    # 2n8g at 1000 samples/s, global batch 512: 0.5 s per step in real time, 405 steps = ~200 s
    catalog = site_catalog(tmp_path / "catalog", "pytorch-bert", {"2n8g": 1000.0}, time_scale=1.0,
                           window=(5, 400), timeout_s=600, hang_timeout_s=300)
    pg, redis = start_services()
    svc = None
    try:
        svc = celery_airflow.start(tmp_path / "af", pg, redis, workers={"w1": 2}, extra_env={
            "DLPERF_CATALOG_PATH": str(catalog), "AIRFLOW__DLPERF__CLUSTER": str(sim.yaml_path),
            "AIRFLOW__DLPERF__STORE_URL": f"file://{tmp_path / 'store'}",
            "AIRFLOW__DLPERF__TRIAL_RETRIES": "0", "AIRFLOW__DLPERF__SCHEDULE_PYTORCH": "none"})
        end = time.monotonic() + 240
        while svc.request("GET", f"/dags/{DAG}")[0] != 200:
            assert time.monotonic() < end, svc.log("dag-processor")
            time.sleep(3)
        assert svc.request("PATCH", f"/dags/{DAG}", {"is_paused": False})[0] == 200
        conf = {"topologies": ["2n8g"], "trials": 1, "precisions": ["fp32"], "batch_sizes": [32]}
        code, dr = svc.request("POST", f"/dags/{DAG}/dagRuns", {"logical_date": None, "conf": conf})
        assert code == 200, dr
        run_id = dr["dag_run_id"]

        # wait until the trial is deferred while its containers train on both nodes
        end, dlperf_run = time.monotonic() + 400, None
        while time.monotonic() < end:
            ti = _trial(svc, run_id)
            if ti.get("state") == "deferred":
                # this DAG's runs only (pytorch-bert-<time>-<hash>; another test's suite may be pytorch-bert-int2)
                by_run: dict[str, set] = {}
                for r in sim.containers("dlperf.run", all=False):
                    if OUR_RUN.match(r["Labels"].get("dlperf.run", "")):
                        by_run.setdefault(r["Labels"]["dlperf.run"], set()).add(r["Labels"].get("dlperf.node"))
                ours = [(run, found) for run, found in by_run.items() if len(found) >= 2]
                if ours:  # (which two nodes: the lease order spreads trials over the cluster)
                    ((dlperf_run, nodes),) = ours
                    break
            assert ti.get("state") not in ("success", "failed", "upstream_failed"), ti
            time.sleep(1)
        assert dlperf_run, f"the trial never trained while deferred: {_trial(svc, run_id)}\n{svc.log('triggerer')}"
        assert sorted(_leased_by(sim, dlperf_run)) == sorted(nodes)
        assert _job_dirs(sim, dlperf_run)
        time.sleep(3)  # let it train a little

        killed_at = time.monotonic()
        code, body = svc.request("PATCH", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/trial/0",
                                 {"new_state": "failed"})
        assert code == 200, body
        gone = None
        while time.monotonic() - killed_at < 60:
            if not sim.containers(f"dlperf.run={dlperf_run}") and not _leased_by(sim, dlperf_run) \
                    and not _job_dirs(sim, dlperf_run):
                gone = time.monotonic() - killed_at
                break
            time.sleep(0.5)
        print(f"deferred trial marked failed: jobs stopped, containers gone and leases released {gone} s later")
        assert gone is not None and gone < 45, (gone, _job_dirs(sim, dlperf_run), svc.log("triggerer"))
        said = [p.name for p in (tmp_path / "af" / "logs").rglob("*.log")
                if "deferred trial killed: stopping its remote jobs" in p.read_text(errors="replace")]
        print(f"on_kill logged in trigger logs {said}, in the triggerer's output: "
              f"{'deferred trial killed' in svc.log('triggerer', 400000)}")

        end = time.monotonic() + 300
        while time.monotonic() < end:
            code, body = svc.request("GET", f"/dags/{DAG}/dagRuns/{run_id}")
            if body["state"] in ("success", "failed"):
                break
            time.sleep(2)
        code, body = svc.request("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=50")
        states = {t["task_id"]: t["state"] for t in body["task_instances"]}
        assert states["trial"] == "failed" and states["cleanup"] == "success", states
        code, dr_body = svc.request("GET", f"/dags/{DAG}/dagRuns/{run_id}")
        assert dr_body["state"] == "failed"
        plan = json.loads(next((tmp_path / "af").rglob(f"{dlperf_run}/plan.json")).read_text())
        assert_cluster_idle(sim, dlperf_run, [t["key"] for t in plan["trials"]])
    finally:
        if svc is not None:
            svc.stop()
        pg.stop()
        redis.stop()

"""Scale-out: a real service deployment (PostgreSQL metadata DB, Redis broker,
CeleryExecutor; api-server, scheduler, dag-processor, triggerer) with TWO Celery workers that
share no disk (own HOME, own dlperf work_dir each; only the object store is shared), running
``dlperf_pytorch`` on the simulated 4-node cluster, triggered through the REST API.

Checked: trials ran on both workers; the published result equals what the LocalExecutor run
of the same site catalog publishes (test_dag_cluster_e2e: medians = the configured speeds,
DLPerf rounding) cell by cell; one worker killed mid-run: its trials are retried on the other
and nothing is counted twice (each cell has exactly its planned trials); the run's staging
area holds every trial while the published prefix holds only the redacted run; no worker slot
was held while the trials trained: every trial task instance was deferred (seen in
state ``deferred`` through the REST API; every trial's trigger log shows its RemoteTrialTrigger
fired) and every trial's task log shows it resumed after its jobs ended to collect and gate.
"""

from __future__ import annotations

import re
import time

import pytest

from dlperf_tasks.store import Store
from tests.fixtures import celery_airflow
from tests.fixtures.services import start_services
from tests.integration.dag_cluster_helpers import assert_cluster_idle, site_catalog

# a slow CI machine: a worker's death costs a heartbeat timeout, a retry delay and the dead
# trial's lease TTL; the test's own waits (TEST_BUDGET_S) end before pytest's timeout, so a run
# that does not finish fails with the task instances' timeline and the services' logs
pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1800)]
TEST_BUDGET_S = 1650

# the speeds of test_dag_cluster_e2e (LocalExecutor via dag.test), a subset of its topologies
SPEEDS = {"1n1g": 101.5, "1n8g": 790.25, "2n8g": 1500.5}
TRIALS = 2
DAG = "dlperf_pytorch"


def _trial_map_indexes(log: str) -> set[int]:
    """Map indexes of the ``trial`` task instances a Celery worker executed (from its log)."""
    found = set()
    for line in log.splitlines():
        if "task_id='trial'" in line and "map_index" in line:  # "Executing workload in Celery: ... ti=TaskInstance(..)"
            m = re.search(r"map_index[=:'\"\s]+(-?\d+)", line)
            if m and int(m.group(1)) >= 0:
                found.add(int(m.group(1)))
    return found


def _in_group(pid, root: int) -> bool:
    """Whether process ``pid`` (a task instance's) descends from a worker's process ``root``."""
    from pathlib import Path

    pid = int(pid or 0)
    for _ in range(20):
        if pid <= 1:
            return False
        if pid == root:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _defer_times(logs) -> str:
    """Per trial: seconds deferred (defer -> trigger fired) and fired -> resumed (from the task logs)."""
    import datetime as dt
    import json

    out = []
    for d in sorted(logs.rglob("task_id=trial/map_index=*")):
        ev: dict = {}
        for f in d.glob("*.log"):
            for line in f.read_text(errors="replace").splitlines():
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                for k, pat in (("defer", "deferred (jobs"), ("fired", "Trigger fired event"), ("resume", "jobs ended (")):
                    if pat in str(j.get("event", "")) and k not in ev:
                        ev[k] = dt.datetime.fromisoformat(j["timestamp"].replace("Z", "+00:00"))
        if len(ev) == 3:
            out.append(f"{d.name}: deferred {(ev['fired'] - ev['defer']).total_seconds():.1f} s, "
                       f"fired->resumed {(ev['resume'] - ev['fired']).total_seconds():.1f} s")
    return "; ".join(out)


def _tis(svc, run_id: str) -> list[dict]:
    code, body = svc.request("GET", f"/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=200")
    assert code == 200, body
    return body["task_instances"]


DEFERRED: set = set()  # map indexes of trial task instances seen in state "deferred"


def _wait(svc, run_id: str, until, timeout: float, what: str, poll_s: float = 3):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        tis = _tis(svc, run_id)
        DEFERRED.update(t["map_index"] for t in tis if t["task_id"] == "trial" and t["state"] == "deferred")
        got = until(tis)
        if got:
            return got
        time.sleep(poll_s)
    timeline = "\n".join(f"  {t['task_id']}[{t['map_index']}] try {t['try_number']} {t['state']} "
                         f"{t.get('hostname') or '-'} queued {t.get('queued_when')} start {t.get('start_date')} "
                         f"end {t.get('end_date')}" for t in _tis(svc, run_id))
    raise AssertionError(f"{what} not reached in {timeout:.0f} s:\n{timeline}\nw1:\n{svc.log('w1')}\n"
                         f"w2:\n{svc.log('w2')}\ntriggerer:\n{svc.log('triggerer')}\n"
                         f"scheduler:\n{svc.log('scheduler', 12000)}")


def _kill_w1_mid_trial(svc, run_id: str, w1_work, timeout: float = 900) -> set[int]:
    """SIGKILL worker w1 while a trial task instance runs there AND w1's own work_dir holds the
    run's ``plan.json`` (w1 planned the run, or its trial pulled the staged plan). The file is
    polled every 50 ms (a trial's first half lasts only seconds before it defers), the REST API
    every 0.25 s once the file is there. Returns the map indexes that were still running on w1
    right after the kill (a trial that deferred meanwhile is not w1's)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(w1_work.glob("*/plan.json")):
            time.sleep(0.05)
            continue
        held = [t for t in _tis(svc, run_id) if t["task_id"] == "trial" and t["state"] == "running"
                and _in_group(t.get("pid"), svc.procs["w1"].pid)]
        if held:
            svc.kill_worker("w1")
            still = {t["map_index"] for t in _tis(svc, run_id) if t["task_id"] == "trial" and t["state"] == "running"}
            killed = {t["map_index"] for t in held} & still
            assert killed, f"every trial of w1 deferred before the kill: {held}"
            print(f"scale-out: killed w1 while trial(s) {sorted(killed)} ran there; w1's work_dir: "
                  f"{sorted(str(p.relative_to(w1_work)) for p in w1_work.rglob('*') if p.is_file())}")
            return killed
        time.sleep(0.25)
    raise AssertionError(f"no trial began on w1 in {timeout:.0f} s\nw1:\n{svc.log('w1')}")


def test_two_celery_workers_no_shared_disk_worker_killed(sim_cluster_env, tmp_path):
    sim = sim_cluster_env
    deadline = time.monotonic() + TEST_BUDGET_S
    catalog = site_catalog(tmp_path / "catalog", "pytorch-bert", SPEEDS, time_scale=0.05)
    store_url = f"file://{tmp_path / 'store'}"
    pg, redis = start_services()
    svc = None
    try:
        svc = celery_airflow.start(tmp_path / "af", pg, redis, workers={"w1": 2, "w2": 2}, extra_env={
            "DLPERF_CATALOG_PATH": str(catalog),
            "AIRFLOW__DLPERF__CLUSTER": str(sim.yaml_path),
            "AIRFLOW__DLPERF__STORE_URL": store_url,
            "AIRFLOW__DLPERF__TRIAL_RETRIES": "2",
            "AIRFLOW__DLPERF__LEASE_WAIT_S": "400",
            "AIRFLOW__DLPERF__SCHEDULE_PYTORCH": "none",
            # a killed worker's task instances are failed (and retried) within a minute
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "40",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "120",  # a message the dead worker had reserved ...
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "20",  # ... is found within 140 s, not 240
        })
        end = time.monotonic() + 240
        while svc.request("GET", f"/dags/{DAG}")[0] != 200:
            assert time.monotonic() < end, svc.log("dag-processor")
            time.sleep(3)
        assert svc.request("PATCH", f"/dags/{DAG}", {"is_paused": False})[0] == 200
        conf = {"topologies": list(SPEEDS), "trials": TRIALS, "precisions": ["fp32"], "batch_sizes": [32]}
        code, dr = svc.request("POST", f"/dags/{DAG}/dagRuns", {"logical_date": None, "conf": conf})
        assert code == 200, dr
        run_id = dr["dag_run_id"]

        # kill w1 while one of its processes runs a trial (as if its host went away), once that
        # trial has begun its work on w1 (its run dir in w1's own work_dir)
        killed_on_w1 = _kill_w1_mid_trial(svc, run_id, tmp_path / "af" / "host-w1" / "work", timeout=600)

        def finished(_tis):
            code, body = svc.request("GET", f"/dags/{DAG}/dagRuns/{run_id}")
            return body if body["state"] in ("success", "failed") else None

        final = _wait(svc, run_id, finished, deadline - time.monotonic(), "the DAG run's end", poll_s=1)
        tis = _tis(svc, run_id)
        assert final["state"] == "success", {(t["task_id"], t["map_index"]): t["state"] for t in tis}
        trials = [t for t in tis if t["task_id"] == "trial"]
        assert len(trials) == len(SPEEDS) * TRIALS and all(t["state"] == "success" for t in trials)
        on_w2 = _trial_map_indexes(svc.log("w2", 400000))
        assert killed_on_w1 and on_w2 and _trial_map_indexes(svc.log("w1", 400000)), (killed_on_w1, on_w2)
        # the trials w1 ran when it died were retried (try 2+) and finished on w2
        retried = {t["map_index"] for t in trials if t["try_number"] > 1}
        assert killed_on_w1 <= retried and killed_on_w1 <= on_w2, (retried, killed_on_w1, on_w2)

        # deferred: the trial task instances waited in the triggerer, not in a worker slot; each
        # trial's trigger fired (its own trigger log) and its task resumed to collect
        fired, resumed = set(), set()
        for p in (tmp_path / "af" / "logs").rglob("*.log"):
            m = re.search(r"task_id=trial/map_index=(\d+)/", str(p))
            text = p.read_text(errors="replace") if m else ""
            if ".trigger." in p.name and "Trigger fired event" in text:
                fired.add(int(m.group(1)))
            elif "jobs ended (" in text:
                resumed.add(int(m.group(1)))
        every = {t["map_index"] for t in trials}
        print(f"scale-out: trial TIs seen deferred: {sorted(DEFERRED)}; trigger fired for {sorted(fired)}; "
              f"resumed after their jobs ended: {sorted(resumed)}; {_defer_times(tmp_path / 'af' / 'logs')}")
        assert DEFERRED, "no trial task instance was ever seen deferred"
        assert fired == every and resumed == every, (fired, resumed)

        store = Store.from_url(store_url)
        runs = store.list_runs(suite="pytorch-bert")
        assert len(runs) == 1
        result = store.read_result(runs[0]["run_id"])
        cells = {c["topology"]: c for c in result["cells"]}
        assert set(cells) == set(SPEEDS)
        for topo, speed in SPEEDS.items():  # = the LocalExecutor run's cells (test_dag_cluster_e2e)
            c = cells[topo]
            assert c["median_speed"] == speed and c["average_speed"] == speed, c
            assert c["speedup"] == round(speed / SPEEDS["1n1g"], 2)
            assert c["n_valid"] == TRIALS and c["n_invalid"] == 0 and len(c["trials"]) == TRIALS  # none twice
            assert sorted(t["index"] for t in c["trials"]) == list(range(1, TRIALS + 1))
        # every trial went through the private staging area; it is not a published run
        staged = [k for k in store.backend.list_keys(f"staging/{runs[0]['run_id']}/trials/")]
        assert len(staged) == len(SPEEDS) * TRIALS
        assert all(r["run_id"] == runs[0]["run_id"] for r in store.list_runs())
        # neither worker's work_dir was the other's: each holds only what its own tasks used
        assert (tmp_path / "af" / "host-w1" / "work").is_dir() and (tmp_path / "af" / "host-w2" / "work").is_dir()
        keys = [t["trial_key"] for c in result["cells"] for t in c["trials"]]
        assert_cluster_idle(sim, runs[0]["run_id"], keys)
    finally:
        if svc is not None:
            svc.stop()
        pg.stop()
        redis.stop()

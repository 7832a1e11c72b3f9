"""Trigger dlperf_smoke through the REST API of a running Airflow (api-server + scheduler +
dag-processor + triggerer started by the ``airflow_server`` fixture, LocalExecutor, SQLite).

A conf with an injection string or a malformed topology is refused at trigger time (HTTP 400
naming the field) before any task, let alone a node, runs; a dry-run conf runs the whole
DAG through the scheduler."""

import time

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def _wait_dag(server, dag_id, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, body = server.request("GET", f"/dags/{dag_id}")
        if code == 200:
            return body
        time.sleep(3)
    raise AssertionError(f"{dag_id} never parsed:\n{server.log_tail('dag-processor')}")


def test_rest_trigger_validates_conf_then_runs(airflow_server):
    s = airflow_server
    _wait_dag(s, "dlperf_smoke")
    code, _ = s.request("PATCH", "/dags/dlperf_smoke", {"is_paused": False})
    assert code == 200

    for conf, field in [({"topologies": ["1n1g; touch /tmp/dlperf-pwned"]}, "topologies"),
                        ({"trials": 500}, "trials")]:
        code, body = s.request("POST", "/dags/dlperf_smoke/dagRuns", {"logical_date": None, "conf": conf})
        assert code == 400, (code, body)
        assert field in str(body), body
    code, runs = s.request("GET", "/dags/dlperf_smoke/dagRuns")
    assert runs["total_entries"] == 0, "a refused conf must not create a run"

    code, body = s.request("POST", "/dags/dlperf_smoke/dagRuns",
                           {"logical_date": None, "conf": {"dry_run": True, "trials": 1}})
    assert code == 200, body
    run_id = body["dag_run_id"]
    deadline = time.monotonic() + 300
    state = None
    while time.monotonic() < deadline:
        code, run = s.request("GET", f"/dags/dlperf_smoke/dagRuns/{run_id}")
        state = run["state"]
        if state in ("success", "failed"):
            break
        time.sleep(3)
    code, tis = s.request("GET", f"/dags/dlperf_smoke/dagRuns/{run_id}/taskInstances")
    states = {(t["task_id"], t["map_index"]): t["state"] for t in tis["task_instances"]}
    assert state == "success", f"{states}\n{s.log_tail('scheduler')}"
    assert states[("trial", 0)] == "success" and states[("trial", 1)] == "success"

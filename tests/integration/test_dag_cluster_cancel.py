"""Killing a running trial task of the ``dlperf_pytorch`` DAG on the simulated cluster (real
sshd nodes, dockerd, registry; only GPUs simulated by the stand-in trainer).

The kill goes the way Airflow kills a task: the task process gets SIGTERM and the task runner's
handler calls the operator's ``on_kill``. Under ``dag.test()`` the task runs inside this test
process, so a watcher thread sends SIGTERM to this process once the trial's containers run on
both nodes of a 2n8g trial. Checked: the remote jobs stop within seconds (not when the trial
would have ended), the trial task fails, the cleanup teardown still runs and succeeds, and no
container, trial process, lease or scratch directory of the run is left on any node.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests.integration.dag_cluster_helpers import (
    assert_cluster_idle, build_pytorch_dag, cluster_settings, site_catalog, state, task_states)

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow]


def test_killing_a_running_trial_stops_remote_jobs_and_cleans_nodes(airflow_db, sim_cluster_env, tmp_path,
                                                                    monkeypatch):
    sim = sim_cluster_env
    # 2n8g at 1000 samples/s, global batch 512: 0.5 s per step in real time, 405 steps = ~200 s
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", {"2n8g": 1000.0},
                                                                time_scale=1.0, window=(5, 400), timeout_s=600,
                                                                hang_timeout_s=300)))
    work = tmp_path / "work"
    cfg = cluster_settings(sim.yaml_path, f"file://{tmp_path / 'store'}", work)
    dag = build_pytorch_dag(cfg)
    seen: dict = {}

    def watcher() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            runs = [p.name for p in work.glob("pytorch-bert-*") if p.is_dir()]
            if runs:
                rows = sim.containers(f"dlperf.run={runs[0]}", all=False)
                if {r["Labels"].get("dlperf.node") for r in rows} >= {"node1", "node2"}:
                    time.sleep(3)  # let it train a little
                    seen["run_id"], seen["killed_at"] = runs[0], time.monotonic()
                    os.kill(os.getpid(), signal.SIGTERM)  # what the supervisor does to a killed task
                    while sim.containers(f"dlperf.run={runs[0]}"):
                        if time.monotonic() - seen["killed_at"] > 120:
                            return
                        time.sleep(0.2)
                    seen["gone_after_s"] = time.monotonic() - seen["killed_at"]
                    return
            time.sleep(0.5)

    th = threading.Thread(target=watcher, daemon=True)
    th.start()
    t0 = time.monotonic()
    dr = dag.test(run_conf={"topologies": ["2n8g"], "trials": 1, "precisions": ["fp32"], "batch_sizes": [32]})
    th.join(timeout=150)
    elapsed = time.monotonic() - t0
    states = task_states(dr)
    assert "killed_at" in seen, f"the trial's containers never ran on two nodes: {states}"
    print(f"killed trial: containers gone {seen.get('gone_after_s', -1):.1f} s after SIGTERM; DAG run {elapsed:.1f} s")
    assert seen.get("gone_after_s", 999) < 30, seen
    assert elapsed < 170, "the trial ran to its end instead of being stopped"
    assert states[("trial", 0)] == "failed", states
    assert states[("cleanup", -1)] == "success", states
    assert states[("publish", -1)] == "upstream_failed", states
    assert state(dr) == "failed"
    run_id = seen["run_id"]
    plan_doc = json.loads((work / run_id / "plan.json").read_text())
    assert_cluster_idle(sim, run_id, [t["key"] for t in plan_doc["trials"]])
    # no result recorded for the killed trial: a re-run of this DAG run runs it again
    assert not (work / run_id / "trials").exists() or not list((work / run_id / "trials").glob("*.json"))

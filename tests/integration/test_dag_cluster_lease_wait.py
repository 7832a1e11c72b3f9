"""A deferrable trial waits for busy nodes without holding a worker slot (``dag.test()``, the
simulated 4-node cluster).

Before, the first half of a trial waited for its node leases inside its worker slot, up to
``lease_wait_s`` (30 min by default). Under a Celery deployment with few slots, trial starts
waiting for nodes could fill every slot while the resumes that would release those nodes
waited in the queue behind them. That deadlock lasted until the lease waits ran out, as in the
scale-out test's worker-kill case. Now the start waits at most ``LEASE_SLICE_S`` in its slot. It
then defers to a timer and tries again, until ``lease_wait_s`` has passed since its first try.

Checked here with another run's leases on every node (taken over SSH, as a second controller
would):
* the trial defers on the timer while the nodes are busy (``start_again`` is called), and it
  starts and is valid once they are released;
* when the nodes never free up, the trial is recorded as not run for want of nodes, with the
  holder named. This happens after about ``lease_wait_s``, not at once and not much later.
"""

from __future__ import annotations

import threading
import time

import pytest

from dlperf_tasks.airflow import operators
from dlperf_tasks.remote import allocation
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.store import Store
from tests.integration.dag_cluster_helpers import (
    assert_cluster_idle, build_pytorch_dag, cluster_settings, site_catalog, state, task_states)

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow]

SPEEDS = {"1n1g": 101.5}
CONF = {"topologies": ["1n1g"], "trials": 1, "precisions": ["fp32"], "batch_sizes": [32]}


@pytest.fixture
def busy_nodes(sim_cluster_env):
    """Every node leased by another run ("other-controller"); yields (pool, leases); released at the end."""
    cluster = Cluster.from_yaml(sim_cluster_env.yaml_path)
    with SSHPool(cluster) as pool:
        held = [allocation.acquire(pool, n, "other-controller-run", ttl_s=300) for n in cluster.names]
        try:
            yield pool, held
        finally:
            for lease in held:
                allocation.release(pool, lease)


def _spy_start_again(monkeypatch) -> list[float]:
    """Record when the timer brought a trial back to lease again (the real method still runs)."""
    calls: list[float] = []
    real = operators.TrialOperator.start_again

    def spy(self, context, event=None):
        calls.append(time.time())
        return real(self, context, event=event)

    monkeypatch.setattr(operators.TrialOperator, "start_again", spy)
    return calls


def _only_trial(store_url: str) -> dict:
    store = Store.from_url(store_url)
    (run,) = store.list_runs(suite="pytorch-bert")
    result = store.read_result(run["run_id"])
    (cell,) = result["cells"]
    (trial,) = cell["trials"]
    return {**trial, "run_id": run["run_id"], "cell": cell}


def test_trial_waits_deferred_for_busy_nodes_then_runs(airflow_db, sim_cluster_env, busy_nodes, tmp_path,
                                                       monkeypatch):
    pool, held = busy_nodes
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", SPEEDS)))
    store_url = f"file://{tmp_path / 'store'}"
    cfg = cluster_settings(sim_cluster_env.yaml_path, store_url, tmp_path / "work", lease_wait_s=300)
    calls = _spy_start_again(monkeypatch)
    released: list[float] = []

    def free_nodes():  # the other run ends after the trial has had to wait on the timer at least once
        end = time.monotonic() + 240
        while not calls and time.monotonic() < end:
            time.sleep(0.5)
        for lease in held:
            allocation.release(pool, lease)
        released.append(time.time())

    t = threading.Thread(target=free_nodes, daemon=True)
    t.start()
    dr = build_pytorch_dag(cfg).test(run_conf=CONF)
    t.join(30)
    assert state(dr) == "success", task_states(dr)
    assert calls and released, (calls, released)
    trial = _only_trial(store_url)
    assert trial["status"] == "OK" and trial["valid"], trial
    assert trial["cell"]["median_speed"] == SPEEDS["1n1g"]
    # it waited: it came back from the timer before the nodes were free, and it ran after that
    assert calls[0] < released[0]
    assert_cluster_idle(sim_cluster_env, trial["run_id"], [trial["trial_key"]])


def test_trial_never_given_nodes_is_recorded_after_the_lease_wait(airflow_db, sim_cluster_env, busy_nodes, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", SPEEDS)))
    store_url = f"file://{tmp_path / 'store'}"
    wait_s = 50
    cfg = cluster_settings(sim_cluster_env.yaml_path, store_url, tmp_path / "work", lease_wait_s=wait_s)
    calls = _spy_start_again(monkeypatch)
    t0 = time.monotonic()
    dr = build_pytorch_dag(cfg).test(run_conf=CONF)
    elapsed = time.monotonic() - t0
    states = task_states(dr)
    assert states[("trial", 0)] == "success", states  # recorded, not failed: the run goes on to its report
    trial = _only_trial(store_url)
    assert trial["status"] == "NODE_UNREACHABLE" and not trial["valid"], trial
    assert "no 1 free node(s)" in trial["reason"] and "other-controller-run" in trial["reason"], trial["reason"]
    assert calls, "the trial never waited deferred"
    # the whole wait was lease_wait_s (the first try's slice, a timer, the rest in the last try),
    # plus the DAG's own plan/prepare/report tasks: not given up at once, not waited much longer
    assert wait_s <= elapsed <= wait_s + 120, elapsed

"""The ``dlperf_pytorch`` DAG through real Airflow (``dag.test()``) on the real test Slurm (scripts/testslurm:
slurmctld, slurmd per simulated node, slurmdbd, MUNGE, a login node over SSH; docs/slurm.md): the cluster
setting names the Slurm cluster file, every trial is a Slurm job, the trial tasks defer to the Slurm
trigger (squeue/sacct over the login node), the cleanup teardown scancels what the run left.

Only the GPUs are simulated (the stand-in trainer prints PyTorch BERT's log at the speeds the site
catalog sets, inside the suite's image through the test's pyxis stand-in). Checked: a sweep end to end
(result files as on the Docker runtime, the job in each trial record), killing a deferred trial task
(its job scancelled, nothing left in squeue), a busy partition (the job's pending reason in the task log,
then it runs), a node whose slurmd dies mid-trial (NODE_FAIL, the trial invalid with the reason).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.store.quarantine import Quarantine

from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, site_catalog, state, task_states

pytestmark = [pytest.mark.cluster, pytest.mark.slurm, pytest.mark.airflow]

CONF = {"trials": 1, "precisions": ["fp32"], "batch_sizes": [32]}


def _settings(path: Path, tmp_path: Path):
    return cluster_settings(path, f"file://{tmp_path / 'store'}", tmp_path / "work", trial_poll_s=0.5)


def _records(work: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(work.glob("*/trials/*.json"))]


def _run_jobs(c, work: Path) -> list[dict]:
    """squeue's rows of the DAG run's jobs (their names carry the run id)."""
    runs = [p.name for p in work.glob("pytorch-bert-*") if p.is_dir()]
    return [j for j in c.jobs() if runs and j["name"].startswith(f"dlperf.{runs[0]}.")]


def _running(c, work: Path) -> list[dict]:
    return _when(lambda: [j for j in _run_jobs(c, work) if j["state"] == "RUNNING"], 120, "a running job of the run")


def _long_trial_dag(c, tmp_path: Path, monkeypatch, topology: str, speed: float):
    """The DAG with one cell whose stand-in trains for minutes (a test stops it), and the work dir."""
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", {topology: speed},
                                                                time_scale=50.0, timeout_s=600, hang_timeout_s=300)))
    return build_pytorch_dag(_settings(c.yaml_path, tmp_path)), tmp_path / "work"


def _when(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_dag_runs_every_trial_as_a_slurm_job_and_writes_the_usual_results(airflow_db, slurm_cluster_clean, sim_cluster,
                                                                          tmp_path, monkeypatch, caplog, capfd):
    c = slurm_cluster_clean
    speeds = {"1n1g": 100.0, "2n1g": 190.0}
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", speeds)))
    cfg = _settings(c.yaml_path, tmp_path)
    Quarantine.for_settings(cfg).add("node1", ["test: a quarantined node becomes --exclude"])
    caplog.set_level(logging.INFO)
    dr = build_pytorch_dag(cfg).test(run_conf={**CONF, "topologies": list(speeds)})
    states = task_states(dr)
    records = _records(tmp_path / "work")
    assert state(dr) == "success", (states, [r["trial"].get("reason") for r in records])
    assert sorted(s for (t, _), s in states.items() if t == "trial") == ["success"] * 2
    run_dir = next((tmp_path / "work").glob("pytorch-bert-*"))
    result = json.loads((run_dir / "result.json").read_text())
    assert {c_["cell"]["topology"]: c_["median_speed"] for c_ in result["cells"]} == speeds
    assert (run_dir / "report.md").exists()
    for rec in records:  # the job is in the record: its id, Slurm's node list, its exit code
        t = rec["trial"]
        assert t["status"] == "OK" and len(t["exit_codes"]) == 1, t
        (name, code), = t["exit_codes"].items()
        assert name.startswith("job ") and code == 0 and t["node_names"][0].startswith("node"), t
        assert t["node_names"] == [c.wait_sacct(name.split()[1])["nodes"]], t  # Slurm's own node list
        hosts = c.run("scontrol", "show", "hostnames", t["node_names"][0]).stdout.split()
        assert hosts and "node1" not in hosts, hosts
    out, err = capfd.readouterr()
    text = caplog.text + out + err
    assert "--exclude=node1" in text and " ran " in text, text[-3000:]
    assert list((tmp_path / "store").rglob("manifest.json")), "nothing published"
    assert c.jobs() == []


def test_killing_a_deferred_trial_task_scancels_its_job(airflow_db, slurm_cluster_clean, sim_cluster, tmp_path,
                                                        monkeypatch):
    """SIGTERM to the process, as the supervisor kills a task. The job runs once squeue says so, which may
    be before the task has deferred: the kill handler scancels the trial's jobs by name at once, and the
    trigger (run inline later by dag.test()) finds the stop set, so the task ends failed either way."""
    c = slurm_cluster_clean
    dag, work = _long_trial_dag(c, tmp_path, monkeypatch, "1n1g", 100.0)
    seen: dict = {}

    def watcher() -> None:
        try:
            seen["job"] = _running(c, work)
            seen["killed_at"] = time.monotonic()
            os.kill(os.getpid(), signal.SIGTERM)  # what the supervisor does to a killed task
            _when(lambda: not _run_jobs(c, work), 60, "the job to leave squeue")
            seen["gone_after_s"] = time.monotonic() - seen["killed_at"]
        except AssertionError as exc:
            seen["error"] = str(exc)

    th = threading.Thread(target=watcher, daemon=True)
    th.start()
    dr = dag.test(run_conf={**CONF, "topologies": ["1n1g"]})
    th.join(timeout=90)
    states = task_states(dr)
    assert "error" not in seen and "gone_after_s" in seen, (seen, states)
    assert seen["gone_after_s"] < 30, seen
    assert states[("trial", 0)] == "failed", states
    assert states[("cleanup", -1)] == "success", states
    assert state(dr) == "failed"
    assert c.jobs() == []
    job_id = seen["job"][0]["id"]
    assert c.wait_sacct(job_id)["state"].startswith("CANCELLED"), c.sacct(job_id)
    c.wait_containers(lambda ids: ids == [], timeout=30)


def test_busy_partition_the_pending_reason_is_logged_then_the_job_runs(airflow_db, slurm_cluster_clean, sim_cluster,
                                                                       tmp_path, monkeypatch, caplog, capfd):
    c = slurm_cluster_clean
    data = yaml.safe_load(Path(c.yaml_path).read_text())
    data["slurm"]["partition"] = c.small_partition  # node1 only
    small = tmp_path / "slurm-debug.yaml"
    small.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", {"1n1g": 100.0})))
    blocker = c.ssh(f"sbatch --parsable -p {c.small_partition} -A {c.account} --qos {c.qos} -N1 --exclusive "
                    f"-J blocker --wrap 'sleep 300'", check=True).stdout.strip()
    c.wait_job(blocker, "RUNNING")
    work = tmp_path / "work"
    released: dict = {}

    def release() -> None:
        try:
            released["job"] = _when(lambda: [j for j in _run_jobs(c, work) if j["state"] == "PENDING"
                                             and j["reason"] in ("Resources", "Priority")], 120, "a pending job")
            time.sleep(2)  # a few polls see it pending
            c.ssh(f"scancel {blocker}", check=True)
        except AssertionError as exc:
            released["error"] = str(exc)
            c.ssh(f"scancel {blocker}")

    th = threading.Thread(target=release, daemon=True)
    th.start()
    caplog.set_level(logging.INFO)
    dag = build_pytorch_dag(_settings(small, tmp_path))
    dr = dag.test(run_conf={**CONF, "topologies": ["1n1g"]})
    th.join(timeout=30)
    assert "error" not in released, released
    assert state(dr) == "success", task_states(dr)
    out, err = capfd.readouterr()
    text = caplog.text + out + err
    job_id = released["job"][0]["id"]
    assert f"Slurm job {job_id}: pending (" in text, text[-3000:]
    assert f"Slurm job {job_id}: queued " in text and " ran " in text, text[-3000:]
    assert c.jobs() == []


def test_a_node_dying_mid_trial_makes_the_trial_invalid_with_node_fail(airflow_db, slurm_cluster_clean, sim_cluster,
                                                                       tmp_path, monkeypatch):
    c = slurm_cluster_clean
    dag, work = _long_trial_dag(c, tmp_path, monkeypatch, "2n1g", 190.0)
    killed: dict = {}

    def kill() -> None:
        try:
            job = _running(c, work)[0]
            killed["node"] = "node2" if "2" in job["nodes"] else job["nodes"].split(",")[-1]
            c.kill_slurmd(killed["node"])
        except AssertionError as exc:
            killed["error"] = str(exc)

    th = threading.Thread(target=kill, daemon=True)
    th.start()
    try:
        dr = dag.test(run_conf={**CONF, "topologies": ["2n1g"]})
    finally:
        th.join(timeout=30)
        if "node" in killed:
            c.revive_slurmd(killed["node"])
    assert "error" not in killed, killed
    recs = _records(work)
    assert len(recs) == 1, task_states(dr)
    t = recs[0]["trial"]
    assert t["status"] == "NODE_UNREACHABLE" and "NODE_FAIL" in t["reason"], t
    assert f"Slurm reports {killed['node']} is " in t["reason"], t["reason"]
    _when(lambda: not c.jobs(), 60, "the failed job's epilog")  # runs once the dead node's slurmd is back


def test_cleanup_scancels_every_job_of_the_run_and_no_other(slurm_cluster_clean, sim_cluster, tmp_path):
    """What the DAG's cleanup teardown runs after a failed or cancelled run (engine-level, no Airflow):
    the run's queued and running jobs are scancelled, a job of someone else stays."""
    import dataclasses

    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.model import Cell, Trial, Window
    from dlperf_tasks.core.topology import Topology
    from dlperf_tasks.engine import slurmitem
    from dlperf_tasks.engine.rundir import RunDir

    c = slurm_cluster_clean
    cfg = _settings(c.yaml_path, tmp_path)
    suite = dataclasses.replace(load_suite("pytorch-bert"), env={"DLPERF_STANDIN_TIME_SCALE": "50"}, env_multi_node={},
                                window=Window(5, 20))
    rd = RunDir.at(tmp_path / "run", "cleanup-run-1")
    other = c.ssh(f"sbatch --parsable -p {c.partition} -A {c.account} --qos {c.qos} -N1 -J dlperf.cleanup-run-10.x "
                  f"--wrap 'sleep 300'", check=True).stdout.strip()
    started = []
    for topo in ("4n1g", "1n1g"):  # the 4-node job pends behind `other`, the 1-node one runs
        trial = Trial(Cell(suite.id, suite.framework, suite.model, "fp32", 32, Topology.parse(topo), window=suite.window), 1)
        started.append(slurmitem.start(trial, suite, rd, cfg, image=None, attempt=1, emit=print)["slurm"]["job_id"])
    _when(lambda: {j["id"] for j in c.jobs()} >= {*started, other}, 30, "the jobs in squeue")
    cancelled, problems = slurmitem.cancel_run_jobs(cfg, [rd.run_id])
    assert sorted(cancelled) == sorted(started) and problems == []
    assert [j["id"] for j in c.jobs()] == [other]
    c.ssh(f"scancel {other}", check=True)


def test_the_triggers_of_one_run_share_one_connection_and_one_poll_per_round(slurm_cluster_clean, sim_cluster,
                                                                              tmp_path, monkeypatch):
    """Two deferred trials of one run, their triggers in one event loop as in the triggerer: one SSH pool
    for both, every round one squeue/sacct command for both jobs; each trigger fires with its job's end."""
    import asyncio

    from dlperf_tasks.airflow.slurm_trigger import SlurmJobTrigger
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.catalog.overrides import Overrides
    from dlperf_tasks.catalog.plan import plan
    from dlperf_tasks.engine import slurmitem, slurmpoll
    from dlperf_tasks.engine.rundir import RunDir

    c = slurm_cluster_clean
    cfg = _settings(c.yaml_path, tmp_path)
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert",
                                                                {"1n1g": 100.0, "2n1g": 190.0})))
    suite = load_suite("pytorch-bert", [tmp_path / "catalog"])
    rd = RunDir.at(tmp_path / "run", "shared-poll-run")
    trials = [pt.trial for pt in plan(suite, Overrides(trials=1, batch_sizes=(32,), precisions=("fp32",))).trials]
    states = [slurmitem.start(t, suite, rd, cfg, image=None, attempt=1, emit=print) for t in trials]
    pools, seen_together = [], []
    real_pool = SlurmJobTrigger._pool

    def counted(self):
        pools.append(1)
        return real_pool(self)

    monkeypatch.setattr(SlurmJobTrigger, "_pool", counted)

    async def main():
        async def first(trigger):
            async for ev in trigger.run():
                return ev.payload

        async def sample():
            while True:
                p = slurmpoll._POLLERS.get((str(c.yaml_path), rd.run_id))
                if p is not None:
                    seen_together.append(len(p.jobs))
                await asyncio.sleep(0.2)

        sampler = asyncio.create_task(sample())
        try:
            return await asyncio.wait_for(asyncio.gather(
                *(first(SlurmJobTrigger(str(c.yaml_path), s, poll_s=0.5)) for s in states)), 120)
        finally:
            sampler.cancel()

    events = asyncio.run(main())
    assert len(trials) == 2 and pools == [1]
    assert max(seen_together) == 2
    assert [e["job"]["state"] for e in events] == ["COMPLETED", "COMPLETED"], events
    assert [e["job"]["job_id"] for e in events] == [s["slurm"]["job_id"] for s in states]
    assert all(e["summary"].startswith(f"Slurm job {e['job']['job_id']}: queued ") for e in events)


def test_a_trial_not_deferred_watches_its_job_in_the_worker(airflow_db, slurm_cluster_clean, sim_cluster, tmp_path,
                                                            monkeypatch):
    """``DLPERF_DEFER_TRIALS=0``: the trial task submits and polls its job itself; same record."""
    c = slurm_cluster_clean
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", {"1n1g": 100.0})))
    cfg = cluster_settings(c.yaml_path, f"file://{tmp_path / 'store'}", tmp_path / "work", trial_poll_s=0.5,
                           defer_trials=False)
    dr = build_pytorch_dag(cfg).test(run_conf={**CONF, "topologies": ["1n1g"]})
    assert state(dr) == "success", task_states(dr)
    (rec,) = _records(tmp_path / "work")
    assert rec["trial"]["status"] == "OK" and rec["trial"]["value"] == 100.0, rec["trial"]
    assert next(iter(rec["trial"]["exit_codes"])).startswith("job ")
    assert c.jobs() == []

"""The DAG path's Slurm logic without a cluster: the run's shared poll loop (one poll per round for every
job of a run), the progress lines and end event of a job (pending reason, queue time apart from run time),
the run's job-name prefix, the squeue listing that cleanup cancels from, and the plan's fit check on a
Slurm cluster file. The poll function is the seam (the real one runs squeue/sacct over SSH)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from dlperf_tasks.core.topology import Topology
from dlperf_tasks.engine.clusterconf import check_fits
from dlperf_tasks.engine.errors import NonRetriable
from dlperf_tasks.engine.slurmitem import JobProgress, summary
from dlperf_tasks.engine.slurmpoll import PollFailed, RunPoller
from dlperf_tasks.remote import slurm_jobs
from dlperf_tasks.remote.slurm_inventory import SlurmCluster
from dlperf_tasks.remote.slurm_script import job_name, run_prefix
from dlperf_tasks.remote.slurm_jobs import JobState


class _Pool:
    closed = False

    def close(self):
        self.closed = True


def test_one_poll_per_round_serves_every_job_of_the_run():
    calls: list[list[str]] = []
    script = {"1": ["PENDING", "RUNNING", "COMPLETED"], "2": ["RUNNING", "RUNNING", "RUNNING", "FAILED"]}

    def poll(pool, login, ids):
        calls.append(list(ids))
        out = {}
        for i in ids:
            seq = script[i]
            state = seq.pop(0) if len(seq) > 1 else seq[0]
            out[i] = JobState(i, state, source="sacct" if state in ("COMPLETED", "FAILED") else "squeue")
        return out

    pool = _Pool()

    async def main():
        async def one(job_id):
            poller = RunPoller.shared(("c.yaml", "run1"), lambda: pool, "login", 0.01, poll=poll)
            async for st in poller.watch(job_id):
                if st is not None and not st.active:
                    return st.state
        return await asyncio.gather(one("1"), one("2"))

    assert asyncio.run(main()) == ["COMPLETED", "FAILED"]
    assert calls[0] == ["1", "2"]  # both jobs in one command
    assert len(calls) <= 5 and calls[-1] == ["2"]
    assert pool.closed


def test_a_login_node_that_stays_unreachable_ends_the_watch():
    def poll(pool, login, ids):
        raise OSError("connection refused")

    async def main():
        poller = RunPoller.shared(("c.yaml", "run2"), _Pool, "login", 0.0, max_failures=3, poll=poll)
        async for _ in poller.watch("7"):
            pass

    with pytest.raises(PollFailed, match="failed 3 times in a row: connection refused"):
        asyncio.run(main())


def test_progress_names_the_pending_reason_then_the_nodes_and_ends_with_sacct():
    p = JobProgress("42", submitted_at=None)
    assert "Slurm job 42: pending (0 s" in p.update(JobState("42", "PENDING"))  # no reason yet: not kept
    assert "pending (Resources)" in p.update(JobState("42", "PENDING", reason="Resources"))
    assert p.update(JobState("42", "PENDING", reason="Resources")) is None  # unchanged: no line
    line = p.update(JobState("42", "PENDING", reason="ReqNodeNotAvail, UnavailableNodes:node3"))
    assert "node(s) node3 drained or down" in line
    assert "running on node[1-2]" in p.update(JobState("42", "RUNNING", nodes="node[1-2]"))
    assert not p.ended(JobState("42", "COMPLETED", source="squeue"))  # accounting not in yet
    end = JobState("42", "COMPLETED", nodes="node[1-2]", exit_code=0, elapsed_s=31.0, queue_s=12.0, source="sacct")
    assert p.ended(end)
    ev = p.event(end)
    assert ev["job"]["job_id"] == "42" and len(ev["pending"]) == 2
    assert ev["summary"].startswith("Slurm job 42: queued 12 s (pending (Resources); pending (ReqNodeNotAvail")
    assert ev["summary"].endswith("ran 31 s on node[1-2]: COMPLETED exit code 0")
    assert summary(JobState("9", "CANCELLED"), []) == "Slurm job 9: queue time unknown, run time unknown: CANCELLED"


def test_the_run_prefix_starts_every_job_name_of_the_run_and_no_other_run():
    assert job_name("pytorch-bert-20261129T010000-ab12", "t1", 2).startswith(run_prefix("pytorch-bert-20261129T010000-ab12"))
    assert not job_name("run-10", "t1", 1).startswith(run_prefix("run-1"))
    assert run_prefix("a b$c") == "dlperf.a-b-c."


def test_own_jobs_listing_skips_what_is_not_a_job_row():
    out = "123|dlperf.run1.t1.a1\nsqueue: error: something\n 124|blocker\n"
    assert slurm_jobs.parse_own_jobs(out) == [("123", "dlperf.run1.t1.a1"), ("124", "blocker")]
    assert "squeue -h -u" in slurm_jobs.own_jobs_command()


def _slurm(gpus: int) -> SlurmCluster:
    return SlurmCluster.from_dict({"scheduler": "slurm", "login": {"host": "login1", "user": "u", "key_file": "/k"},
                                   "slurm": {"partition": "gpu", "work_dir": "/shared", "gpus_per_node": gpus}},
                                  source="slurm.yaml")


def test_plan_fit_on_slurm_bounds_gpus_per_node_and_leaves_node_counts_to_slurm():
    settings = SimpleNamespace(is_local=False, cluster="slurm.yaml")
    check_fits([Topology.parse("16n8g")], settings, _slurm(8))
    with pytest.raises(NonRetriable, match="2n16g needs 16 GPUs per node; Slurm cluster cluster has slurm.gpus_per_node 8"):
        check_fits([Topology.parse("2n16g")], settings, _slurm(8))


def test_the_nodes_slurm_reports_down_are_named():
    rows = "node2|idle|none\nnode3|down*|Not responding\nnode3|down*|Not responding\nnode4|drained|bad gpu\n"
    assert slurm_jobs.unavailable_nodes(rows) == ["node3 is down* (Not responding)", "node4 is drained (bad gpu)"]
    assert slurm_jobs.node_states_command("node[2-3]") == "sinfo -h -N -n 'node[2-3]' -o '%N|%T|%E'"
    with pytest.raises(Exception, match="not a node list"):
        slurm_jobs.node_states_command("node1; reboot")


def test_a_poller_never_crosses_event_loops():
    """dag.test() runs each trigger in an event loop of its own: the second run must not reuse the first's."""
    def poll(pool, login, ids):
        return {i: JobState(i, "COMPLETED", source="sacct") for i in ids}

    async def one(job_id):
        poller = RunPoller.shared(("c.yaml", "run3"), _Pool, "login", 0.0, poll=poll)
        async for st in poller.watch(job_id):
            if st is not None:
                return poller, st.state

    first, _ = asyncio.run(one("1"))
    second, state = asyncio.run(one("2"))
    assert state == "COMPLETED" and second is not first


def test_a_dag_dry_run_on_slurm_shows_the_sbatch_and_srun_lines_with_quarantined_nodes_excluded(tmp_path):
    import yaml

    from dlperf_tasks.airflow.settings import DlperfSettings
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.model import Cell, Trial
    from dlperf_tasks.engine.slurmitem import dry_run_lines
    from dlperf_tasks.store.quarantine import Quarantine

    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump({"name": "site", "scheduler": "slurm",
                                    "login": {"host": "login1", "user": "u", "key_file": "/k"},
                                    "slurm": {"partition": "gpu", "work_dir": "/shared", "gpus_per_node": 8}}))
    cfg = DlperfSettings(cluster=str(path), store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "w"))
    Quarantine.for_settings(cfg).add("node7", ["slow"])
    suite = load_suite("pytorch-bert")
    trial = Trial(Cell(suite.id, suite.framework, suite.model, "fp32", 32, Topology.parse("2n8g"),
                       window=suite.window), 1)
    lines = dry_run_lines(trial, suite, "run-x", cfg, image=None)
    assert lines[0].startswith("sbatch: sbatch --parsable") and "--exclude=node7" in lines[0], lines[0]
    assert "--partition=gpu" in lines[0] and "--nodes=2" in lines[0], lines[0]
    assert any(line.startswith("srun: srun ") and "--container-image=" in line for line in lines[1:]), lines


def test_the_end_event_keeps_the_allocation_seen_running():
    p = JobProgress("5")
    p.update(JobState("5", "RUNNING", nodes="node[2-3]"))
    ev = p.event(JobState("5", "COMPLETED", nodes="node2", exit_code=0, source="sacct"))
    assert ev["job"]["nodes"] == "node[2-3]" and ev["summary"].endswith("on node[2-3]: COMPLETED exit code 0")


def test_the_trial_prefix_starts_every_attempt_of_the_trial_and_no_other_trial():
    from dlperf_tasks.remote.slurm_script import trial_prefix

    for attempt in (1, 2, 12):
        assert job_name("run-1", "t1", attempt).startswith(trial_prefix("run-1", "t1"))
    assert not job_name("run-1", "t10", 1).startswith(trial_prefix("run-1", "t1"))
    assert not job_name("run-10", "t1", 1).startswith(trial_prefix("run-1", "t1"))
    long_key = "k" * 300  # a name cut at Slurm's length still starts with the (cut) prefix
    assert job_name("run-1", long_key, 3).startswith(trial_prefix("run-1", long_key))


def test_a_kill_before_the_trigger_watches_is_not_lost(monkeypatch):
    """A trial task killed after sbatch but before its trigger runs (dag.test() runs the trigger inline
    later; a real worker is killed outright): its jobs are scancelled by name at once, and the stop stays
    set for the trigger that starts afterwards, which then cancels and reports the task killed."""
    from dlperf_tasks.core.model import Cell, Trial
    from dlperf_tasks.engine import slurmitem, trials
    from dlperf_tasks.engine.runset import TrialItem

    cancelled = []
    monkeypatch.setattr(slurmitem, "is_slurm", lambda settings: True)
    monkeypatch.setattr(slurmitem, "cancel_trial_jobs", lambda settings, run, key: cancelled.append((run, key)))
    trial = Trial(Cell("pytorch-bert", "pytorch", "bert", "fp32", 32, Topology.parse("1n1g")), 1)
    item = TrialItem(run_id="run-k", run_dir="/nowhere", suite="pytorch-bert", trial=trial)
    settings = SimpleNamespace(is_local=False)
    try:
        trials.stop_trial(item, settings)
        assert cancelled == [("run-k", trial.key)]
        assert trials.stop_event("run-k", trial.key).is_set()  # what the trigger's first look finds
    finally:
        trials.stop_event("run-k", trial.key, forget=True)
    assert not trials.stop_event("run-k", trial.key, forget=True).is_set()


def test_a_failed_scancel_in_the_kill_handler_is_logged_not_raised(monkeypatch, caplog):
    from dlperf_tasks.core.errors import RemoteError
    from dlperf_tasks.core.model import Cell, Trial
    from dlperf_tasks.engine import slurmitem, trials
    from dlperf_tasks.engine.runset import TrialItem

    def fail(settings, run, key):
        raise RemoteError("login1: connection refused")

    monkeypatch.setattr(slurmitem, "is_slurm", lambda settings: True)
    monkeypatch.setattr(slurmitem, "cancel_trial_jobs", fail)
    trial = Trial(Cell("pytorch-bert", "pytorch", "bert", "fp32", 32, Topology.parse("1n1g")), 1)
    try:
        trials.stop_trial(TrialItem(run_id="run-f", run_dir="/x", suite="pytorch-bert", trial=trial),
                          SimpleNamespace(is_local=False))
        assert "scancel of its Slurm job failed: login1: connection refused" in caplog.text
        assert trials.stop_event("run-f", trial.key).is_set()
    finally:
        trials.stop_event("run-f", trial.key, forget=True)


def test_a_broken_cluster_file_in_the_kill_handler_is_logged_and_the_stop_still_set(tmp_path, caplog):
    from dlperf_tasks.core.model import Cell, Trial
    from dlperf_tasks.engine import trials
    from dlperf_tasks.engine.runset import TrialItem

    broken = tmp_path / "cluster.yaml"
    broken.write_text("scheduler: [slurm\n")  # not YAML any more
    trial = Trial(Cell("pytorch-bert", "pytorch", "bert", "fp32", 32, Topology.parse("1n1g")), 1)
    try:
        trials.stop_trial(TrialItem(run_id="run-b", run_dir="/x", suite="pytorch-bert", trial=trial),
                          SimpleNamespace(is_local=False, cluster=str(broken)))
        assert "scancel of its Slurm job failed" in caplog.text and str(broken) in caplog.text
        assert trials.stop_event("run-b", trial.key).is_set()
    finally:
        trials.stop_event("run-b", trial.key, forget=True)


# ---- the nodes an A/B confirmation run pins on a Slurm partition ----------------------------------------
# sinfo -h -N -p gpu -o '%N|%T|%G|%E' (states and suffixes as sinfo(1) "NODE STATE CODES" lists them;
# %E is "none" for a node Slurm has no reason for); node7 twice, as a node in two partitions would be
SINFO = """node1|allocated|gpu:8|none
node2|idle|gpu:a100:8(S:0-1)|none
node3|down*|gpu:8|Not responding
node4|drained|gpu:8|bad fan
node5|idle|gpu:4|none
node6|mixed|gpu:8|none
node7|idle|gpu:8|none
node7|idle|gpu:8|none
node8|idle~|gpu:8|none
"""


def _cells(*topologies: str):
    return [SimpleNamespace(topology=Topology.parse(t)) for t in topologies]


def test_pinned_nodes_are_idle_ones_first_and_never_down_drained_short_of_gpus_or_quarantined():
    from dlperf_tasks.engine.slurmitem import choose_pinned

    rows = slurm_jobs.parse_partition_nodes(SINFO)
    assert [r.name for r in rows] == [f"node{k}" for k in range(1, 9)]
    assert [(r.name, r.gpus, r.usable, r.idle) for r in rows if r.name in ("node2", "node3", "node8")] == [
        ("node2", 8, True, True), ("node3", 8, False, False), ("node8", 8, True, True)]
    avoid = {"node7": "is quarantined (dlperf cluster clear NODE)"}
    # idle nodes with 8 GPUs first (node2, node8: a powered-down node is powered up by Slurm), then the busy ones
    assert choose_pinned(rows, _cells("1n8g", "2n8g"), avoid, "gpu") == ["node2", "node8"]
    assert choose_pinned(rows, _cells("4n8g"), avoid, "gpu") == ["node2", "node8", "node1", "node6"]
    assert choose_pinned(rows, _cells("1n4g"), {}, "gpu") == ["node2"]
    with pytest.raises(NonRetriable) as exc:
        choose_pinned(rows, _cells("1n8g", "8n8g"), avoid, "gpu")
    assert str(exc.value) == (
        "A/B confirmation needs 8 node(s) with 8 GPU(s) in Slurm partition gpu; 4 usable (node2, node8, node1, node6); "
        "not usable: node3 is down* (Not responding); node4 is drained (bad fan); node5 has 4 GPU(s); "
        "node7 is quarantined (dlperf cluster clear NODE)")


def test_a_plans_own_nodes_are_the_only_candidates_in_their_order_and_each_refusal_is_named():
    from dlperf_tasks.engine.slurmitem import choose_pinned

    rows = slurm_jobs.parse_partition_nodes(SINFO)
    assert choose_pinned(rows, _cells("1n8g"), {}, "gpu", given=["node6", "node2"]) == ["node6"]
    with pytest.raises(NonRetriable, match=r"needs 2 node\(s\) with 8 GPU\(s\) in Slurm partition gpu among node4, "
                                           r"node6, node9; 1 usable \(node6\); not usable: node4 is drained \(bad fan\); "
                                           r"node9 is not in the partition$"):
        choose_pinned(rows, _cells("2n8g"), {}, "gpu", given=["node4", "node6", "node9"])
    with pytest.raises(NonRetriable, match=r"; 0 usable; not usable: none$"):
        choose_pinned([], _cells("1n1g"), {}, "gpu")


def test_the_partition_listing_command_takes_only_a_slurm_name():
    assert slurm_jobs.partition_nodes_command("gpu") == "sinfo -h -N -p gpu -o '%N|%T|%G|%E'"
    with pytest.raises(Exception, match="is not a partition name"):
        slurm_jobs.partition_nodes_command("gpu; reboot")


def test_a_pinned_runs_job_excludes_the_partitions_other_nodes_and_keeps_a_pinned_node_quarantined_since(tmp_path):
    """``_job`` builds the sbatch line: without pinning the quarantined nodes are ``--exclude``; a pinned run's
    ``--exclude`` is the partition's other nodes (a pinned node stays the run's, as on the Docker runtime)."""
    import yaml

    from dlperf_tasks.airflow.settings import DlperfSettings
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.model import Cell, Trial
    from dlperf_tasks.engine import slurmitem
    from dlperf_tasks.engine.rundir import RunDir, write_plan
    from dlperf_tasks.store.quarantine import Quarantine

    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump({"name": "site", "scheduler": "slurm", "login": {"host": "login1", "user": "u"},
                                    "slurm": {"partition": "gpu", "work_dir": "/shared", "exclude": ["node9"]}}))
    cfg = DlperfSettings(cluster=str(path), store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "w"))
    Quarantine.for_settings(cfg).add("node2", ["slow"])
    suite = load_suite("pytorch-bert")
    trial = Trial(Cell(suite.id, suite.framework, suite.model, "fp32", 32, Topology.parse("1n1g")), 1)
    excludes = lambda job: [a for a in job.sbatch_argv if a.startswith("--exclude=")]  # noqa: E731
    *_, job = slurmitem._job(trial, suite, "run-1", cfg, image=None, attempt=1)
    assert excludes(job) == ["--exclude=node2,node9"]
    *_, job = slurmitem._job(trial, suite, "run-1", cfg, image=None, attempt=1, outside=["node1", "node3", "node4"])
    assert excludes(job) == ["--exclude=node1,node3,node4,node9"]
    rd = RunDir.at(tmp_path / "run", "run-1")
    assert slurmitem.pinned_of(rd) == []
    write_plan(rd, {"cells": [], "trials": []}, params={}, dag="pytorch", dag_run_id="confirm__x", started_at="now",
               policy="continue", cluster="slurm.yaml", nodes=["node2"])
    assert slurmitem.pinned_of(rd) == ["node2"]

"""squeue / sacct output read back into job states (remote/slurm_jobs.py), Slurm's end states mapped to
trial statuses with the reason kept, and the in-flight limit of a run's submissions (remote/slurm_trial.SubmitQueue).
The sample rows are written in the formats the poll command asks for (``squeue -o '%i|%T|%r|%N|%V|%S'``,
``sacct -X -n -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList,Submit,Start,End``)."""

from __future__ import annotations

import pytest

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.core.model import TrialStatus
from dlperf_tasks.remote import slurm_jobs as sj
from dlperf_tasks.remote.slurm_trial import SubmitQueue

SQUEUE = """\
101|PENDING|Resources||2026-11-28T21:00:00|N/A
102|PENDING|QOSMaxJobsPerUserLimit||2026-11-28T21:00:01|N/A
103|RUNNING|None|node[1-2]|2026-11-28T21:00:02|2026-11-28T21:00:32
104|PENDING|ReqNodeNotAvail, UnavailableNodes:node3,node4||2026-11-28T21:00:03|N/A
"""
SACCT = """\
103|dlperf.r.k3.a1|RUNNING|0:0|00:00:40|node[1-2]|2026-11-28T21:00:02|2026-11-28T21:00:32|Unknown
105|dlperf.r.k5.a1|COMPLETED|0:0|00:01:05|node1|2026-11-28T21:00:00|2026-11-28T21:00:10|2026-11-28T21:01:15
106|dlperf.r.k6.a1|TIMEOUT|0:0|00:05:00|node2|2026-11-28T21:00:00|2026-11-28T21:00:00|2026-11-28T21:05:00
107|dlperf.r.k7.a1|NODE_FAIL|0:0|00:00:12|node[3-4]|2026-11-28T21:00:00|2026-11-28T21:00:01|2026-11-28T21:00:13
108|dlperf.r.k8.a1|FAILED|3:0|00:00:02|node1|2026-11-28T21:00:00|2026-11-28T21:00:01|2026-11-28T21:00:03
109|dlperf.r.k9.a1|CANCELLED by 1000|0:15|00:00:09|node1|2026-11-28T21:00:00|2026-11-28T21:00:01|2026-11-28T21:00:10
110|dlperf.r.k10.a1|OUT_OF_MEMORY|0:125|00:00:30|node2|2026-11-28T21:00:00|2026-11-28T21:00:01|2026-11-28T21:00:31
111|dlperf.r.k11.a1|PREEMPTED|0:0|00:00:30|node2|2026-11-28T21:00:00|2026-11-28T21:00:01|2026-11-28T21:00:31
111.batch|batch|PREEMPTED|0:0|00:00:30|node2|2026-11-28T21:00:01|2026-11-28T21:00:01|2026-11-28T21:00:31
"""


@pytest.fixture
def states():
    return sj.parse_poll(SQUEUE + "@@sacct\n" + SACCT)


def test_every_job_is_read_once_and_steps_are_ignored(states):
    assert sorted(states, key=int) == [str(i) for i in range(101, 112)]


def test_pending_reasons_are_kept_and_unavailable_nodes_named(states):
    assert sj.pending_note(states["101"]) == "pending (Resources)"
    assert sj.pending_note(states["102"]) == "pending (QOSMaxJobsPerUserLimit)"
    assert sj.pending_note(states["104"]) == "pending (ReqNodeNotAvail: node(s) node3,node4 drained or down)"
    assert states["101"].active and states["101"].queue_s is None


def test_queue_time_is_apart_from_run_time(states):
    running = states["103"]
    assert running.state == "RUNNING" and running.nodes == "node[1-2]"
    assert running.queue_s == 30 and running.elapsed_s == 40
    done = states["105"]
    assert (done.queue_s, done.elapsed_s) == (10, 65)
    assert sj.trial_record(done) == {"job_id": "105", "nodes": "node1", "state": "COMPLETED", "exit_code": 0,
                                     "queue_s": 10.0, "elapsed_s": 65.0}


@pytest.mark.parametrize("job,status,words", [
    ("105", None, ""),
    ("106", TrialStatus.TIMEOUT, "TIMEOUT"),
    ("107", TrialStatus.NODE_UNREACHABLE, "NODE_FAIL exit code 0 on node[3-4]"),
    ("108", TrialStatus.NONZERO_EXIT, "FAILED exit code 3"),
    ("109", TrialStatus.NOT_RUN, "CANCELLED (by 1000) exit code 0 signal 15"),
    ("110", TrialStatus.NONZERO_EXIT, "OUT_OF_MEMORY exit code 0 signal 125"),
    ("111", TrialStatus.LAUNCH_FAILED, "PREEMPTED"),
])
def test_end_states_map_to_trial_statuses_with_the_reason(states, job, status, words):
    got, reason = sj.end_status(states[job])
    assert got == status
    assert words in reason
    if status is not None:
        assert reason.startswith(f"slurm job {job} ")


def test_retriable_end_states_follow_the_existing_policy(states):
    assert sj.end_status(states["107"])[0].retriable and sj.end_status(states["111"])[0].retriable
    assert not sj.end_status(states["108"])[0].retriable


def test_an_active_job_has_no_end_status(states):
    with pytest.raises(ValueError, match="103"):
        sj.end_status(states["103"])


def test_durations():
    assert sj.duration_s("1-02:03:04") == 93784
    assert sj.duration_s("05:06") == 306
    assert sj.duration_s("00:00:01.500") == 1.5
    assert sj.duration_s("INVALID") is None


def test_submit_output_and_job_ids_are_checked():
    assert sj.parse_submit("4242\n") == "4242"
    assert sj.parse_submit("4242;cluster1\n") == "4242"
    with pytest.raises(RemoteError, match="not a job id"):
        sj.parse_submit("sbatch: error: Batch job submission failed: Invalid account\n")
    with pytest.raises(RemoteError, match="not a number"):
        sj.poll_command(["12", "1;reboot"])
    assert sj.cancel_command(["12", "13"]) == "scancel 12 13"
    assert sj.poll_command(["12", "13"]).count("-j 12,13") == 2


def test_submit_queue_keeps_at_most_the_limit_in_flight():
    q = SubmitQueue(max_in_flight=2, waiting=["t1", "t2", "t3"])
    assert q.to_submit() == ["t1", "t2"]
    q.submitted("t1", "1")
    q.submitted("t2", "2")
    assert q.to_submit() == []
    assert q.update({"1": sj.JobState("1", "RUNNING"), "2": sj.JobState("2", "COMPLETED", exit_code=0)}) == ["t2"]
    assert q.to_submit() == ["t3"] and q.active_job_ids() == ["1"]
    with pytest.raises(ValueError, match="max_in_flight"):
        SubmitQueue(max_in_flight=0)


def test_the_sweep_records_the_allocation_seen_running_not_sacct_s_last_row(tmp_path, monkeypatch):
    """engine/slurmsweep.py: sacct's row right at a job's end may name only the node still completing;
    the record (slurm_jobs.json) and the gated trial keep the node list squeue showed while it ran."""
    import json
    from types import SimpleNamespace

    from dlperf_tasks.core.model import Cell, Trial, TrialResult
    from dlperf_tasks.core.topology import Topology
    from dlperf_tasks.engine import slurmsweep
    from dlperf_tasks.remote.slurm_inventory import SlurmCluster

    rounds = [{"42": sj.JobState("42", "RUNNING", nodes="node[2-3]")},
              {"42": sj.JobState("42", "COMPLETED", nodes="node2", exit_code=0, elapsed_s=30.0, source="sacct")}]
    gated = []
    monkeypatch.setattr(slurmsweep.slurm_trial, "poll", lambda pool, login, ids: rounds.pop(0))

    def gate(pool, login, log_dir, trial, st, out_dir, submitted_at, pinned=None):
        gated.append(st.nodes)
        return TrialResult(trial=trial, status=TrialStatus.OK, nodes=[st.nodes])

    monkeypatch.setattr(slurmsweep.slurm_trial, "gate_job", gate)
    cluster = SlurmCluster.from_dict({"name": "site", "scheduler": "slurm", "login": {"host": "login1", "user": "u"},
                                      "slurm": {"partition": "gpu", "work_dir": "/shared"}})
    trial = Trial(Cell("pytorch-bert", "pytorch", "bert", "fp32", 32, Topology.parse("2n1g")), 1)
    saved, lines = [], []
    b = SimpleNamespace(decisions=None, retries=0, suite=SimpleNamespace(container=None), rd=SimpleNamespace(path=tmp_path, run_id="r", save_trial=saved.append),
                        display=SimpleNamespace(emit=lines.append, finished=lambda r, attempt: None))
    run = slurmsweep._Run(cluster, [trial], b, None, pool=None, login="login1")
    run.queue.submitted(trial.id, "42")
    run.jobs[trial.id], run.started[trial.id] = SimpleNamespace(log_dir="/shared/runs/r/x"), 0.0
    ran: list = []
    run.step(ran)
    assert ran == [] and any("running on node[2-3]" in line for line in lines), lines
    run.step(ran)
    assert gated == ["node[2-3]"] and [r.nodes for r in ran] == [["node[2-3]"]] and saved == ran
    rec = json.loads((tmp_path / "slurm_jobs.json").read_text())[trial.id]
    assert [(r["job_id"], r["nodes"], r["state"]) for r in rec] == [("42", "node[2-3]", "COMPLETED")]


def test_an_ended_job_never_seen_running_keeps_sacct_s_node_list():
    st = sj.JobState("7", "FAILED", nodes="node4", exit_code=1, source="sacct")
    assert sj.with_allocation(st, "") is st
    assert sj.with_allocation(st, "node[3-4]").nodes == "node[3-4]" and st.nodes == "node4"


def test_pinned_nodes_become_the_exclusion_of_the_partition_s_other_nodes():
    cmd = sj.pinned_nodes_command("gpu", ["node[3-4]"])
    assert cmd == "sinfo -h -N -p gpu -o %N; echo @@pinned; scontrol show hostnames 'node[3-4]'"
    out = "node1\nnode2\nnode3\nnode4\n@@pinned\nnode3\nnode4\n"
    assert sj.outside_pinned(out, "gpu") == ["node1", "node2"]
    with pytest.raises(RemoteError, match="pinned node.s. node9 not in partition gpu"):
        sj.outside_pinned("node1\n@@pinned\nnode9\n", "gpu")
    with pytest.raises(RemoteError, match="no pinned node names"):
        sj.outside_pinned("node1\n@@pinned\n", "gpu")
    with pytest.raises(RemoteError, match="not a node list"):
        sj.pinned_nodes_command("gpu", ["node1; reboot"])

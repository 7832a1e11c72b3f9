"""The deferrable trial's trigger against real sshd nodes: it reports exit codes,
hangs and vanished jobs, and its cancellation path (what Airflow does to a deferred task marked
failed or a cancelled run) kills the remote jobs and removes their job directories."""

from __future__ import annotations

import asyncio
import time

import pytest

from dlperf_tasks.airflow.triggers import RemoteTrialTrigger
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.jobpoll import JobsWatch
from dlperf_tasks.remote.jobs import JobCommand, is_alive, new_job_id, start_job
from dlperf_tasks.remote.ssh import SSHPool
from tests.fixtures.sshd_nodes import make_nodes, stop_nodes


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    found, path = make_nodes(tmp_path_factory.mktemp("sshd"), 2, base_octet=77)
    yield path
    stop_nodes(found)


@pytest.fixture
def pool(nodes):
    p = SSHPool(Cluster.from_yaml(nodes))
    yield p
    p.close()


def _start(pool, argv: list[str]) -> list:
    return [start_job(pool, n, JobCommand(argv=argv), new_job_id("trig")) for n in pool.cluster.names]


def _gone(pool, job) -> bool:
    return not is_alive(pool, job) and pool.run(job.node, f"test -e {job.paths.job_dir}", timeout=20).rc != 0


async def _first(trigger):
    async for event in trigger.run():
        return event.payload


def test_serialize_round_trip(nodes):
    t = RemoteTrialTrigger(str(nodes), JobsWatch(jobs=[], timeout_s=60, hang_s=30).to_dict(), poll_s=1)
    path, kwargs = t.serialize()
    assert path == "dlperf_tasks.airflow.triggers.RemoteTrialTrigger"
    assert RemoteTrialTrigger(**kwargs).serialize() == (path, kwargs)


def test_exit_codes_of_every_node(pool, nodes):
    jobs = _start(pool, ["sh", "-c", "echo step 1; sleep 1; exit 0"])
    w = JobsWatch.of(jobs, timeout_s=120, hang_s=60)
    ev = asyncio.run(asyncio.wait_for(_first(RemoteTrialTrigger(str(nodes), w.to_dict(), poll_s=0.5)), 90))
    assert ev["status"] == "exited" and ev["reason"] == ""
    assert ev["exit_codes"] == {n: 0 for n in pool.cluster.names}


def test_a_failed_node_ends_the_trial_at_once(pool, nodes):
    """One rank failing ends the poll without waiting for the others (a multi-node job cannot
    recover); nodes that ended in the same poll report their status too, the rest None."""
    first, second = pool.cluster.names[:2]
    jobs = [start_job(pool, first, JobCommand(argv=["sh", "-c", "sleep 1; exit 3"]), new_job_id("trig")),
            start_job(pool, second, JobCommand(argv=["sleep", "300"]), new_job_id("trig"))]
    w = JobsWatch.of(jobs, timeout_s=120, hang_s=60)
    ev = asyncio.run(asyncio.wait_for(_first(RemoteTrialTrigger(str(nodes), w.to_dict(), poll_s=0.5)), 90))
    assert ev["status"] == "exited" and ev["exit_codes"] == {first: 3, second: None}
    assert first in ev["reason"] and "3" in ev["reason"]
    from dlperf_tasks.remote.jobpoll import stop_jobs

    assert stop_jobs(pool, JobsWatch.from_dict(ev["watch"])) == []


def test_hang_without_log_progress(pool, nodes):
    jobs = _start(pool, ["sleep", "300"])
    w = JobsWatch.of(jobs, timeout_s=600, hang_s=3)
    ev = asyncio.run(asyncio.wait_for(_first(RemoteTrialTrigger(str(nodes), w.to_dict(), poll_s=0.5)), 90))
    assert ev["status"] == "hang" and ev["exit_codes"] == {n: None for n in pool.cluster.names}
    from dlperf_tasks.remote.jobpoll import stop_jobs

    assert stop_jobs(pool, JobsWatch.from_dict(ev["watch"])) == []
    assert all(_gone(pool, j) for j in jobs)


def test_killed_trigger_stops_the_jobs_and_cleans_the_nodes(pool, nodes):
    """A triggerer shutting down cancels the trigger without a kill: the jobs run on (the next
    triggerer polls them); a user killing the deferred task makes Airflow call on_kill: the
    jobs are stopped and their directories removed."""
    jobs = _start(pool, ["sh", "-c", "while true; do echo iter; sleep 0.2; done"])
    w = JobsWatch.of(jobs, timeout_s=600, hang_s=600)
    trigger = RemoteTrialTrigger(str(nodes), w.to_dict(), poll_s=0.5)

    async def drive():
        task = asyncio.ensure_future(_first(trigger))
        await asyncio.sleep(4)  # polling, jobs running
        assert not task.done()
        task.cancel()  # what a triggerer shutdown does
        with pytest.raises(asyncio.CancelledError):
            await task

    # a job writes its pid file a moment after start returns (setsid in the background): wait for
    # it, or a loaded machine reads "not alive" before the job has begun
    end = time.monotonic() + 20
    while not all(pool.read(j.node, j.paths.pid_file) for j in jobs) and time.monotonic() < end:
        time.sleep(0.1)
    assert all(is_alive(pool, j) for j in jobs)
    asyncio.run(drive())
    assert all(is_alive(pool, j) for j in jobs)  # not a kill: the trial goes on
    asyncio.run(trigger.on_kill())  # what the triggerer calls when the user killed the task
    assert all(_gone(pool, j) for j in jobs)


def test_a_killed_job_is_reported_vanished(pool, nodes):
    from dlperf_tasks.remote.jobpoll import poll_once
    from dlperf_tasks.remote.jobs import signal_job

    jobs = _start(pool, ["sleep", "300"])
    w = JobsWatch.of(jobs, timeout_s=600, hang_s=600)
    assert poll_once(pool, w) is None
    # the detached wrapper writes its pid file a moment after start returns (later still under load)
    deadline = time.monotonic() + 30
    while not pool.read(jobs[0].node, jobs[0].paths.pid_file) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pool.read(jobs[0].node, jobs[0].paths.pid_file)
    # the job's process group dies without writing an exit status (SIGKILL of the wrapper too; the
    # pid file goes as well: killed processes may linger as zombies where nothing reaps them)
    signal_job(pool, jobs[0], "KILL")
    pool.run(jobs[0].node, f"rm -f {jobs[0].paths.exit_file} {jobs[0].paths.pid_file}", timeout=20)
    v = poll_once(pool, w, now=w.started + 60)
    assert v is not None and v["status"] == "vanished" and jobs[0].node in v["reason"]
    from dlperf_tasks.remote.jobpoll import stop_jobs

    stop_jobs(pool, w)


def test_a_lease_taken_over_while_the_trial_runs_is_in_the_event_and_not_counted(pool, nodes):
    """The trigger renews the trial's leases; when node2's lease expired and another run took the
    node, the renewal is refused: the event's watch names node2, and the finish's rule turns
    such a trial invalid with the reason (its numbers may have shared the node)."""
    from dlperf_tasks.remote.allocation import acquire, release
    from dlperf_tasks.remote.jobpoll import lost_lease_reason

    held = [acquire(pool, n, "run-a", ttl_s=60, owner="A") for n in pool.cluster.names]
    release(pool, held[1])  # as if it had expired ...
    other = acquire(pool, "node2", "run-b", ttl_s=60, owner="B")  # ... and run-b took the node
    try:
        jobs = _start(pool, ["sh", "-c", "echo step 1; sleep 1; exit 0"])
        w = JobsWatch.of(jobs, timeout_s=120, hang_s=60, lease_ttl_s=60.0,
                         leases=[{"node": h.node, "token": h.token, "run_id": h.run_id} for h in held])
        ev = asyncio.run(asyncio.wait_for(_first(RemoteTrialTrigger(str(nodes), w.to_dict(), poll_s=0.5)), 90))
    finally:
        release(pool, other)
        release(pool, held[0])
    assert ev["status"] == "exited" and ev["watch"]["lost_leases"] == ["node2"]
    assert lost_lease_reason(ev["watch"]) == ("the lease of node(s) node2 was lost while the trial ran (another "
                                              "run may have used the node): not counted")
    assert lost_lease_reason(w.to_dict()) is None  # nothing lost: counted as the gate says


def test_lease_wait_trigger_round_trip_and_event():
    """The lease-wait timer carries the time the trial began to wait through serialization and
    back in its event (what the resumed start reads), and fires after its delay, not before."""
    import time

    from dlperf_tasks.airflow.triggers import LeaseWaitTrigger

    classpath, kwargs = LeaseWaitTrigger(0.3, 1795000000.5).serialize()
    assert classpath == "dlperf_tasks.airflow.triggers.LeaseWaitTrigger"
    trig = LeaseWaitTrigger(**kwargs)

    async def first():
        async for ev in trig.run():
            return ev

    t0 = time.monotonic()
    ev = asyncio.run(first())
    assert time.monotonic() - t0 >= 0.3
    assert ev.payload == {"waiting_since": 1795000000.5}

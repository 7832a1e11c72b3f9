"""The deferrable trial's trigger: polls a trial's detached remote jobs in Airflow's triggerer,
so no worker slot is held while the trial trains.

The polling rules (exit codes, unreachable nodes, vanished jobs, timeout, hang) and the lease
renewal are pure remote code in :mod:`dlperf_tasks.remote.jobpoll` (the in-process runner uses the
same :func:`~dlperf_tasks.remote.jobpoll.poll_once`); this class only serializes the watch, runs
the blocking SSH polls in a thread and turns a verdict into a :class:`TriggerEvent` that carries
the watch and the started trial's state back to the task (``TrialOperator.resume``).

Kwargs (stored in the metadata DB): the inventory path, the watch (jobs, limits, progress, lease
tokens) and the started trial's plain-data state; never a credential: SSH keys are read from the
inventory's key files and its nodes' SSH connections here, as the tasks do.

When the verdict is a failure (hang, timeout, a failed or vanished job, an unreachable node) the
jobs still running are killed at once, so the nodes are quiet while the task waits for a worker
to resume it (it then collects the logs and cleans the nodes). A user killing the deferred task
(mark failed/success, clear, cancel the run) makes Airflow call :meth:`on_kill`: it stops the
jobs and the telemetry loops, removes their job directories and containers, and releases the
leases. A triggerer restart or hand-over is not a kill: the jobs run on and the next triggerer
polls them (the leases last ``lease_ttl_s`` past the last renewal).

Why not the SSH provider's ``SSHRemoteJobTrigger``: it watches one job on one host reached
through an Airflow SSH connection and has no hang rule or lease renewal; a trial is one job per
node of our inventory (its own key files and jump hosts), judged together.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class RemoteTrialTrigger(BaseTrigger):
    """Fires once the trial's jobs all exited, one failed, vanished, timed out, hung or its node was lost."""

    def __init__(self, cluster_yaml: str, watch: dict[str, Any], poll_s: float = 5.0,
                 trial: dict[str, Any] | None = None):
        super().__init__()
        self.cluster_yaml = cluster_yaml
        self.watch = watch
        self.poll_s = poll_s
        self.trial = trial

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"cluster_yaml": self.cluster_yaml, "watch": self.watch, "poll_s": self.poll_s, "trial": self.trial})

    def _cluster(self):
        """The inventory with the nodes' SSH keys from their connections (polling needs no registry)."""
        from dlperf_tasks.airflow.tasks import ssh_connection
        from dlperf_tasks.remote.connections import with_ssh_connections
        from dlperf_tasks.remote.inventory import Cluster

        return with_ssh_connections(Cluster.from_yaml(self.cluster_yaml), ssh_connection)

    def _pool(self):
        from dlperf_tasks.remote.ssh import SSHPool

        return SSHPool(self._cluster())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dlperf_tasks.remote.jobpoll import JobsWatch, kill_jobs, poll_once

        w = JobsWatch.from_dict(self.watch)
        stop = self._stop_event()
        pool = await asyncio.to_thread(self._pool)
        try:
            while True:
                verdict = await asyncio.to_thread(poll_once, pool, w)
                if stop is not None and stop.is_set():  # the task was killed in this very process
                    verdict = {"status": "stopped", "exit_codes": {}, "reason": "stopped by request (task killed)"}
                self.watch = w.to_dict()
                if verdict is not None:
                    if verdict["status"] != "exited" or any(c for c in verdict["exit_codes"].values()):
                        stuck = await asyncio.to_thread(kill_jobs, pool, w)
                        if stuck:
                            self.log.warning("trial jobs would not stop on %s", ", ".join(stuck))
                    if w.lost_leases:
                        self.log.warning("leases lost on %s while the trial ran", ", ".join(w.lost_leases))
                    # unregister now: a harness may abandon this generator after its first event (no
                    # finally then), and a later cleanup of the run must not find the event to set
                    self._stop_event(forget=True)
                    yield TriggerEvent({**verdict, "watch": self.watch, "trial": self.trial})
                    return
                # polled more often while the trial is young (a short trial is noticed at once)
                await asyncio.sleep(min(self.poll_s, max(0.5, (time.time() - w.started) / 10)))
        finally:
            await asyncio.to_thread(pool.close)
            self._stop_event(forget=True)

    def _stop_event(self, forget: bool = False):
        """The in-process stop event of the trial: set by ``TrialOperator.on_kill`` when this
        trigger runs inside the task's own process (``dag.test()`` runs triggers inline, and a
        SIGTERM there reaches the task's kill handler, not the triggerer's ``on_kill``)."""
        if not self.trial:
            return None
        from dlperf_tasks.engine.trials import stop_event
        from dlperf_tasks.core.model import Trial

        return stop_event(self.trial["run_id"], Trial.from_dict(self.trial["trial"]).key, forget=forget)

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the jobs, clean the nodes, release the leases."""
        self.log.warning("deferred trial killed: stopping its remote jobs and cleaning its nodes")
        notes = await asyncio.to_thread(self._abort)
        for note in notes:
            self.log.error("%s", note)

    def _abort(self) -> list[str]:
        from dlperf_tasks.engine.trials import abort_started
        from dlperf_tasks.remote.jobpoll import JobsWatch, stop_jobs

        cluster = self._cluster()
        if self.trial:
            return abort_started({**self.trial, "watch": self.watch}, cluster)
        from dlperf_tasks.remote.ssh import SSHPool

        with SSHPool(cluster) as pool:  # a bare watch (no started trial): its jobs only
            return [f"node {n}: job would not stop" for n in stop_jobs(pool, JobsWatch.from_dict(self.watch))]


class LeaseWaitTrigger(BaseTrigger):
    """A trial waiting for busy nodes without a worker slot: fires after ``delay_s`` with the time
    the trial began to wait (``waiting_since``, epoch seconds), so its next try knows how much of
    the settings' ``lease_wait_s`` is left. The time travels in the event, which both the
    triggerer and ``dag.test()`` hand to the resumed method (``dag.test()`` drops defer kwargs)."""

    def __init__(self, delay_s: float, waiting_since: float):
        super().__init__()
        self.delay_s = float(delay_s)
        self.waiting_since = float(waiting_since)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"delay_s": self.delay_s, "waiting_since": self.waiting_since})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await asyncio.sleep(self.delay_s)
        yield TriggerEvent({"waiting_since": self.waiting_since})

"""The deferred trial's trigger on a Slurm cluster: waits for the trial's Slurm job in the triggerer.

The triggers of one DAG run share one poll loop (``engine.slurmpoll.RunPoller``): one SSH connection to
the login node, one ``squeue`` + ``sacct`` command per round for every job of the run. The task log shows
the job's pending reason while it waits (``pending (Resources)``, ``pending (ReqNodeNotAvail: node(s)
node3 drained or down)``), then the nodes it runs on; the event carries the job's sacct row and the
pending reasons seen, and the resumed task logs the queue time apart from the run time.

Kwargs (stored in the metadata DB): the cluster file's path, the started trial's plain-data state (job
id, name, log dir, login host name), the poll interval; never a credential (SSH keys come from the
cluster file's key files or the login host's SSH connection, as in the tasks).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class SlurmJobTrigger(BaseTrigger):
    """Fires once the trial's Slurm job has ended and sacct has its row (or the login node is lost)."""

    def __init__(self, cluster_yaml: str, trial: dict[str, Any], poll_s: float = 5.0):
        super().__init__()
        self.cluster_yaml = cluster_yaml
        self.trial = trial
        self.poll_s = poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"cluster_yaml": self.cluster_yaml, "trial": self.trial, "poll_s": self.poll_s})

    def _login(self):
        from dlperf_tasks.airflow.tasks import ssh_connection
        from dlperf_tasks.remote.connections import with_ssh_connections
        from dlperf_tasks.remote.slurm_inventory import SlurmCluster

        return with_ssh_connections(SlurmCluster.from_yaml(self.cluster_yaml).login_cluster(), ssh_connection)

    def _pool(self):
        from dlperf_tasks.remote.ssh import SSHPool

        return SSHPool(self._login())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dlperf_tasks.engine.slurmitem import JobProgress, lost_event
        from dlperf_tasks.engine.slurmpoll import PollFailed, RunPoller

        job = self.trial["slurm"]
        prog = JobProgress(job["job_id"], job.get("submitted_at"))
        poller = RunPoller.shared((self.cluster_yaml, self.trial["run_id"]), self._pool, job["login"], self.poll_s)
        stop = self._stop_event()
        try:
            async for st in poller.watch(job["job_id"]):
                line = prog.update(st)
                if line:
                    self.log.info("%s", line)
                if stop is not None and stop.is_set():  # the task was killed in this very process
                    await asyncio.to_thread(self._cancel)
                    self._stop_event(forget=True)
                    yield TriggerEvent({"status": "stopped", "job": None, "pending": [], "trial": self.trial,
                                        "summary": f"Slurm job {job['job_id']} cancelled (task killed)"})
                    return
                if st is not None and prog.ended(st):
                    self._stop_event(forget=True)
                    yield TriggerEvent({**prog.event(st), "trial": self.trial})
                    return
        except PollFailed as exc:
            self._stop_event(forget=True)
            yield TriggerEvent({**lost_event(job["job_id"], str(exc)), "trial": self.trial})
        finally:
            self._stop_event(forget=True)

    def _stop_event(self, forget: bool = False):
        """The in-process stop event of the trial (``dag.test()`` runs triggers inline: a SIGTERM there
        reaches the task's kill handler, which sets it)."""
        from dlperf_tasks.core.model import Trial
        from dlperf_tasks.engine.trials import stop_event

        return stop_event(self.trial["run_id"], Trial.from_dict(self.trial["trial"]).key, forget=forget)

    def _cancel(self) -> None:
        from dlperf_tasks.remote import slurm_trial
        from dlperf_tasks.remote.ssh import SSHPool

        job = self.trial["slurm"]
        with SSHPool(self._login()) as pool:
            slurm_trial.cancel(pool, job["login"], [job["job_id"]])

    async def on_kill(self) -> None:
        """The user killed the deferred task: ``scancel`` its job."""
        self.log.warning("deferred trial killed: scancel Slurm job %s", self.trial["slurm"]["job_id"])
        await asyncio.to_thread(self._cancel)

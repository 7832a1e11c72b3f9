"""The trial operator: one mapped task instance per trial, deferrable on SSH clusters.

On an SSH cluster :meth:`TrialOperator.execute` runs the first half of the trial (lease nodes,
start the detached jobs and telemetry) and defers to :class:`RemoteTrialTrigger`, which polls the
jobs in the triggerer with the in-process watcher's rules while no worker slot is held;
:meth:`TrialOperator.resume` runs the second half (copy the logs, clean the nodes, gate, record,
push to staging, release the leases) on whichever worker picks it up, and returns the same
record a non-deferred trial returns. The local runtime, dry runs, reused trials and
``DLPERF_DEFER_TRIALS=0`` run whole in the worker, as before.

A custom operator (not a TaskFlow function) because it needs ``on_kill``: when a running task
is killed, Airflow sends SIGTERM and calls :meth:`on_kill`, which stops the remote jobs (or
local process groups) of this trial and cleans the nodes. While deferred, the trigger's
``on_kill`` does that instead.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from dlperf_tasks.airflow import tasks
from dlperf_tasks.airflow.settings import DlperfSettings
from dlperf_tasks.engine.attempt import TaskTry


#: a trial's start waits for busy nodes in its worker slot at most this long at a time ...
LEASE_SLICE_S = 15.0
#: ... then waits this long deferred (no slot held) before it tries again
LEASE_RECHECK_S = 20.0


class TrialOperator(BaseOperator):
    """Run one trial (``item`` = a trial dict made by the plan task) and return its result dict.

    Retriable failures (node unreachable, launch failure, timeout, hang) are raised while
    tries remain, so Airflow retries them; anything else is recorded as the trial's status
    (or fails the run at once under policy ``fail_fast``).
    """

    template_fields = ()
    ui_color = "#d8f0ff"

    def __init__(self, *, item: dict[str, Any], dlperf_settings: DlperfSettings, deferrable: bool | None = None,
                 poll_s: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.item = item
        self.dlperf_settings = dlperf_settings
        self.deferrable = deferrable
        self.poll_s = poll_s

    def _try(self, context) -> TaskTry:
        ti = context["ti"]
        try_number = int(getattr(ti, "try_number", 1) or 1)
        max_tries = int(getattr(ti, "max_tries", self.retries) or 0) + 1  # Airflow's max_tries = retries
        return TaskTry(try_number, max_tries, self.log.info)

    def _defers(self) -> bool:
        if self.deferrable is not None:
            return self.deferrable
        return self.dlperf_settings.defer_trials  # DLPERF_DEFER_TRIALS

    def execute(self, context) -> dict[str, Any]:
        attempt = self._try(context)
        self.log.info("trial %s (try %d of %d)", self.item.get("trial_id"), attempt.number, attempt.of)
        cfg = self.dlperf_settings
        if not self._defers() or cfg.is_local or self.item.get("dry_run"):
            with _mapped_errors():
                out = tasks.run_trial(self.item, cfg, attempt)
            return self._done(out)
        return self._start(context, time.time())

    def start_again(self, context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Back from :class:`~dlperf_tasks.airflow.triggers.LeaseWaitTrigger`: lease the nodes again."""
        return self._start(context, float((event or {}).get("waiting_since") or time.time()))

    def _start(self, context, waiting_since: float) -> dict[str, Any]:
        """Lease the nodes and start the jobs, then defer to the jobs' trigger. The nodes are waited
        for in the worker slot only :data:`LEASE_SLICE_S` at a time: while they are busy the task
        defers to a timer (the slot is free for the resumes that release nodes) and tries again,
        until the settings' ``lease_wait_s`` has passed since the first try; the last try records
        the trial as not run for want of nodes (retried while tries remain), as before."""
        left = max(0.0, self.dlperf_settings.lease_wait_s - (time.time() - waiting_since))
        last = left <= LEASE_SLICE_S + LEASE_RECHECK_S  # the rest of the wait fits in one slice
        with _mapped_errors():
            got = tasks.start_trial(self.item, self.dlperf_settings, self._try(context),
                                    lease_wait_s=left if last else LEASE_SLICE_S, busy_returns=not last)
        if "waiting" in got:
            self.log.info("trial %s: no free nodes yet (%s): waiting %.0f s without a worker slot, then trying "
                          "again (%.0f s of %.0f s waited)", self.item.get("trial_id"), got["waiting"],
                          LEASE_RECHECK_S, time.time() - waiting_since, self.dlperf_settings.lease_wait_s)
            from dlperf_tasks.airflow.triggers import LeaseWaitTrigger

            self.defer(trigger=LeaseWaitTrigger(LEASE_RECHECK_S, waiting_since), method_name="start_again")
        if "started" in got:
            self._defer(got["started"])
        return self._done(got["record"])

    def _defer(self, state: dict[str, Any]) -> None:
        from dlperf_tasks.airflow.triggers import RemoteTrialTrigger

        poll_s = self.poll_s if self.poll_s is not None else self.dlperf_settings.trial_poll_s
        if "slurm" in state:  # a Slurm job: the run's jobs are polled together, no lease to renew
            from dlperf_tasks.airflow.slurm_trigger import SlurmJobTrigger

            self.log.info("trial %s submitted as Slurm job %s: deferred (squeue/sacct polled every %.1f s by the "
                          "triggerer)", self.item.get("trial_id"), state["slurm"]["job_id"], poll_s)
            self.defer(trigger=SlurmJobTrigger(cluster_yaml=str(self.dlperf_settings.cluster), trial=state,
                                               poll_s=poll_s), method_name="resume")
        watch = state.get("watch") or {}
        self.log.info("trial %s started on %s: deferred (jobs polled every %.1f s by the triggerer)",
                      self.item.get("trial_id"), ",".join(state.get("nodes") or []), poll_s)
        trial = {k: v for k, v in state.items() if k != "watch"}
        self.defer(trigger=RemoteTrialTrigger(cluster_yaml=str(self.dlperf_settings.cluster), watch=watch,
                                              poll_s=poll_s, trial=trial),
                   method_name="resume")

    def resume(self, context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Back from the trigger (maybe on another worker): collect, clean, gate, record."""
        event = dict(event or {})
        state = {**(event.pop("trial", None) or {}), "watch": event.pop("watch", None)}
        if "slurm" in state:
            self.log.info("trial %s: %s", self.item.get("trial_id"), event.get("summary"))
        self.log.info("trial %s: jobs ended (%s%s): collecting", self.item.get("trial_id"), event.get("status"),
                      f": {event['reason']}" if event.get("reason") else "")
        with _mapped_errors():
            out = tasks.resume_trial(self.item, self.dlperf_settings, state, event, self._try(context))
        return self._done(out)

    def _done(self, out: dict[str, Any]) -> dict[str, Any]:
        if out.get("reused"):
            self.log.info("trial %s: valid result already in the run directory: not run again",
                          self.item.get("trial_id"))
        for cmd in out.get("commands", []):
            self.log.info("dry run, would run: %s", cmd)
        return out

    def on_kill(self) -> None:
        self.log.warning("trial %s killed: stopping its jobs", self.item.get("trial_id"))
        tasks.stop_trial(self.item, self.dlperf_settings)


class _mapped_errors:
    """Retriable failures (node unreachable, launch failure, timeout, hang) -> AirflowException
    (retried while tries remain); the rest -> AirflowFailException."""

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb) -> bool:
        if typ is None:
            return False
        if issubclass(typ, tasks.Retriable):
            raise AirflowException(str(exc)) from None
        if issubclass(typ, (tasks.NonRetriable, ValueError, KeyError)):
            raise AirflowFailException(str(exc)) from None
        return False


class ConfirmTriggerOperator(BaseOperator):
    """Starts one run of ``trigger_dag_id`` with ``conf`` under ``trigger_run_id`` (the A/B confirmation
    runs ``confirm_plan`` lists). It raises the task SDK's ``DagRunTriggerException``, which the task
    runner turns into the run, as the standard provider's TriggerDagRunOperator does on Airflow 3; that
    operator's module imports the ORM (dagrun, trigger_dag: ~0.25 s), which DAG files must not pay at
    every parse. A run id that already exists is skipped (a retried task does not fail on its own run)."""

    template_fields = ("trigger_dag_id", "trigger_run_id", "conf")

    def __init__(self, *, trigger_dag_id: str, trigger_run_id: str, conf: dict | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.trigger_dag_id = trigger_dag_id
        self.trigger_run_id = trigger_run_id
        self.conf = conf

    def execute(self, context: Any) -> None:
        from airflow.sdk.exceptions import DagRunTriggerException

        raise DagRunTriggerException(
            trigger_dag_id=self.trigger_dag_id, dag_run_id=str(self.trigger_run_id), conf=dict(self.conf or {}),
            logical_date=None, reset_dag_run=False, skip_when_already_exists=True, wait_for_completion=False,
            allowed_states=["success"], failed_states=["failed"], poke_interval=60, deferrable=False)

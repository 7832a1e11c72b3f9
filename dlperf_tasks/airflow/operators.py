"""The trial operator: one mapped task instance per trial.

A custom operator (not a TaskFlow function) because it needs ``on_kill``: when a run is
cancelled or the task is killed, Airflow sends SIGTERM and calls :meth:`on_kill`, which
stops the remote jobs (or local process groups) of this trial and cleans the nodes.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from dlperf_tasks.airflow import tasks
from dlperf_tasks.airflow.settings import DlperfSettings


class TrialOperator(BaseOperator):
    """Run one trial (``item`` = a trial dict made by the plan task) and return its result dict.

    Retriable failures (node unreachable, launch failure, timeout, hang) are raised while
    tries remain, so Airflow retries them; anything else is recorded as the trial's status
    (or fails the run at once under policy ``fail_fast``).
    """

    template_fields = ()
    ui_color = "#d8f0ff"

    def __init__(self, *, item: dict[str, Any], dlperf_settings: DlperfSettings, **kwargs):
        super().__init__(**kwargs)
        self.item = item
        self.dlperf_settings = dlperf_settings

    def execute(self, context) -> dict[str, Any]:
        ti = context["ti"]
        try_number = int(getattr(ti, "try_number", 1) or 1)
        max_tries = int(getattr(ti, "max_tries", self.retries) or 0) + 1  # Airflow's max_tries = retries
        self.log.info("trial %s (try %d of %d)", self.item.get("trial_id"), try_number, max_tries)
        try:
            out = tasks.run_trial(self.item, self.dlperf_settings, try_number=try_number, max_tries=max_tries)
        except tasks.Retriable as exc:
            raise AirflowException(str(exc)) from None
        except (tasks.NonRetriable, ValueError, KeyError) as exc:
            raise AirflowFailException(str(exc)) from None
        metric = out.get("metric") or {}
        self.log.info("trial %s: %s %s %s%s", self.item.get("trial_id"), out["status"],
                      metric.get("value", ""), out.get("reason", ""),
                      " (valid result already in the run directory: not run again)" if out.get("reused") else "")
        for cmd in out.get("commands", []):
            self.log.info("dry run, would run: %s", cmd)
        return out

    def on_kill(self) -> None:
        self.log.warning("trial %s killed: stopping its jobs", self.item.get("trial_id"))
        tasks.stop_trial(self.item, self.dlperf_settings)

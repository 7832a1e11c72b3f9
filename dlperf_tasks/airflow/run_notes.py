"""The DAG run's note under a real executor: tasks hand it over through XCom, the scheduler writes it.

Airflow 3 blocks the metadata database in task processes (the Task SDK has no call that sets
a running DAG run's note), so ``tasks.set_note`` writes the note directly only where it can
(``dag.test()``) and always pushes it as XCom ``dlperf_note`` too. This listener (registered by
``plugins/dlperf_run_notes.py``) runs in the scheduler when a dlperf DAG run succeeds or fails
and copies the latest ``dlperf_note`` of the run into its note, so a bad conf's error (plan
task), a dry run's commands (report task) or the headline table and results link (publish task)
show in the grid. A note someone already wrote is kept.
"""

from __future__ import annotations

import logging

from airflow.listeners import hookimpl

NOTE_KEY = "dlperf_note"
DAG_PREFIX = "dlperf_"
_log = logging.getLogger("dlperf.run_notes")


def latest_note(dag_run, session) -> str | None:
    from sqlalchemy import select

    from airflow.models.xcom import XComModel

    row = session.scalars(select(XComModel).where(XComModel.dag_id == dag_run.dag_id,
                                                  XComModel.run_id == dag_run.run_id, XComModel.key == NOTE_KEY)
                          .order_by(XComModel.timestamp.desc()).limit(1)).first()
    if row is None:
        return None
    value = XComModel.deserialize_value(row)
    return str(value)[:1000] if value else None


def copy_note(dag_run) -> None:
    from sqlalchemy.orm import object_session

    if not str(getattr(dag_run, "dag_id", "")).startswith(DAG_PREFIX):
        return
    session = object_session(dag_run)
    if session is None:  # dag.test() hands over a detached run (its tasks wrote the note themselves)
        return
    try:
        if dag_run.note:
            return
        text = latest_note(dag_run, session)
        if text:
            dag_run.note = text
    except Exception as exc:  # noqa: BLE001 - a note is a convenience; never disturb the scheduler
        _log.warning("could not copy the dlperf note of %s/%s: %s", dag_run.dag_id, dag_run.run_id, exc)


@hookimpl
def on_dag_run_success(dag_run, msg: str):
    copy_note(dag_run)


@hookimpl
def on_dag_run_failed(dag_run, msg: str):
    copy_note(dag_run)

"""Airflow plugin: the scheduler writes a dlperf DAG run's note from the tasks' ``dlperf_note``
XCom (tasks cannot write the metadata database in Airflow 3). See
:mod:`dlperf_tasks.airflow.run_notes`."""

from airflow.plugins_manager import AirflowPlugin

from dlperf_tasks.airflow import run_notes


class DlperfRunNotesPlugin(AirflowPlugin):
    name = "dlperf_run_notes"
    listeners = [run_notes]

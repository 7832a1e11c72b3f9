"""Airflow plugin: registers the dlperf DAGs' timetable (custom timetables must be registered
for the scheduler to deserialize them). See :mod:`dlperf_tasks.airflow.timetable`."""

from airflow.plugins_manager import AirflowPlugin

from dlperf_tasks.airflow.timetable import NoMissedSlotCronTimetable


class DlperfTimetablesPlugin(AirflowPlugin):
    name = "dlperf_timetables"
    timetables = [NoMissedSlotCronTimetable]

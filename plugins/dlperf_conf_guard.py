"""Airflow plugin: the api-server refuses a bad dlperf run conf at trigger time (HTTP 400 with
the plan task's error). See :mod:`dlperf_tasks.airflow.conf_guard`."""

from airflow.plugins_manager import AirflowPlugin

from dlperf_tasks.airflow.conf_guard import ConfGuard


class DlperfConfGuardPlugin(AirflowPlugin):
    name = "dlperf_conf_guard"
    fastapi_root_middlewares = [{"name": "dlperf-conf-guard", "middleware": ConfGuard}]

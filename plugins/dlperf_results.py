"""Airflow plugin: the DLPerf results page inside the Airflow UI.

Registers (Airflow 3 plugin interface, see airflow/plugins_manager.py):

- ``fastapi_apps``: the results web app (:mod:`dlperf_tasks.history.web`) mounted in the
  api-server under ``/dlperf`` (recent runs per suite, each run's tables, plots and
  regression findings, cell trends), read from the results store;
- ``external_views``: a "DLPerf results" entry in the UI navigation (Browse menu) that shows
  that page inside the Airflow UI (``/plugin/dlperf-results``).

The store: ``$DLPERF_STORE`` if set, else ``[dlperf] store_url`` (airflow.cfg or
``AIRFLOW__DLPERF__STORE_URL``), else the store's default. S3 credentials come from the
environment (``DLPERF_S3_ACCESS_KEY_ID``/``DLPERF_S3_SECRET_ACCESS_KEY``) only.
The page is read-only; note that Airflow does not put plugin apps behind its login.
"""

from __future__ import annotations

import os

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/dlperf"


def _store():
    from dlperf_tasks.history.source import open_store

    url = os.environ.get("DLPERF_STORE")
    if not url:
        from airflow.configuration import conf

        url = conf.get("dlperf", "store_url", fallback=None)
    return open_store(url or None)


def _app():
    from dlperf_tasks.history.web import create_app

    return create_app(_store)


class DlperfResultsPlugin(AirflowPlugin):
    name = "dlperf_results"
    fastapi_apps = [{"app": _app(), "url_prefix": URL_PREFIX, "name": "DLPerf results"}]
    external_views = [{
        "name": "DLPerf results",
        "href": URL_PREFIX + "/",
        "destination": "nav",
        "category": "browse",
        "url_route": "dlperf-results",
    }]

"""Airflow plugin: the DLPerf results page inside the Airflow UI, behind Airflow's login.

Registers (Airflow 3 plugin interface, see airflow/plugins_manager.py):

- ``fastapi_apps``: the results web app (:mod:`dlperf_tasks.web.app`) mounted in the
  api-server under ``/dlperf``;
- ``external_views``: a "DLPerf results" entry in the UI navigation (Browse menu) that shows
  that page inside the Airflow UI (``/plugin/dlperf-results``);
- ``external_views`` with destinations ``dag_run`` and ``task_instance``: a "DLPerf results"
  tab on every DAG run page and task instance page, showing ``/dlperf/dag-runs/<dag>/<run>``
  in the Airflow frame (the results of that DAG run, or a line saying why there are none);
- ``global_operator_extra_links``: a "DLPerf results" button on the ``publish`` task of every
  dlperf DAG run (Airflow 3 shows extra links on the task's Details tab), to
  ``/dlperf/dag-runs/<dag_id>/<dag_run_id>`` (which redirects to the results page of the
  run(s) that DAG run published).

Access: Airflow mounts plugin apps with ``app.mount``, which inherits none of the core API's
authentication, so every route of the app depends on :func:`authorize`: the caller is
authenticated by Airflow's own ``get_user`` (the UI's ``_token`` JWT cookie or an
``Authorization: Bearer`` token, checked by the configured auth manager; none -> 401, a bad
or expired token -> 401/403; a browser opening a page without a valid session is sent to the
login page instead, :func:`dlperf_tasks.web.access.login_redirect`) and authorised by the
auth manager's ``is_authorized_dag``: a
user who may read a dlperf DAG may read the results of that DAG's suites
(:mod:`dlperf_tasks.web.access`). No route is open, ``/healthz`` included.

The store: ``$DLPERF_STORE_URL`` if set, else ``[dlperf] store_url`` (airflow.cfg or
``AIRFLOW__DLPERF__STORE_URL``), else the store's default. S3 credentials come from the
environment (``DLPERF_S3_ACCESS_KEY_ID``/``DLPERF_S3_SECRET_ACCESS_KEY``) only.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink

URL_PREFIX = "/dlperf"
DAG_PREFIX = "dlperf_"


def _store():
    from dlperf_tasks.airflow import settings
    from dlperf_tasks.history.source import store_for

    return store_for(settings=settings.load())  # $DLPERF_STORE_URL, else [dlperf] store_url, else the default


@functools.lru_cache(maxsize=1)
def suite_dags() -> dict[str, str]:
    """Suite id -> the dag_id of the DAG that runs it (from the catalog, as the DAG factory)."""
    from dlperf_tasks.catalog.loader import list_suites

    return {s.id: f"{DAG_PREFIX}{s.dag}" for s in list_suites(errors=[])}


def _airflow_base() -> str:
    """Path of the Airflow UI on this api-server (links stay on the page's own origin)."""
    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


_bearer = HTTPBearer(auto_error=False)


def _login_url(manager) -> str:
    """The auth manager's login page, on this api-server's base path."""
    url = manager.get_url_login()
    return _airflow_base() + url if url.startswith("/") else url


async def authorize(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)):
    """FastAPI dependency of every route: the authenticated Airflow user -> a Viewer (403 when
    the auth manager lets the user read no dlperf DAG). Authentication is Airflow's own
    ``get_user`` (Bearer header first, else the ``_token`` cookie), imported at request time so
    loading the plugin in the scheduler or a worker imports nothing of the API server."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.api_fastapi.core_api.security import get_user

    from dlperf_tasks.web.access import AccessDenied, login_redirect, viewer_for

    manager = get_auth_manager()
    try:
        user = await get_user(request, None, credentials)
    except HTTPException as exc:  # no session, or a bad/expired one: a browser goes to the login page
        target = login_redirect(request.method, request.headers.get("accept", ""), _login_url(manager),
                                str(request.url)) if exc.status_code in (401, 403) else None
        if target is None:
            raise
        raise HTTPException(status_code=303, detail="log in first", headers={"Location": target}) from None

    def can_read_dag(dag_id: str | None) -> bool:
        details = DagDetails(id=dag_id) if dag_id else None
        return manager.is_authorized_dag(method="GET", details=details, user=user)

    try:
        return viewer_for(user.get_name(), suite_dags(), can_read_dag)
    except AccessDenied as exc:
        raise HTTPException(status_code=403, detail=str(exc)) from None


def _app():
    from dlperf_tasks.web.app import create_app

    return create_app(_store, authorize=authorize, dag_of=lambda suite: suite_dags().get(suite),
                      ui_base=_airflow_base())


class DlperfResultsLink(BaseOperatorLink):
    """Extra link of a dlperf DAG's publish task: the results of that DAG run ("" elsewhere)."""

    name = "DLPerf results"

    def get_link(self, operator, *, ti_key) -> str:
        if not (ti_key.dag_id.startswith(DAG_PREFIX) and ti_key.task_id == "publish"):
            return ""
        from dlperf_tasks.history.links import dag_run_results_url

        return dag_run_results_url(_airflow_base(), ti_key.dag_id, ti_key.run_id)


class DlperfResultsPlugin(AirflowPlugin):
    name = "dlperf_results"
    fastapi_apps = [{"app": _app(), "url_prefix": URL_PREFIX, "name": "DLPerf results"}]
    external_views = [{
        "name": "DLPerf results",
        "href": URL_PREFIX + "/",
        "destination": "nav",
        "category": "browse",
        "url_route": "dlperf-results",
    }, {
        # a "DLPerf results" tab on every DAG run page and task instance page (the Airflow UI fills
        # in {DAG_ID}/{RUN_ID}): the results that DAG run published, inside the Airflow frame
        "name": "DLPerf results",
        "href": URL_PREFIX + "/dag-runs/{DAG_ID}/{RUN_ID}",
        "destination": "dag_run",
        "url_route": "dlperf-run-results",
    }, {
        "name": "DLPerf results",
        "href": URL_PREFIX + "/dag-runs/{DAG_ID}/{RUN_ID}",
        "destination": "task_instance",
        "url_route": "dlperf-task-results",
    }]
    global_operator_extra_links = [DlperfResultsLink()]

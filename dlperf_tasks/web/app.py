"""The results web page (a FastAPI app; the Airflow plugin in ``plugins/dlperf_results.py``
mounts it in the api-server under ``/dlperf``, links it from the navigation and puts every
route behind Airflow's auth manager).

Pages (all read-only, served from the store through its index):

- ``/``                              recent runs per suite, regression badges, a compare form
- ``/runs/{run_id}``                 metadata, links (Airflow DAG run and task logs, result.json,
                                     report.md, plots, downloads), findings, cells, plots;
                                     ``latest`` and a unique prefix redirect to the run, as the
                                     CLI takes them (``/compare`` takes them too)
- ``/runs/{run_id}/plots/{png}``     an archived plot (checksum-verified) or one drawn from result.json
- ``/runs/{run_id}/files/{name}``    ``result.json`` / ``report.md`` from the store
- ``/runs/{run_id}/download.{fmt}``  the run's trials as ``json`` / ``csv`` / ``parquet``
- ``/compare?a=RUN&b=RUN``           two runs side by side (``a`` omitted: the run before ``b``)
- ``/trend?suite=S&cell=SPEC``       history of one cell (table + ``/trend.png``, ``last`` <= 365, cached)
- ``/dag-runs/{dag_id}/{dag_run_id}`` the results of one Airflow DAG run (the target of the
                                     publish task's extra link): redirect to the run's page,
                                     or a list when the DAG run published several suites
- ``/api/runs?suite=S``              run summaries as JSON; ``/healthz``

A missing or ambiguous run is a page for a browser (``Accept: text/html``), JSON for API clients.

No Airflow import: ``authorize`` is a FastAPI dependency returning a
:class:`dlperf_tasks.web.access.Viewer` (the plugin's asks Airflow's auth manager); it runs
for every route. ``dag_of(suite)`` names a suite's DAG for links into the Airflow UI.
Every value is HTML-escaped (Jinja2 autoescape); run ids are validated by the store.

One module per page group registers its routes (``api``, ``index``, ``run``, ``compare``,
``trend``); what they share (store, templates, caches, viewer) is in :mod:`dlperf_tasks.web.site`.
"""

from __future__ import annotations

from typing import Any, Callable

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException as StarletteHTTPException

from dlperf_tasks.core.errors import InvalidRunIdError, NotFoundError
from dlperf_tasks.web import api, compare, index, run, trend
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.site import Site, current_viewer


def fail(exc: Exception) -> HTTPException:
    """The HTTP error for a store error: 404 when the run or object is not there, else 502."""
    code = 404 if isinstance(exc, (NotFoundError, InvalidRunIdError)) else 502
    return HTTPException(status_code=code, detail=str(exc))


def create_app(store_factory: Callable[[], Any], *, authorize: Callable[..., Viewer],
               dag_of: Callable[[str], str | None] = lambda suite: None, ui_base: str = "",
               title: str = "DLPerf results"):
    """Build the FastAPI app. ``store_factory()`` is called once, at the first request;
    ``authorize`` (a FastAPI dependency) runs on every route and returns the Viewer."""
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(current_viewer)])
    app.dependency_overrides[current_viewer] = authorize  # the routes' viewer: one authorize call per request
    app.state.site = Site(store_factory, fail=fail, dag_of=dag_of, ui_base=ui_base)
    app.state.trend_cache = app.state.site.trends
    for pages in (api, index, run, compare, trend):
        app.include_router(pages.router)

    @app.exception_handler(StarletteHTTPException)
    async def _error_page(request: Request, exc: StarletteHTTPException):
        """A missing or ambiguous run, a bad request: a page for a browser, JSON for API clients;
        a redirect and 401/403 stay as they are (the plugin sends a browser to sign in with a 303)."""
        if (exc.status_code < 400 or exc.status_code in (401, 403)
                or request.url.path.startswith(f"{request.scope.get('root_path', '')}/api")
                or "text/html" not in request.headers.get("accept", "")):
            return await http_exception_handler(request, exc)
        page = app.state.site.page(request, "message.html", Viewer("-", frozenset(), False),
                                   heading=f"{exc.status_code}: {'not found' if exc.status_code == 404 else 'error'}",
                                   message=str(exc.detail))
        page.status_code = exc.status_code
        return page

    return app

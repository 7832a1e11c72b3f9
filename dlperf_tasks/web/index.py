"""The front page (recent runs per suite) and ``/dag-runs/{dag_id}/{dag_run_id}`` (the results
of one Airflow DAG run: the target of the publish task's extra link)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.rows import ls_rows
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.site import RECENT_RUNS, Site, current_viewer, site_of

router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def index(request: Request, viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    suites, error = [], None
    try:
        st = site.store()
        for suite in st.suites():
            if viewer.can_read(suite):
                suites.append(_suite_rows(st, suite))
    except DlperfError as exc:
        error = f"store unavailable: {exc}"
    return site.page(request, "index.html", viewer, suites=suites, error=error)


def _suite_rows(st: Any, suite: str) -> dict:
    """The front page's block for ``suite``: its recent runs with their regression badges."""
    runs, total = _recent(st, suite, RECENT_RUNS)  # the index read in bounded pages
    rows = ls_rows(runs)
    by_id = {r["run_id"]: r for r in runs}
    for row in rows:
        badge = by_id[row["run_id"]].get("regressions")
        row["checked"] = badge is not None
        row["finding_cells"] = (badge or {}).get("cells", [])
        row["judged"] = (badge or {}).get("judged")  # None: recorded before verdicts stated their basis
    return {"suite": suite, "framework": runs[-1].get("framework") if runs else None, "total": total, "runs": rows}


def _recent(store: Any, suite: str, n: int) -> tuple[list[dict], int]:
    """The last ``n`` runs of ``suite`` and how many it has, holding only ``n`` summaries."""
    count = 0

    def counted(_row: dict) -> bool:
        nonlocal count
        count += 1
        return True

    runs = store.list_runs(suite=suite, limit=n, where=counted)
    return runs, count


@router.get("/dag-runs/{dag_id}/{dag_run_id}", response_class=HTMLResponse)
def dag_run_results(request: Request, dag_id: str, dag_run_id: str, viewer: Viewer = Depends(current_viewer),
                    site: Site = Depends(site_of)):
    try:
        st = site.store()
        found = [r for suite in st.suites() if viewer.can_read(suite) and site.dag_of(suite) in (dag_id, None)
                 for r in st.list_runs(suite=suite, where=lambda r: dag_run_id in (
                     (r.get("env") or {}).get("dag_run_id"), r.get("dag_run_id")))]
    except DlperfError as exc:
        raise site.fail(exc) from None
    if not found:  # shown in the DAG run's "DLPerf results" tab: a page, not JSON
        why = ("not a dlperf DAG: it publishes no DLPerf results" if not dag_id.startswith("dlperf_") else
               "nothing published by this DAG run (yet): results appear here once its publish task "
               "succeeds; a dry run or a failed run publishes nothing")
        resp = site.page(request, "message.html", viewer, heading=f"{dag_id} run {dag_run_id}", message=why)
        resp.status_code = 404
        return resp
    root = request.scope.get("root_path", "").rstrip("/")
    if len(found) == 1:
        return RedirectResponse(f"{root}/runs/{quote(str(found[0]['run_id']), safe='')}", status_code=307)
    rows = ls_rows(found)
    return site.page(request, "index.html", viewer, suites=[{"suite": f"{dag_id} run {dag_run_id}",
                                                            "framework": dag_id, "total": len(rows), "runs": rows}],
                     error=None)

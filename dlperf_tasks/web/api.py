"""JSON routes of the results app: ``/healthz`` and ``/api/runs``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.site import RECENT_RUNS, Site, current_viewer, site_of

router = APIRouter()


@router.get("/healthz")
def healthz(viewer: Viewer = Depends(current_viewer)):
    return {"ok": True, "user": viewer.name}


@router.get("/api/runs")
def api_runs(suite: str | None = None, limit: int = Query(RECENT_RUNS, ge=1, le=1000),
             viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    try:
        runs = site.store().list_runs(suite=suite, limit=limit, where=lambda r: viewer.can_read(r.get("suite")))
    except DlperfError as exc:
        raise site.fail(exc) from None
    return JSONResponse(runs)

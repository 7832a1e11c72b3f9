"""``/trend?suite=S&cell=SPEC``: the history of one cell, as a table and as ``/trend.png``
(``last`` <= 365 runs; the plot is cached until the suite has a new run)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.regress import RegressConfig
from dlperf_tasks.history.source import history_views
from dlperf_tasks.history.trend import cell_trend
from dlperf_tasks.report.plots import trend_png
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.site import TREND_MAX, Site, current_viewer, forbid_unless_readable, site_of

router = APIRouter()


def _trend(site: Site, suite: str, cell: str, last: int, viewer: Viewer):
    """The cell's trend and the suite's newest run id; a DlperfError becomes a 404."""
    forbid_unless_readable(viewer, suite)
    try:
        views = history_views(site.store(), suite)
        if not views:
            raise HTTPException(404, f"suite {suite!r} has no runs")
        return cell_trend(views, cell, last=last), views[-1].run_id
    except DlperfError as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/trend", response_class=HTMLResponse)
def trend_page(request: Request, suite: str, cell: str, last: int = Query(60, ge=1, le=TREND_MAX),
               viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    tr, _ = _trend(site, suite, cell, last, viewer)
    return site.page(request, "trend.html", viewer, trend=tr, last=last)


@router.get("/trend.png")
def trend_png_route(suite: str, cell: str, last: int = Query(60, ge=1, le=TREND_MAX),
                    viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    tr, newest = _trend(site, suite, cell, last, viewer)
    # keyed by the newest run of the suite: a new run draws a new plot, a reload does not
    key = (suite, tr.cell_id, last, newest)
    hit = key in site.trends.data
    data = site.trends.get(key, lambda: trend_png(
        [p.to_dict() for p in tr.points], title=f"{tr.cell_id} ({len(tr.points)} runs)", unit=tr.unit,
        baseline=tr.overall_median(), min_history=RegressConfig().min_history))
    return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=300",
                                                           "X-Dlperf-Cache": "hit" if hit else "miss"})

"""``/compare?a=RUN&b=RUN``: two runs side by side (``a`` omitted: the run before ``b``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.compare import compare_runs
from dlperf_tasks.history.rows import compare_rows, verdict_note
from dlperf_tasks.history.runs import RunView
from dlperf_tasks.history.source import history_views
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.site import Site, current_viewer, previous_run, site_of

router = APIRouter()


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request, b: str, a: str | None = None, viewer: Viewer = Depends(current_viewer),
                 site: Site = Depends(site_of)):
    b = site.resolve(b, viewer)  # ids, prefixes and ``latest`` as the CLI takes them
    a = site.resolve(a, viewer) if a else a
    suite = site.suite_of(b, viewer)
    try:
        if not a:
            a = previous_run(site.store(), suite, b)
            if a is None:
                raise HTTPException(404, f"run {b} is the first run of suite {suite}: nothing to compare with")
        site.suite_of(a, viewer)
        ra, rb = RunView.from_result(site.result_of(a)), RunView.from_result(site.result_of(b))
        history = history_views(site.store(), suite) if ra.suite == rb.suite else []
    except DlperfError as exc:
        raise site.fail(exc) from None
    doc = compare_runs(ra, rb, history)
    choices = [r["run_id"] for r in reversed(site.store().list_runs(suite=suite, limit=200))]
    return site.page(request, "compare.html", viewer, a=a, b=b, suite=suite, rows=compare_rows(doc),
                     note=verdict_note(doc), env_diff=doc["env_diff"], choices=choices)

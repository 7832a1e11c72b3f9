"""The results web page (a FastAPI app; the Airflow plugin in ``plugins/dlperf_results.py``
mounts it in the api-server under ``/dlperf``, links it from the navigation and puts every
route behind Airflow's auth manager).

Pages (all read-only, served from the store through its index):

- ``/``                              recent runs per suite, regression badges, a compare form
- ``/runs/{run_id}``                 metadata, links (Airflow DAG run and task logs, result.json,
                                     report.md, plots, downloads), findings, cells, plots
- ``/runs/{run_id}/plots/{png}``     an archived plot (checksum-verified) or one drawn from result.json
- ``/runs/{run_id}/files/{name}``    ``result.json`` / ``report.md`` from the store
- ``/runs/{run_id}/download.{fmt}``  the run's trials as ``json`` / ``csv`` / ``parquet``
- ``/compare?a=RUN&b=RUN``           two runs side by side (``a`` omitted: the run before ``b``)
- ``/trend?suite=S&cell=SPEC``       history of one cell (table + ``/trend.png``, ``last`` <= 365, cached)
- ``/dag-runs/{dag_id}/{dag_run_id}`` the results of one Airflow DAG run (the target of the
                                     publish task's extra link): redirect to the run's page,
                                     or a list when the DAG run published several suites
- ``/api/runs?suite=S``              run summaries as JSON; ``/healthz``

No Airflow import: ``authorize`` is a FastAPI dependency returning a
:class:`dlperf_tasks.web.access.Viewer` (the plugin's asks Airflow's auth manager); it runs
for every route. ``dag_of(suite)`` names a suite's DAG for links into the Airflow UI.
Every value is HTML-escaped (Jinja2 autoescape); run ids are validated by the store.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from dlperf_tasks.core.errors import DlperfError, InvalidRunIdError, NotFoundError
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.engine.decisions import summary_lines
from dlperf_tasks.history import links
from dlperf_tasks.history.rows import ls_rows
from dlperf_tasks.history.check import read_recorded
from dlperf_tasks.history.rows import show_rows
from dlperf_tasks.report.plots import plot_specs
from dlperf_tasks.history.basis import badge, basis_line, basis_of
from dlperf_tasks.history import export
from dlperf_tasks.report.plots import render_plot
from dlperf_tasks.history.compare import compare_runs
from dlperf_tasks.history.rows import compare_rows, verdict_note
from dlperf_tasks.history.runs import RunView
from dlperf_tasks.history.source import history_views
from dlperf_tasks.history.trend import cell_trend
from dlperf_tasks.report.plots import trend_png

RECENT_RUNS = 20
TREND_MAX = 365
_TEMPLATES = Path(__file__).with_name("templates")
FILES = {"result.json": "application/json", "report.md": "text/markdown; charset=utf-8"}


def _decision_lines(run) -> list[str]:
    return summary_lines(run)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "inf"
        return f"{v:.2f}" if abs(v) >= 10 else f"{v:.4g}"
    return str(v)


class _LRU:
    def __init__(self, size: int = 64):
        self.size, self.data, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, key, make):
        with self.lock:
            if key in self.data:
                self.data.move_to_end(key)
                return self.data[key]
        value = make()
        with self.lock:
            self.data[key] = value
            while len(self.data) > self.size:
                self.data.popitem(last=False)
        return value


def create_app(store_factory: Callable[[], Any], *, authorize: Callable[..., Viewer],
               dag_of: Callable[[str], str | None] = lambda suite: None, ui_base: str = "",
               title: str = "DLPerf results"):
    """Build the FastAPI app. ``store_factory()`` is called once, at the first request;
    ``authorize`` (a FastAPI dependency) runs on every route and returns the Viewer."""
    env = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=select_autoescape(["html"]))
    env.globals["fmt"] = _fmt
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(authorize)])
    state: dict[str, Any] = {}
    lock = threading.Lock()
    results, pngs, trends = _LRU(32), _LRU(64), _LRU(32)

    def store():
        with lock:
            if "store" not in state:
                state["store"] = store_factory()
            return state["store"]

    def page(request: Request, name: str, viewer: Viewer, **ctx) -> HTMLResponse:
        s = state.get("store")
        html = env.get_template(name).render(root=request.scope.get("root_path", "").rstrip("/"),
                                             store_url=s.url() if s is not None else "-", viewer=viewer.name, **ctx)
        return HTMLResponse(html)

    def fail(exc: Exception) -> HTTPException:
        code = 404 if isinstance(exc, (NotFoundError, InvalidRunIdError)) else 502
        return HTTPException(status_code=code, detail=str(exc))

    def suite_of(run_id: str, viewer: Viewer) -> str:
        """The run's suite; 403 unless the viewer may read it (before any object is read)."""
        try:
            suite = store().locate(run_id)["suite"]
        except DlperfError as exc:
            raise fail(exc) from None
        if not viewer.can_read(suite):
            raise HTTPException(403, f"user {viewer.name!r} may not read the results of suite {suite!r}")
        return suite

    def result_of(run_id: str) -> dict:
        return results.get(run_id, lambda: store().read_result(run_id))

    V = Depends(authorize)  # cached per request: the app-level call is reused

    @app.get("/healthz")
    def healthz(viewer: Viewer = V):
        return {"ok": True, "user": viewer.name}

    @app.get("/api/runs")
    def api_runs(suite: str | None = None, limit: int = Query(RECENT_RUNS, ge=1, le=1000), viewer: Viewer = V):
        try:
            runs = store().list_runs(suite=suite, limit=limit, where=lambda r: viewer.can_read(r.get("suite")))
        except DlperfError as exc:
            raise fail(exc) from None
        return JSONResponse(runs)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, viewer: Viewer = V):
        suites, error = [], None
        try:
            st = store()
            for suite in st.suites():
                if not viewer.can_read(suite):
                    continue
                runs, total = _recent(st, suite, RECENT_RUNS)  # the index read in bounded pages
                rows = ls_rows(runs)
                by_id = {r["run_id"]: r for r in runs}
                for row in rows:
                    badge = by_id[row["run_id"]].get("regressions")
                    row["checked"] = badge is not None
                    row["finding_cells"] = (badge or {}).get("cells", [])
                    row["judged"] = (badge or {}).get("judged")  # None: recorded before issue 26
                suites.append({"suite": suite, "framework": runs[-1].get("framework") if runs else None,
                               "total": total, "runs": rows})
        except DlperfError as exc:
            error = f"store unavailable: {exc}"
        return page(request, "index.html", viewer, suites=suites, error=error)

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str, viewer: Viewer = V):
        suite = suite_of(run_id, viewer)
        try:
            result = result_of(run_id)
            manifest = store().read_manifest(run_id)
            regressions = read_recorded(store(), run_id, manifest)
            confirmations = store().read_annotation(run_id, "confirmations")  # A/B verdicts (H8)
            previous = _previous_run(store(), suite, run_id)
        except DlperfError as exc:
            raise fail(exc) from None
        run = result.get("run") or {}
        paths = {e.get("path", "") for e in manifest.get("objects", [])}
        archived = sorted(p[len("plots/"):] for p in paths if p.startswith("plots/") and p.endswith(".png"))
        plots = archived or plot_specs(result)
        env_items = [(f"env.{k}", v) for k, v in sorted((run.get("env") or {}).items()) if not isinstance(v, dict)]
        meta = [(k, run.get(k)) for k in ("suite", "framework", "dag_run_id", "started_at", "finished_at",
                                          "image", "image_digest", "upstream_commit") if run.get(k) is not None]
        dag_id, dag_run_id = dag_of(suite), run.get("dag_run_id")
        dag_links = None
        if dag_id and dag_run_id:
            dag_links = {"dag_id": dag_id, "run": links.dag_run_url(ui_base, dag_id, dag_run_id),
                       "tasks": [(t, links.task_url(ui_base, dag_id, dag_run_id, t))
                                 for t in ("trial", "aggregate", "publish")]}
        flagged = {f["cell_id"] for f in (regressions or {}).get("findings", [])}

        basis = basis_of(regressions)
        return page(request, "run.html", viewer, run={"run_id": run.get("run_id", run_id), "suite": suite},
                    basis=basis, basis_text=basis_line(basis), basis_badge=badge(basis),
                    meta=meta + env_items, cells=show_rows(result), plots=plots, regressions=regressions,
                    flagged=flagged, dag_links=dag_links, files=[f for f in FILES if f in paths], previous=previous,
                    confirmations=(confirmations or {}).get("findings") or {}, decisions=_decision_lines(run))

    @app.get("/dag-runs/{dag_id}/{dag_run_id}", response_class=HTMLResponse)
    def dag_run_results(request: Request, dag_id: str, dag_run_id: str, viewer: Viewer = V):
        try:
            st = store()
            found = [r for suite in st.suites() if viewer.can_read(suite) and dag_of(suite) in (dag_id, None)
                     for r in st.list_runs(suite=suite, where=lambda r: dag_run_id in (
                         (r.get("env") or {}).get("dag_run_id"), r.get("dag_run_id")))]
        except DlperfError as exc:
            raise fail(exc) from None
        if not found:  # shown in the DAG run's "DLPerf results" tab: a page, not JSON
            why = ("not a dlperf DAG: it publishes no DLPerf results" if not dag_id.startswith("dlperf_") else
                   "nothing published by this DAG run (yet): results appear here once its publish task "
                   "succeeds; a dry run or a failed run publishes nothing")
            resp = page(request, "message.html", viewer, heading=f"{dag_id} run {dag_run_id}", message=why)
            resp.status_code = 404
            return resp
        root = request.scope.get("root_path", "").rstrip("/")
        if len(found) == 1:
            return RedirectResponse(f"{root}/runs/{quote(str(found[0]['run_id']), safe='')}", status_code=307)
        rows = ls_rows(found)
        return page(request, "index.html", viewer, suites=[{"suite": f"{dag_id} run {dag_run_id}", "framework": dag_id,
                                                             "total": len(rows), "runs": rows}], error=None)

    @app.get("/runs/{run_id}/files/{name}")
    def run_file(run_id: str, name: str, viewer: Viewer = V):
        if name not in FILES:
            raise HTTPException(404, f"no file {name!r} (files: {', '.join(FILES)})")
        suite_of(run_id, viewer)
        try:
            data = store().read_object(run_id, name)
        except DlperfError as exc:
            raise fail(exc) from None
        return Response(data, media_type=FILES[name])

    @app.get("/runs/{run_id}/download.{fmt}")
    def download(run_id: str, fmt: str, viewer: Viewer = V):
        if fmt not in ("json", "csv", "parquet"):
            raise HTTPException(404, "download formats: json, csv, parquet")
        suite_of(run_id, viewer)
        try:
            result = result_of(run_id)
        except DlperfError as exc:
            raise fail(exc) from None
        disp = {"Content-Disposition": f'attachment; filename="{_safe(run_id)}.{fmt}"'}
        if fmt == "json":
            return Response(json.dumps(result, indent=1), media_type="application/json", headers=disp)
        if fmt == "csv":
            return Response(export.run_csv(result), media_type="text/csv; charset=utf-8", headers=disp)
        return Response(export.run_parquet(result), media_type="application/vnd.apache.parquet", headers=disp)

    @app.get("/runs/{run_id}/plots/{name}")
    def plot(run_id: str, name: str, viewer: Viewer = V):
        if not name.endswith(".png") or "/" in name:
            raise HTTPException(404, f"no plot {name!r}")
        suite_of(run_id, viewer)

        def make() -> bytes:
            st = store()
            manifest = st.read_manifest(run_id)
            rel = f"plots/{name}"
            if any(e.get("path") == rel for e in manifest.get("objects", [])):
                return st.read_object(run_id, rel)
            return render_plot(result_of(run_id), name)

        try:
            data = pngs.get((run_id, name), make)
        except KeyError as exc:
            raise HTTPException(404, str(exc)) from None
        except DlperfError as exc:
            raise fail(exc) from None
        return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=300"})

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(request: Request, b: str, a: str | None = None, viewer: Viewer = V):
        suite = suite_of(b, viewer)
        try:
            if not a:
                a = _previous_run(store(), suite, b)
                if a is None:
                    raise HTTPException(404, f"run {b} is the first run of suite {suite}: nothing to compare with")
            suite_of(a, viewer)
            ra, rb = RunView.from_result(result_of(a)), RunView.from_result(result_of(b))
            history = history_views(store(), suite) if ra.suite == rb.suite else []
        except DlperfError as exc:
            raise fail(exc) from None
        doc = compare_runs(ra, rb, history)
        choices = [r["run_id"] for r in reversed(store().list_runs(suite=suite, limit=200))]
        return page(request, "compare.html", viewer, a=a, b=b, suite=suite, rows=compare_rows(doc),
                    note=verdict_note(doc), env_diff=doc["env_diff"], choices=choices)

    def _trend(suite: str, cell: str, last: int, viewer: Viewer):
        if not viewer.can_read(suite):
            raise HTTPException(403, f"user {viewer.name!r} may not read the results of suite {suite!r}")
        views = history_views(store(), suite)
        if not views:
            raise HTTPException(404, f"suite {suite!r} has no runs")
        return cell_trend(views, cell, last=last), views[-1].run_id

    @app.get("/trend", response_class=HTMLResponse)
    def trend_page(request: Request, suite: str, cell: str, last: int = Query(60, ge=1, le=TREND_MAX),
                   viewer: Viewer = V):
        try:
            tr, _ = _trend(suite, cell, last, viewer)
        except DlperfError as exc:
            raise HTTPException(404, str(exc)) from None
        return page(request, "trend.html", viewer, trend=tr, last=last)

    @app.get("/trend.png")
    def trend_png_route(suite: str, cell: str, last: int = Query(60, ge=1, le=TREND_MAX), viewer: Viewer = V):
        try:
            tr, newest = _trend(suite, cell, last, viewer)
        except DlperfError as exc:
            raise HTTPException(404, str(exc)) from None
        # keyed by the newest run of the suite: a new run draws a new plot, a reload does not
        key = (suite, tr.cell_id, last, newest)
        hit = key in trends.data
        data = trends.get(key, lambda: trend_png(
            [p.to_dict() for p in tr.points], title=f"{tr.cell_id} ({len(tr.points)} runs)", unit=tr.unit,
            baseline=tr.overall_median()))
        return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=300",
                                                               "X-Dlperf-Cache": "hit" if hit else "miss"})

    app.state.trend_cache = trends
    return app


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text)[:120]


def _recent(store: Any, suite: str, n: int) -> tuple[list[dict], int]:
    """The last ``n`` runs of ``suite`` and how many it has, holding only ``n`` summaries."""
    count = 0

    def counted(_row: dict) -> bool:
        nonlocal count
        count += 1
        return True

    runs = store.list_runs(suite=suite, limit=n, where=counted)
    return runs, count


def _previous_run(store: Any, suite: str, run_id: str) -> str | None:
    """The run of ``suite`` published just before ``run_id`` (index order), or None. Two
    passes over the index, one summary held at a time."""
    def key(r: dict) -> tuple:
        return RunView.from_summary(r).sort_key

    this = store.list_runs(suite=suite, limit=1, where=lambda r: str(r.get("run_id")) == run_id)
    if not this:
        return None
    mine = key(this[0])
    before = store.list_runs(suite=suite, limit=1, where=lambda r: key(r) < mine)
    return str(before[0]["run_id"]) if before else None

"""The results web page (a FastAPI app; the Airflow plugin in ``plugins/dlperf_results.py``
mounts it in the api-server under ``/dlperf`` and links it from the navigation).

Pages (all read-only, served from the store through its index):

- ``/``                         recent runs per suite (framework), with regression badges
- ``/runs/{run_id}``            run metadata, regression findings, cell table, plots
- ``/runs/{run_id}/plots/{png}``  a plot: the archived ``plots/<png>`` (checksum-verified) or,
                                  for runs published without plots, drawn from ``result.json``
- ``/trend?suite=S&cell=SPEC``  history of one cell (table + ``/trend.png``)
- ``/api/runs?suite=S``         run summaries as JSON; ``/healthz``

No Airflow import: the store comes from ``store_factory`` (the plugin passes one built from
``$DLPERF_STORE`` or ``[dlperf] store_url``). Every value is HTML-escaped (Jinja2 autoescape)
and run ids are validated by the store before any key is built.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from dlperf_tasks.errors import DlperfError

RECENT_RUNS = 20
_TEMPLATES = Path(__file__).with_name("templates")


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


def create_app(store_factory: Callable[[], Any], title: str = "DLPerf results"):
    """Build the FastAPI app. ``store_factory()`` is called once, at the first request."""
    env = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=select_autoescape(["html"]))
    env.globals["fmt"] = _fmt
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None)
    state: dict[str, Any] = {}
    lock = threading.Lock()
    results = _LRU(32)
    pngs = _LRU(64)

    def store():
        with lock:
            if "store" not in state:
                state["store"] = store_factory()
            return state["store"]

    def page(request: Request, name: str, **ctx) -> HTMLResponse:
        s = state.get("store")
        html = env.get_template(name).render(root=request.scope.get("root_path", "").rstrip("/"),
                                             store_url=s.url() if s is not None else "-", **ctx)
        return HTMLResponse(html)

    def fail(exc: Exception) -> HTTPException:
        text = str(exc)
        code = 404 if ("not found" in text or "does not exist" in text or "invalid run id" in text) else 502
        return HTTPException(status_code=code, detail=text)

    def result_of(run_id: str) -> dict:
        return results.get(run_id, lambda: store().read_result(run_id))

    @app.get("/healthz")
    def healthz():
        return {"ok": True}

    @app.get("/api/runs")
    def api_runs(suite: str | None = None, limit: int = Query(RECENT_RUNS, ge=1, le=1000)):
        try:
            return JSONResponse(store().list_runs(suite=suite, limit=limit))
        except DlperfError as exc:
            raise fail(exc) from None

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request):
        from dlperf_tasks.cli.results import ls_rows

        suites, error = [], None
        try:
            st = store()
            for suite in st.suites():
                runs = st.list_runs(suite=suite)
                rows = ls_rows(runs)[:RECENT_RUNS]
                by_id = {r["run_id"]: r for r in runs}
                for row in rows:
                    badge = by_id[row["run_id"]].get("regressions")
                    row["checked"] = badge is not None
                    row["finding_cells"] = (badge or {}).get("cells", [])
                suites.append({"suite": suite, "framework": runs[-1].get("framework") if runs else None,
                               "total": len(runs), "runs": rows})
        except DlperfError as exc:
            error = f"store unavailable: {exc}"
        return page(request, "index.html", suites=suites, error=error)

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str):
        from dlperf_tasks.cli.results import show_rows
        from dlperf_tasks.report.plots import plot_specs

        try:
            result = result_of(run_id)
            manifest = store().read_manifest(run_id)
        except DlperfError as exc:
            raise fail(exc) from None
        run = result.get("run") or {}
        archived = [e["path"][len("plots/"):] for e in manifest.get("objects", [])
                    if e.get("path", "").startswith("plots/") and e["path"].endswith(".png")]
        plots = archived or plot_specs(result)
        env_items = [(f"env.{k}", v) for k, v in sorted((run.get("env") or {}).items())]
        meta = [(k, run.get(k)) for k in ("suite", "framework", "dag_run_id", "started_at", "finished_at",
                                          "image", "image_digest", "upstream_commit") if run.get(k) is not None]
        from dlperf_tasks.history.check import read_recorded

        regressions = read_recorded(store(), run_id, manifest)
        flagged = {f["cell_id"] for f in (regressions or {}).get("findings", [])}
        return page(request, "run.html", run={"run_id": run.get("run_id", run_id), "suite": run.get("suite")},
                    meta=meta + env_items, cells=show_rows(result), plots=plots, regressions=regressions,
                    flagged=flagged)

    @app.get("/runs/{run_id}/plots/{name}")
    def plot(run_id: str, name: str):
        from dlperf_tasks.report.plots import render_plot

        if not name.endswith(".png") or "/" in name:
            raise HTTPException(404, f"no plot {name!r}")

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
        return Response(data, media_type="image/png", headers={"Cache-Control": "max-age=300"})

    def _trend(suite: str, cell: str, last: int):
        from dlperf_tasks.history.source import history_views
        from dlperf_tasks.history.trend import cell_trend

        views = history_views(store(), suite)
        if not views:
            raise HTTPException(404, f"suite {suite!r} has no runs")
        return cell_trend(views, cell, last=last)

    @app.get("/trend", response_class=HTMLResponse)
    def trend_page(request: Request, suite: str, cell: str, last: int = Query(60, ge=1, le=5000)):
        try:
            tr = _trend(suite, cell, last)
        except DlperfError as exc:
            raise HTTPException(404, str(exc)) from None
        return page(request, "trend.html", trend=tr, last=last)

    @app.get("/trend.png")
    def trend_png_route(suite: str, cell: str, last: int = Query(60, ge=1, le=5000)):
        from dlperf_tasks.report.plots import trend_png

        try:
            tr = _trend(suite, cell, last)
        except DlperfError as exc:
            raise HTTPException(404, str(exc)) from None
        data = trend_png([p.to_dict() for p in tr.points], title=f"{tr.cell_id} ({len(tr.points)} runs)",
                         unit=tr.unit, baseline=tr.overall_median())
        return Response(data, media_type="image/png")

    return app

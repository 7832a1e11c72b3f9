"""The pages of one run: ``/runs/{run_id}`` and its files, downloads and plots."""

from __future__ import annotations

import json
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.engine.decisions import summary_lines
from dlperf_tasks.history import export, links
from dlperf_tasks.history.basis import badge, basis_line, basis_of
from dlperf_tasks.history.check import read_recorded
from dlperf_tasks.history.rows import show_rows
from dlperf_tasks.report.plots import plot_specs, render_plot
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.site import FILES, Site, current_viewer, previous_run, site_of

router = APIRouter()
_META = ("suite", "framework", "dag_run_id", "started_at", "finished_at", "image", "image_digest", "upstream_commit")


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    full = site.resolve(run_id, viewer)
    suite = site.suite_of(full, viewer)  # 403 before the full id of a run the viewer may not read shows
    if full != run_id:  # ``latest`` or a prefix, as the CLI takes them: the run's own address
        root = request.scope.get("root_path", "").rstrip("/")
        return RedirectResponse(f"{root}/runs/{quote(full, safe='')}", status_code=307)
    try:
        st = site.store()
        result = site.result_of(run_id)
        manifest = st.read_manifest(run_id)
        regressions = read_recorded(st, run_id, manifest)
        confirmations = st.read_annotation(run_id, "confirmations")  # A/B verdicts
        previous = previous_run(st, suite, run_id)
    except DlperfError as exc:
        raise site.fail(exc) from None
    run = result.get("run") or {}
    paths = {e.get("path", "") for e in manifest.get("objects", [])}
    archived = sorted(p[len("plots/"):] for p in paths if p.startswith("plots/") and p.endswith(".png"))
    env_items = [(f"env.{k}", v) for k, v in sorted((run.get("env") or {}).items()) if not isinstance(v, dict)]
    meta = [(k, run.get(k)) for k in _META if run.get(k) is not None]
    flagged = {f["cell_id"] for f in (regressions or {}).get("findings", [])}
    basis = basis_of(regressions)
    return site.page(request, "run.html", viewer, run={"run_id": run.get("run_id", run_id), "suite": suite},
                     basis=basis, basis_text=basis_line(basis), basis_badge=badge(basis),
                     meta=meta + env_items, cells=show_rows(result), plots=archived or plot_specs(result),
                     regressions=regressions, flagged=flagged, dag_links=_dag_links(site, suite, run),
                     files=[f for f in FILES if f in paths], previous=previous,
                     confirmations=(confirmations or {}).get("findings") or {}, decisions=summary_lines(run))


def _dag_links(site: Site, suite: str, run: dict) -> dict | None:
    """Links into the Airflow UI for the DAG run that made ``run`` (None when its DAG is unknown)."""
    dag_id, dag_run_id = site.dag_of(suite), run.get("dag_run_id")
    if not (dag_id and dag_run_id):
        return None
    return {"dag_id": dag_id, "run": links.dag_run_url(site.ui_base, dag_id, dag_run_id),
            "tasks": [(t, links.task_url(site.ui_base, dag_id, dag_run_id, t)) for t in ("trial", "aggregate", "publish")]}


@router.get("/runs/{run_id}/files/{name}")
def run_file(run_id: str, name: str, viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    if name not in FILES:
        raise HTTPException(404, f"no file {name!r} (files: {', '.join(FILES)})")
    site.suite_of(run_id, viewer)
    try:
        data = site.store().read_object(run_id, name)
    except DlperfError as exc:
        raise site.fail(exc) from None
    return Response(data, media_type=FILES[name])


@router.get("/runs/{run_id}/download.{fmt}")
def download(run_id: str, fmt: str, viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    if fmt not in ("json", "csv", "parquet"):
        raise HTTPException(404, "download formats: json, csv, parquet")
    site.suite_of(run_id, viewer)
    try:
        result = site.result_of(run_id)
    except DlperfError as exc:
        raise site.fail(exc) from None
    disp = {"Content-Disposition": f'attachment; filename="{_safe(run_id)}.{fmt}"'}
    if fmt == "json":
        return Response(json.dumps(result, indent=1), media_type="application/json", headers=disp)
    if fmt == "csv":
        return Response(export.run_csv(result), media_type="text/csv; charset=utf-8", headers=disp)
    return Response(export.run_parquet(result), media_type="application/vnd.apache.parquet", headers=disp)


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text)[:120]


@router.get("/runs/{run_id}/plots/{name}")
def plot(run_id: str, name: str, viewer: Viewer = Depends(current_viewer), site: Site = Depends(site_of)):
    if not name.endswith(".png") or "/" in name:
        raise HTTPException(404, f"no plot {name!r}")
    site.suite_of(run_id, viewer)
    try:
        data = site.pngs.get((run_id, name), lambda: _plot_png(site, run_id, name))
    except KeyError as exc:
        raise HTTPException(404, str(exc)) from None
    except DlperfError as exc:
        raise site.fail(exc) from None
    return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=300"})


def _plot_png(site: Site, run_id: str, name: str) -> bytes:
    """The run's archived plot ``name`` (checksum-verified by the store), else one drawn from result.json."""
    st = site.store()
    manifest = st.read_manifest(run_id)
    rel = f"plots/{name}"
    if any(e.get("path") == rel for e in manifest.get("objects", [])):
        return st.read_object(run_id, rel)
    return render_plot(site.result_of(run_id), name)

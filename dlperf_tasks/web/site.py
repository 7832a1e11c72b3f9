"""What every page of the results app shares: the store (opened at the first request), the
Jinja2 templates, the caches, the per-request viewer and the reads that check it."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.runs import RunView
from dlperf_tasks.history.source import resolve_run
from dlperf_tasks.store.readback import shown_result
from dlperf_tasks.web.access import Viewer

RECENT_RUNS = 20
TREND_MAX = 365
_TEMPLATES = Path(__file__).with_name("templates")
FILES = {"result.json": "application/json", "report.md": "text/markdown; charset=utf-8"}


def fmt(v: Any) -> str:
    """A value as a table shows it (``-`` for none, floats to 4 significant digits)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "inf"
        return f"{v:.2f}" if abs(v) >= 10 else f"{v:.4g}"
    return str(v)


class LRU:
    """A small thread-safe least-recently-used cache; ``make`` runs outside the lock."""

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


def current_viewer() -> Viewer:
    """The request's viewer: :func:`dlperf_tasks.web.app.create_app` binds this dependency to its
    ``authorize`` (FastAPI caches it per request, so the app-level call is reused by the routes)."""
    raise RuntimeError("the results app binds current_viewer to its authorize dependency")


def site_of(request: Request) -> "Site":
    """The :class:`Site` of the app serving ``request`` (a FastAPI dependency)."""
    return request.app.state.site


def forbid_unless_readable(viewer: Viewer, suite: str) -> None:
    if not viewer.can_read(suite):
        raise HTTPException(403, f"user {viewer.name!r} may not read the results of suite {suite!r}")


class Site:
    """The state of one results app. ``fail(exc)`` turns a store error into the HTTPException to raise."""

    def __init__(self, store_factory: Callable[[], Any], *, fail: Callable[[Exception], HTTPException],
                 dag_of: Callable[[str], str | None], ui_base: str):
        self.env = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=select_autoescape(["html"]))
        self.env.globals["fmt"] = fmt
        self.fail, self.dag_of, self.ui_base = fail, dag_of, ui_base
        self.results, self.pngs, self.trends = LRU(32), LRU(64), LRU(32)
        self._store_factory, self._state, self._lock = store_factory, {}, threading.Lock()

    def store(self):
        with self._lock:
            if "store" not in self._state:
                self._state["store"] = self._store_factory()
            return self._state["store"]

    def page(self, request: Request, name: str, viewer: Viewer, **ctx) -> HTMLResponse:
        s = self._state.get("store")
        html = self.env.get_template(name).render(root=request.scope.get("root_path", "").rstrip("/"),
                                                  store_url=s.url() if s is not None else "-", viewer=viewer.name,
                                                  **ctx)
        return HTMLResponse(html)

    def resolve(self, spec: str, viewer: Viewer) -> str:
        """The full run id of ``spec`` (an id, a unique prefix or ``latest``: the newest run the
        viewer may read) as the CLI reads it; 404 naming the candidates when none or several match."""
        try:
            if spec == "latest":
                runs = self.store().list_runs(limit=1, where=lambda r: viewer.can_read(r.get("suite")))
                if not runs:
                    raise DlperfError("no runs in the store that you may read")
                return str(runs[-1].get("run_id"))
            return resolve_run(self.store(), spec)
        except DlperfError as exc:
            raise HTTPException(404, str(exc)) from None

    def suite_of(self, run_id: str, viewer: Viewer) -> str:
        """The run's suite; 403 unless the viewer may read it (before any object is read)."""
        try:
            suite = self.store().locate(run_id)["suite"]
        except DlperfError as exc:
            raise self.fail(exc) from None
        forbid_unless_readable(viewer, suite)
        return suite

    def result_of(self, run_id: str) -> dict:
        """The run's result document; one stored before publish checked its values and holding
        one no page can show is refused in one line (a StoreError, shown as an error page)."""
        return self.results.get(run_id, lambda: shown_result(run_id, self.store().read_result(run_id)))


def previous_run(store: Any, suite: str, run_id: str) -> str | None:
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

"""The results app outside Airflow (FastAPI TestClient on a real local store): the
``authorize`` dependency guards every route, a viewer sees only the suites it may read, the
compare view, downloads and the trend cache. (The same app inside a real api-server behind
Airflow's auth manager: tests/integration/test_results_page.py.)"""

import io

import pandas as pd
import pytest
from fastapi import Header, HTTPException
from fastapi.testclient import TestClient

from tests.fixtures import synth
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.app import create_app
from dlperf_tasks.store.store import Store


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    work = tmp_path_factory.mktemp("web")
    store = Store.from_url(f"file://{work / 'store'}")
    results = synth.nightly_results(6, trials=3, plant={5: {"mxnet-bert/bz32/fp32/4n8g": 0.85}})
    other = synth.nightly_results(2, seed=3)
    for r in other:
        r["run"]["suite"] = "smoke"
        r["run"]["run_id"] = r["run"]["run_id"].replace("nightly", "smoke")
        for c in r["cells"]:
            c["cell_id"] = c["cell_id"].replace("mxnet-bert/", "smoke/")
    synth.seed_store(store, results + other, str(work / "runs"), report=True)

    def authorize(x_user: str | None = Header(default=None)):
        if x_user is None:
            raise HTTPException(401, "Not authenticated")
        return Viewer(name=x_user, suites=frozenset({"mxnet-bert"} if x_user == "alice" else set()),
                      other_suites=False, known=frozenset({"mxnet-bert", "smoke"}))

    app = create_app(lambda: store, authorize=authorize, dag_of=lambda s: {"mxnet-bert": "dlperf_mxnet"}.get(s))
    return TestClient(app), results, other, app


def test_every_route_needs_the_dependency(client):
    c, results, other, app = client
    rid = results[-1]["run"]["run_id"]
    paths = {r.path for r in app.routes if hasattr(r, "methods")}
    assert {"/", "/healthz", "/runs/{run_id}", "/compare", "/trend.png", "/runs/{run_id}/download.{fmt}"} <= paths
    for path in ("/", "/healthz", "/api/runs", f"/runs/{rid}", f"/runs/{rid}/download.csv", f"/compare?b={rid}",
                 f"/runs/{rid}/files/result.json", "/trend.png?suite=mxnet-bert&cell=4n8g/bz32/fp32"):
        assert c.get(path).status_code == 401, path
        assert c.get(path, headers={"x-user": "alice"}).status_code == 200, path


def test_viewer_sees_only_readable_suites(client):
    c, results, other, _ = client
    srid = other[-1]["run"]["run_id"]
    assert c.get(f"/runs/{srid}", headers={"x-user": "alice"}).status_code == 403
    assert c.get(f"/runs/{srid}/download.json", headers={"x-user": "alice"}).status_code == 403
    page = c.get("/", headers={"x-user": "alice"}).text
    assert 'data-suite="mxnet-bert"' in page and 'data-suite="smoke"' not in page
    assert {r["suite"] for r in c.get("/api/runs?limit=100", headers={"x-user": "alice"}).json()} == {"mxnet-bert"}
    assert c.get("/trend?suite=smoke&cell=4n8g/bz32/fp32", headers={"x-user": "alice"}).status_code == 403


def test_run_page_links_and_downloads(client):
    c, results, _, _ = client
    rid, prev = results[-1]["run"]["run_id"], results[-2]["run"]["run_id"]
    page = c.get(f"/runs/{rid}", headers={"x-user": "alice"}).text
    assert 'class="airflow-run" href="/dags/dlperf_mxnet/runs/scheduled__' in page
    assert f'href="/compare?a={prev}&amp;b={rid}"' in page
    df = pd.read_parquet(io.BytesIO(c.get(f"/runs/{rid}/download.parquet", headers={"x-user": "alice"}).content))
    assert len(df) == 8 * 3
    assert c.get(f"/runs/{rid}/download.xml", headers={"x-user": "alice"}).status_code == 404
    assert c.get(f"/runs/{rid}/files/manifest.json", headers={"x-user": "alice"}).status_code == 404


def test_compare_view_defaults_to_previous_and_says_what_it_cannot_decide(client):
    c, results, _, _ = client
    rid = results[-1]["run"]["run_id"]
    page = c.get(f"/compare?b={rid}", headers={"x-user": "alice"}).text
    assert 'data-verdict="slower">\n <td class="l">mxnet-bert/bz32/fp32/4n8g' in page
    assert "verdicts:" in page
    first = results[0]["run"]["run_id"]
    assert c.get(f"/compare?b={first}", headers={"x-user": "alice"}).status_code == 404


def test_trend_png_capped_and_cached(client):
    c, *_ = client
    url = "/trend.png?suite=mxnet-bert&cell=4n8g/bz32/fp32&last=5"
    assert c.get(url.replace("last=5", "last=366"), headers={"x-user": "alice"}).status_code == 422
    first = c.get(url, headers={"x-user": "alice"})
    again = c.get(url, headers={"x-user": "alice"})
    assert first.headers["x-dlperf-cache"] == "miss" and again.headers["x-dlperf-cache"] == "hit"
    assert first.content == again.content and first.content[:4] == b"\x89PNG"


def test_dag_run_link_target_redirects_to_the_runs_results(client):
    c, results, _, _ = client
    r = results[-1]["run"]
    resp = c.get(f"/dag-runs/dlperf_mxnet/{r['dag_run_id']}", headers={"x-user": "alice"}, follow_redirects=False)
    assert resp.status_code == 307 and resp.headers["location"] == f"/runs/{r['run_id']}"
    assert c.get("/dag-runs/dlperf_mxnet/manual__none", headers={"x-user": "alice"}).status_code == 404
    assert c.get(f"/dag-runs/dlperf_mxnet/{r['dag_run_id']}").status_code == 401


def test_dag_run_tab_without_results_is_a_page_that_says_why(client):
    """The "DLPerf results" tab of a DAG run (and of its tasks) shows
    ``/dag-runs/<dag>/<run>`` inside the Airflow frame, for every DAG: with nothing to show it
    is an HTML page saying why, not a JSON error."""
    c, _, _, _ = client
    for dag, words in (("dlperf_mxnet", "nothing published by this DAG run (yet)"),
                       ("example_bash_operator", "not a dlperf DAG")):
        resp = c.get(f"/dag-runs/{dag}/manual__none", headers={"x-user": "alice", "accept": "text/html"})
        assert resp.status_code == 404 and resp.headers["content-type"].startswith("text/html")
        assert words in resp.text and "<h1>" in resp.text and '"detail"' not in resp.text


def test_login_redirect_only_for_a_browser_opening_a_page():
    from dlperf_tasks.web.access import login_redirect

    html = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    got = login_redirect("GET", html, "/auth/login", "http://h:8080/dlperf/?x=1")
    assert got == "/auth/login?next=http%3A%2F%2Fh%3A8080%2Fdlperf%2F%3Fx%3D1"
    assert login_redirect("GET", "application/json", "/auth/login", "http://h/dlperf/") is None
    assert login_redirect("GET", "*/*", "/auth/login", "http://h/dlperf/") is None  # curl, urllib
    assert login_redirect("POST", html, "/auth/login", "http://h/dlperf/") is None
    assert login_redirect("GET", html, "/auth/login?a=b", "http://h/d").startswith("/auth/login?a=b&next=")


def test_authorize_runs_once_per_request_and_two_apps_keep_their_own_store(tmp_path):
    """The routes reuse the app-level ``authorize`` answer (one call per request), and each app
    serves its own store and viewer (the page modules' routers are shared between apps)."""
    calls = []

    def make(name: str):
        store = Store.from_url(f"file://{tmp_path / name}")
        synth.seed_store(store, synth.nightly_results(1, trials=1), str(tmp_path / f"{name}-runs"))

        def authorize():
            calls.append(name)
            return Viewer(name=name, suites=frozenset(), other_suites=True)

        return TestClient(create_app(lambda: store, authorize=authorize)), store

    (ca, sa), (cb, sb) = make("a"), make("b")
    for path in ("/healthz", "/api/runs", "/"):
        assert ca.get(path).status_code == 200
    assert calls == ["a", "a", "a"]
    assert cb.get("/healthz").json() == {"ok": True, "user": "b"}
    assert sa.url() in ca.get("/").text and sb.url() in cb.get("/").text and sa.url() not in cb.get("/").text


def test_run_pages_take_latest_and_prefixes_and_a_missing_run_is_a_page(client):
    c, results, other, _ = client
    alice = {"x-user": "alice"}
    rid = results[-1]["run"]["run_id"]
    r = c.get("/runs/latest", headers=alice, follow_redirects=False)  # alice's newest readable run
    assert r.status_code == 307 and r.headers["location"].endswith(f"/runs/{rid}")
    r = c.get(f"/runs/{rid[:-1]}", headers=alice)  # a unique prefix, as the CLI takes it
    assert r.status_code == 200 and f"Run {rid}" in r.text
    page = c.get(f"/compare?b={rid[:-1]}&a={results[-2]['run']['run_id'][:-1]}", headers=alice)
    assert page.status_code == 200 and rid in page.text
    browser = dict(alice, accept="text/html,application/xhtml+xml")
    for spec, why in (("no-such-run", "no-such-run"), ("2026-01", "2026-01")):  # missing; ambiguous
        r = c.get(f"/runs/{spec}", headers=browser)
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html"), spec
        assert "<h1>404: not found</h1>" in r.text and why in r.text and not r.text.startswith("{")
    api = c.get("/runs/no-such-run", headers=alice)  # an API client keeps its JSON
    assert api.status_code == 404 and "detail" in api.json()
    assert c.get(f"/runs/{other[-1]['run']['run_id'][:-1]}", headers=alice).status_code == 403


def test_run_page_shows_each_cells_flags_in_the_one_wording(client):
    c, results, _, _ = client
    from dlperf_tasks.report.flags import flags_text

    rid = results[-1]["run"]["run_id"]
    page = c.get(f"/runs/{rid}", headers={"x-user": "alice"}).text
    wanted = [flags_text(cell) for cell in results[-1]["cells"] if flags_text(cell)]
    assert all(w.replace(">", "&gt;") in page for w in wanted)


def test_the_error_page_leaves_a_sign_in_redirect_as_it_is(tmp_path):
    def authorize():
        raise HTTPException(303, "log in first", headers={"Location": "/auth/login?next=x"})

    app = create_app(lambda: Store.from_url(f"file://{tmp_path}"), authorize=authorize)
    r = TestClient(app).get("/runs/latest", headers={"accept": "text/html"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/auth/login?next=x"

"""The results page inside a REAL Airflow api-server, behind Airflow's auth manager, loaded
in a REAL headless Chromium (logged in through the UI's ``_token`` JWT cookie).

The test seeds a local store (real publish path) with 31 synthetic nightly runs whose last
run has a planted throughput drop and a planted scaling drop, records the regression check,
and starts ``airflow api-server`` (isolated AIRFLOW_HOME, SQLite) with the simple auth
manager NOT in all-admins mode: users ``alice`` (viewer: may read the dlperf DAGs) and
``bob`` (no role: authenticated, may read no DAG), passwords from a file the test writes.

Checks: anonymous, a forged or garbage token, and bob are refused on every
route (``/healthz`` included); alice gets the pages, with links to the Airflow DAG run and
task logs, result.json, report.md, plots, downloads (JSON/CSV/Parquet) and a compare view;
``/trend.png`` refuses ``last`` above 365 and serves repeats from its cache.
Screenshots go to tests/_artifacts/.
"""

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import jwt
import pandas as pd
import pytest

from tests.fixtures import synth
from dlperf_tasks.history.check import check_run
from dlperf_tasks.store.store import Store
from tests.integration._browser import Browser

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "_artifacts"
BIN = Path(sys.executable).parent
T_CELL = "mxnet-bert/bz24/fp32/1n1g"
S_CELL = "mxnet-bert/bz32/fp32/4n8g"
DAG_RUN = "scheduled__2026-01-31T01:00:00+00:00"
USERS = {"alice": ("viewer", "alice-pw-1"), "bob": ("", "bob-pw-2")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _req(url: str, token: str | None = None, cookie: str | None = None, data: dict | None = None,
         timeout: float = 30):
    """(status, headers, body) of a request; HTTP errors are returned, not raised."""
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers["Cookie"] = f"_token={cookie}"
    body = None
    if data is not None:
        body, headers["Content-Type"] = json.dumps(data).encode(), "application/json"
    req = urllib.request.Request(url, headers=headers, data=body)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory):
    work = tmp_path_factory.mktemp("page")
    url = f"file://{work / 'store'}"
    store = Store.from_url(url)
    results = synth.nightly_results(31, plant={30: {T_CELL: 0.94, S_CELL: 0.94}},
                                    env_changes={30: {"nccl": "2.19.3"}})
    results[-1]["run"]["dag_run_id"] = DAG_RUN
    results[-1]["cells"][0]["cv"] = 0.42  # a noisy trial set, flagged in the table
    synth.seed_store(store, results, str(work / "runs"), plots_for_last=1, report=True)
    rid = results[-1]["run"]["run_id"]
    rep = check_run(store, rid, record=True, notify_target="", log=None)
    assert {(f.kind, f.cell_id) for f in rep.findings} == {("throughput", T_CELL), ("scaling", S_CELL)}
    return url, store, results


@pytest.fixture(scope="module")
def api_server(airflow_db, seeded_store, tmp_path_factory):
    port = _free_port()
    logs = tmp_path_factory.mktemp("api-logs")
    pw_file = logs / "passwords.json"
    pw_file.write_text(json.dumps({u: pw for u, (_, pw) in USERS.items()}))
    env = dict(os.environ, DLPERF_STORE_URL=seeded_store[0],
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(f"{u}:{r}" for u, (r, _) in USERS.items()),
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(pw_file),
               AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}")
    log = open(logs / "api-server.log", "wb")
    proc = subprocess.Popen([str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=str(airflow_db))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if _req(f"{url}/api/v2/monitor/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise AssertionError("api-server did not start:\n"
                                     + (logs / "api-server.log").read_text(errors="replace")[-4000:])
            time.sleep(1)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def login(url: str, user: str) -> str:
    status, _, body = _req(f"{url}/auth/token", data={"username": user, "password": USERS[user][1]})
    assert status == 201, body
    return json.loads(body)["access_token"]


@pytest.fixture(scope="module")
def tokens(api_server):
    return {u: login(api_server, u) for u in USERS}


@pytest.fixture(scope="module")
def browser(api_server, tokens):
    b = Browser(api_server)
    b.set_token(tokens["alice"])
    yield b
    b.close()


def test_every_route_refuses_anonymous_bad_token_and_unauthorised_user(api_server, seeded_store, tokens):
    rid = seeded_store[2][-1]["run"]["run_id"]
    routes = ["/dlperf/", "/dlperf/healthz", "/dlperf/api/runs", f"/dlperf/runs/{rid}",
              f"/dlperf/runs/{rid}/plots/bert-base_fp32_throughput.png", f"/dlperf/runs/{rid}/files/result.json",
              f"/dlperf/runs/{rid}/download.csv", f"/dlperf/compare?b={rid}",
              "/dlperf/trend?suite=mxnet-bert&cell=4n8g/bz32/fp32", "/dlperf/trend.png?suite=mxnet-bert&cell=4n8g/bz32/fp32"]
    claims = jwt.decode(tokens["alice"], options={"verify_signature": False})
    forged = jwt.encode(dict(claims, role="admin"), "not-the-secret-" * 5, algorithm="HS512")
    for path in routes:
        status, _, body = _req(api_server + path)
        assert status == 401, (path, status, body[:200])
        assert b"samples/s" not in body and b"file://" not in body  # nothing of the results leaks
        for bad in ("garbage", forged):
            assert _req(api_server + path, token=bad)[0] == 403, path
            assert _req(api_server + path, cookie=bad)[0] == 403, path
        status, _, body = _req(api_server + path, token=tokens["bob"])
        assert status == 403 and b"may not read the dlperf DAGs" in body, (path, status, body[:200])
        status, _, body = _req(api_server + path, token=tokens["alice"])
        assert status == 200, (path, status, body[:300])
        assert _req(api_server + path, cookie=tokens["alice"])[0] == 200, path


def test_plugin_registered_with_extra_link(api_server, seeded_store, tokens):
    status, _, body = _req(f"{api_server}/api/v2/plugins", token=tokens["alice"])
    assert status == 200, body
    p = {p["name"]: p for p in json.loads(body)["plugins"]}["dlperf_results"]
    assert p["fastapi_apps"][0]["url_prefix"] == "/dlperf"
    assert p["external_views"][0]["url_route"] == "dlperf-results"
    assert any("DlperfResultsLink" in str(x) for x in p["global_operator_extra_links"]), p
    # the link's target (what the publish task's button opens) redirects to the run's page
    rid = seeded_store[2][-1]["run"]["run_id"]
    req = urllib.request.Request(f"{api_server}/dlperf/dag-runs/dlperf_mxnet/{urllib.parse.quote(DAG_RUN, safe='')}",
                                 headers={"Authorization": f"Bearer {tokens['alice']}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200 and resp.url.endswith(f"/dlperf/runs/{rid}")
        assert f"Run {rid}" in resp.read().decode()


def test_trend_png_bounded_and_cached(api_server, tokens):
    base = f"{api_server}/dlperf/trend.png?suite=mxnet-bert&cell=4n8g/bz32/fp32"
    assert _req(base + "&last=5000", token=tokens["alice"])[0] == 422
    status, h1, png1 = _req(base + "&last=30", token=tokens["alice"])
    status2, h2, png2 = _req(base + "&last=30", token=tokens["alice"])
    assert status == status2 == 200 and png1[:8] == b"\x89PNG\r\n\x1a\n" and png1 == png2
    assert (h1["X-Dlperf-Cache"], h2["X-Dlperf-Cache"]) in (("miss", "hit"), ("hit", "hit"))
    assert "private" in h2["Cache-Control"]


def test_anonymous_browser_is_sent_to_the_login_page(api_server, seeded_store):
    """A bookmarked page opened without a session lands on Airflow's login page
    (not a raw JSON 401), which brings the user back after logging in; API clients still get
    the 401 (test_every_route_refuses_anonymous_bad_token_and_unauthorised_user)."""
    rid = seeded_store[2][-1]["run"]["run_id"]
    b = Browser(api_server)
    try:
        for path, shot in (("/dlperf/", "results_anonymous_login.png"), (f"/dlperf/runs/{rid}", None)):
            dom = b.open(f"{api_server}{path}", ARTIFACTS / shot if shot else None, settle=60,
                         wait_for="input[type=password]")
            url = b.evaluate("location.href")
            assert "/auth/login" in url and urllib.parse.quote(path, safe="") in url, url
            assert "password" in dom.lower() and "Not authenticated" not in dom and "samples/s" not in dom
        b.set_token("garbage")  # a bad or expired session: the same
        b.open(f"{api_server}/dlperf/", settle=60, wait_for="input[type=password]")
        assert "/auth/login" in b.evaluate("location.href")
    finally:
        b.close()
    status, headers, _ = _req(f"{api_server}/dlperf/")
    assert status == 401


def test_run_page_in_chromium(api_server, seeded_store, browser):
    _, _, results = seeded_store
    rid = results[-1]["run"]["run_id"]
    dom = browser.open(f"{api_server}/dlperf/runs/{rid}", ARTIFACTS / "results_run_page.png")
    assert f"Run {rid}" in dom and "signed in as alice" in dom
    for c in results[-1]["cells"]:
        assert c["cell_id"] in dom
        assert f"{c['median_speed']:.2f}" in dom
    findings = dom[dom.index('class="findings"'):dom.index('class="cells"')]
    assert findings.count('class="flag"') == 2
    assert "scaling" in findings and "throughput" in findings and T_CELL in findings and S_CELL in findings
    assert "nccl: 2.18.5" in findings and "detectable" in findings
    assert dom.count('class="tag noisy-flag cell-flags"') == 1  # the CV 0.42 cell
    assert 'noisy: CV 42.00% &gt; 5%' in dom  # report/flags.py's wording
    imgs = re.findall(r'<img[^>]*class="plot"[^>]*>', dom)
    assert len(imgs) == 2, imgs
    for tag in imgs:
        m = re.search(r'data-loaded="(\d+)"', tag)
        assert m and int(m.group(1)) > 300, tag
    assert (ARTIFACTS / "results_run_page.png").stat().st_size > 20000


def test_run_page_links_work(api_server, seeded_store, browser, tokens):
    _, _, results = seeded_store
    rid = results[-1]["run"]["run_id"]
    dom = browser.open(f"{api_server}/dlperf/runs/{rid}")
    hrefs = dict((cls, h.replace("&amp;", "&")) for cls, h in re.findall(r'<a class="([\w-]+)" href="([^"]+)"', dom))
    quoted = urllib.parse.quote(DAG_RUN, safe="")
    assert hrefs["airflow-run"] == f"/dags/dlperf_mxnet/runs/{quoted}"
    logs = re.findall(r'<a class="airflow-log" href="([^"]+)"', dom)
    assert f"/dags/dlperf_mxnet/runs/{quoted}/tasks/publish" in logs
    # the Airflow UI serves the DAG run page (its SPA) to the logged-in user
    assert _req(api_server + hrefs["airflow-run"], cookie=tokens["alice"])[0] == 200
    files = re.findall(r'<a class="file" href="([^"]+)"', dom)
    assert [f.rsplit("/", 1)[-1] for f in files] == ["result.json", "report.md"]
    got = json.loads(_req(api_server + files[0], token=tokens["alice"])[2])
    assert got["run"]["run_id"] == rid
    assert b"|" in _req(api_server + files[1], token=tokens["alice"])[2]
    for p in re.findall(r'<a class="plotlink" href="([^"]+)"', dom):
        assert _req(api_server + p, token=tokens["alice"])[2][:4] == b"\x89PNG"
    downloads = {h.rsplit(".", 1)[-1]: h for h in re.findall(r'<a class="download" href="([^"]+)"', dom)}
    assert set(downloads) == {"json", "csv", "parquet"}
    n_trials = sum(len(c["trials"]) for c in results[-1]["cells"])
    assert json.loads(_req(api_server + downloads["json"], token=tokens["alice"])[2])["run"]["run_id"] == rid
    csv_text = _req(api_server + downloads["csv"], token=tokens["alice"])[2].decode()
    assert csv_text.splitlines()[0].startswith("run_id,suite,cell_id") and len(csv_text.splitlines()) == n_trials + 1
    df = pd.read_parquet(io.BytesIO(_req(api_server + downloads["parquet"], token=tokens["alice"])[2]))
    assert len(df) == n_trials and set(df.cell_id) == {c["cell_id"] for c in results[-1]["cells"]}


def test_compare_view_in_chromium(api_server, seeded_store, browser):
    _, _, results = seeded_store
    rid, prev = results[-1]["run"]["run_id"], results[-2]["run"]["run_id"]
    dom = browser.open(f"{api_server}/dlperf/runs/{rid}")
    href = re.search(r'<a class="compare-prev" href="([^"]+)"', dom).group(1).replace("&amp;", "&")
    dom = browser.open(api_server + href, ARTIFACTS / "results_compare.png")
    assert f'value="{prev}" selected' in dom and f'value="{rid}" selected' in dom
    rows = re.findall(r'data-verdict="(\w+)">\s*<td class="l">([^<]+)</td>', dom)
    by = {cid: v for v, cid in rows}
    assert by[T_CELL] == "slower" and by[S_CELL] == "slower", by
    assert "verdicts:" in dom and "history (29 runs)" in dom


def test_index_and_trend_pages_in_chromium(api_server, seeded_store, browser):
    _, _, results = seeded_store
    dom = browser.open(f"{api_server}/dlperf/", ARTIFACTS / "results_index.png")
    assert 'data-suite="mxnet-bert"' in dom
    assert results[-1]["run"]["run_id"] in dom and "2 finding(s)" in dom
    assert dom.count("/dlperf/runs/") == 20  # the 20 most recent runs
    dom = browser.open(f"{api_server}/dlperf/trend?suite=mxnet-bert&cell=4n8g/bz32/fp32",
                       ARTIFACTS / "results_trend.png")
    assert f"Trend of {S_CELL}" in dom
    m = re.search(r'<img[^>]*data-loaded="(\d+)"', dom)
    assert m and int(m.group(1)) > 500
    assert dom.count("/dlperf/runs/") == 31


def test_page_embedded_in_airflow_ui(api_server, browser):
    """The navigation link opens the page inside the Airflow UI (/plugin/dlperf-results: an
    iframe on /dlperf/), for the logged-in user."""
    dom = browser.open(f"{api_server}/plugin/dlperf-results", ARTIFACTS / "results_in_airflow_ui.png",
                       settle=90, wait_for="iframe[src]")
    m = re.search(r'<iframe[^>]*src="([^"]+)"', dom)
    assert m, dom[-3000:]
    assert m.group(1).rstrip("/").endswith("/dlperf")

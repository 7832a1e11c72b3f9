"""The results page inside a REAL Airflow api-server, loaded in a REAL headless Chromium.

The test seeds a local store (real publish path) with 31 synthetic nightly runs whose last
run has a planted throughput drop and a planted scaling drop, records the regression check,
starts ``airflow api-server`` (isolated AIRFLOW_HOME from tests/fixtures/airflow_env.py,
SQLite) with plugins/dlperf_results.py, and checks:

- the plugin is registered (``/api/v2/plugins`` lists the FastAPI app and the nav link);
- the run page rendered by Chromium holds the cells table, the findings table and plot
  ``<img>`` elements that really loaded (the page's onload hook writes the decoded width);
- the index lists the runs of the suite; the trend page draws its plot.

Screenshots go to tests/_artifacts/.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from dlperf_tasks.history import synth
from dlperf_tasks.history.check import check_run
from dlperf_tasks.store.store import Store

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "_artifacts"
BIN = Path(sys.executable).parent
T_CELL = "mxnet-bert/bz24/fp32/1n1g"
S_CELL = "mxnet-bert/bz32/fp32/4n8g"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None, timeout: float = 30):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.headers.get("Content-Type"), resp.read()


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("chromium not installed: apt-get install -y chromium")


def browse(url: str, screenshot: Path | None = None, size: str = "1400,2200") -> str:
    """DOM of ``url`` after load (and its screenshot), by headless Chromium."""
    profile = tempfile.mkdtemp(prefix="chromium-")
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--window-size={size}",
            "--virtual-time-budget=15000", "--hide-scrollbars"]
    try:
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            shot = subprocess.run(base + [f"--screenshot={screenshot}", url], capture_output=True, text=True,
                                  timeout=120)
            assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-2000:]
        return dom.stdout
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory):
    work = tmp_path_factory.mktemp("page")
    url = f"file://{work / 'store'}"
    store = Store.from_url(url)
    results = synth.nightly_results(31, plant={30: {T_CELL: 0.94, S_CELL: 0.94}},
                                    env_changes={30: {"nccl": "2.19.3"}})
    synth.seed_store(store, results, str(work / "runs"), plots_for_last=1, report=True)
    rid = results[-1]["run"]["run_id"]
    rep = check_run(store, rid, record=True, notify_target="", log=None)
    assert {(f.kind, f.cell_id) for f in rep.findings} == {("throughput", T_CELL), ("scaling", S_CELL)}
    return url, store, results


@pytest.fixture(scope="module")
def api_server(airflow_db, seeded_store, tmp_path_factory):
    port = _free_port()
    logs = tmp_path_factory.mktemp("api-logs")
    env = dict(os.environ, DLPERF_STORE=seeded_store[0])
    log = open(logs / "api-server.log", "wb")
    proc = subprocess.Popen([str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=str(airflow_db))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if _get(f"{url}/dlperf/healthz", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise AssertionError("api-server did not serve /dlperf/healthz:\n"
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


def test_plugin_registered_in_airflow(api_server):
    # simple auth manager with all_admins (airflow.cfg.template): GET /auth/token needs no credentials
    token = json.loads(_get(f"{api_server}/auth/token")[2])["access_token"]
    _, _, body = _get(f"{api_server}/api/v2/plugins", token)
    plugins = {p["name"]: p for p in json.loads(body)["plugins"]}
    p = plugins["dlperf_results"]
    assert p["fastapi_apps"][0]["url_prefix"] == "/dlperf"
    view = p["external_views"][0]
    assert view["href"] == "/dlperf/" and view["destination"] == "nav" and view["url_route"] == "dlperf-results"


def test_run_page_in_chromium(api_server, seeded_store):
    _, _, results = seeded_store
    rid = results[-1]["run"]["run_id"]
    dom = browse(f"{api_server}/dlperf/runs/{rid}", ARTIFACTS / "results_run_page.png")
    assert f"Run {rid}" in dom
    # the cells table: every cell with its median
    for c in results[-1]["cells"]:
        assert c["cell_id"] in dom
        assert f"{c['median_speed']:.2f}" in dom
    # the findings table: both planted regressions, with the environment change
    findings = dom[dom.index('class="findings"'):dom.index('class="cells"')]
    assert findings.count('class="flag"') == 2
    assert "scaling" in findings and "throughput" in findings and T_CELL in findings and S_CELL in findings
    assert "nccl: 2.18.5" in findings
    # plots: <img> elements that the browser decoded (onload hook -> data-loaded = naturalWidth)
    imgs = re.findall(r'<img[^>]*class="plot"[^>]*>', dom)
    assert len(imgs) == 2, imgs
    for tag in imgs:
        m = re.search(r'data-loaded="(\d+)"', tag)
        assert m and int(m.group(1)) > 300, tag
    assert (ARTIFACTS / "results_run_page.png").stat().st_size > 20000


def test_index_and_trend_pages_in_chromium(api_server, seeded_store):
    _, _, results = seeded_store
    dom = browse(f"{api_server}/dlperf/", ARTIFACTS / "results_index.png", size="1400,1200")
    assert 'data-suite="mxnet-bert"' in dom
    assert results[-1]["run"]["run_id"] in dom and "2 finding(s)" in dom
    assert dom.count("/dlperf/runs/") == 20  # the 20 most recent runs
    dom = browse(f"{api_server}/dlperf/trend?suite=mxnet-bert&cell=4n8g/bz32/fp32",
                 ARTIFACTS / "results_trend.png", size="1400,1400")
    assert f"Trend of {S_CELL}" in dom
    m = re.search(r'<img[^>]*data-loaded="(\d+)"', dom)
    assert m and int(m.group(1)) > 500
    assert dom.count("/dlperf/runs/") == 31


def test_archived_and_rendered_plots_served(api_server, seeded_store):
    _, _, results = seeded_store
    # newest run: archived PNG; an older run published without plots: drawn from result.json
    for r in (results[-1], results[0]):
        status, ctype, body = _get(f"{api_server}/dlperf/runs/{r['run']['run_id']}/plots/bert-base_fp32_throughput.png")
        assert status == 200 and ctype == "image/png" and body[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(urllib.error.HTTPError) as ei:
        _get(f"{api_server}/dlperf/runs/no-such-run")
    assert ei.value.code == 404


def test_page_embedded_in_airflow_ui(api_server):
    """The navigation link opens the page inside the Airflow UI (/plugin/dlperf-results: an
    iframe on /dlperf/). Logged in through the simple auth manager's all-admins login."""
    dom = browse(f"{api_server}/auth/token/login?next=/plugin/dlperf-results", ARTIFACTS / "results_in_airflow_ui.png",
                 size="1600,1100")
    m = re.search(r'<iframe[^>]*src="([^"]+)"', dom)
    assert m, dom[-3000:]
    assert m.group(1).rstrip("/").endswith("/dlperf")
    assert "DLPerf results" in dom

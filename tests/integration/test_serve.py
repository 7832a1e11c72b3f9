"""``dlperf serve``: the embedded default as a service. Real api-server, scheduler,
dag-processor and triggerer; login with the generated password; DAGs unpaused as asked;
Ctrl-C stops every component."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dlperf_tasks.airflow.cli_serve import COMPONENTS, USER, expected_dags, password_file
from tests.fixtures.services import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _call(url, token=None, body=None, method="GET"):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(req, timeout=20) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid,ppid"], capture_output=True, text=True).stdout.split("\n")[1:]
    return [int(a) for a, b in (line.split() for line in out if line.strip()) if int(b) == pid]


def test_serve_runs_the_service_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    home = tmp_path / "af"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"DLPERF_HOME": str(tmp_path / "data"), "DLPERF_CLUSTER": "local"})
    out = open(tmp_path / "serve.out", "w+")
    p = subprocess.Popen([sys.executable, "-m", "dlperf_tasks", "serve", "--port", str(port), "--home", str(home),
                          "--dags", "unpause"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True,
                         # as a shell starts a background job (`dlperf serve &`, a CI runner's step): SIGINT
                         # ignored, which Python keeps; Ctrl-C / kill -INT must still stop the service
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        end = time.monotonic() + 420
        text = ""
        while time.monotonic() < end and "Ctrl-C stops" not in text:
            assert p.poll() is None, Path(out.name).read_text()
            time.sleep(2)
            text = Path(out.name).read_text()
        assert "Ctrl-C stops" in text, text
        url = f"http://127.0.0.1:{port}"
        assert url in text and f"user: {USER}" in text and str(password_file(home)) in text
        # every DAG of the catalog was parsed before the unpause (the dag-processor parses file by file)
        unpaused = next(line for line in text.splitlines() if line.startswith("unpaused: "))
        assert set(unpaused.removeprefix("unpaused: ").split(", ")) == expected_dags() >= {"dlperf_smoke", "dlperf_pytorch"}
        children = _children(p.pid)
        assert len(children) == len(COMPONENTS)

        # the printed user and password log in; without them the API refuses
        pw = json.loads(password_file(home).read_text())[USER]
        with pytest.raises(urllib.error.HTTPError):
            _call(f"{url}/api/v2/dags")
        _, tok = _call(f"{url}/auth/token", body={"username": USER, "password": pw}, method="POST")
        _, dags = _call(f"{url}/api/v2/dags?dag_id_pattern=dlperf_", tok["access_token"])
        smoke = [d for d in dags["dags"] if d["dag_id"] == "dlperf_smoke"]
        assert smoke and smoke[0]["is_paused"] is False

        p.send_signal(signal.SIGINT)  # Ctrl-C
        assert p.wait(timeout=120) == 0
        text = Path(out.name).read_text()
        assert "stopped" in text
        for c in children:
            assert not Path(f"/proc/{c}").exists() or "Z" in Path(f"/proc/{c}/stat").read_text().split()[2]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
